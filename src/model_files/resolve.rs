//! Turning a model reference into a local path: an existing path, a name inside the models
//! folder, or `hf://owner/repo/file` looked up in the Hugging Face offline cache and, only
//! when `HF_ENDPOINT` names an internal mirror, fetched from that mirror.

use std::path::{Path, PathBuf};

use super::ModelFileError;

/// Resolves `reference` against `models_dir`.
pub fn resolve(reference: &str, models_dir: &Path) -> Result<PathBuf, ModelFileError> {
    if let Some(rest) = reference.strip_prefix("hf://") {
        return resolve_hf(reference, rest);
    }
    let direct = PathBuf::from(reference);
    if direct.exists() {
        return Ok(direct);
    }
    let inside = models_dir.join(reference);
    if inside.exists() {
        return Ok(inside);
    }
    Err(ModelFileError::NotFound {
        reference: reference.to_string(),
        reason: format!(
            "no such file, nor {} (run models/fetch for the defaults)",
            inside.display()
        ),
    })
}

fn resolve_hf(reference: &str, rest: &str) -> Result<PathBuf, ModelFileError> {
    let not_found = |reason: String| ModelFileError::NotFound {
        reference: reference.to_string(),
        reason,
    };
    let (repo, file) =
        split_hf(rest).ok_or_else(|| not_found("expected hf://owner/repo/path/to/file".into()))?;
    if let Some(path) = hf_hub::Cache::from_env().model(repo.to_string()).get(file) {
        return Ok(path);
    }
    let endpoint = std::env::var("HF_ENDPOINT").ok().filter(|e| !e.trim().is_empty()).ok_or_else(|| {
        not_found("not in the offline Hugging Face cache, and HF_ENDPOINT (an internal mirror) is not set; \
                   Warden never contacts the public hub on its own"
            .into())
    })?;
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_endpoint(endpoint.clone())
        .with_progress(false)
        .build()
        .map_err(|e| not_found(format!("cannot use mirror {endpoint}: {e}")))?;
    api.model(repo.to_string())
        .get(file)
        .map_err(|e| not_found(format!("mirror {endpoint}: {e}")))
}

/// `owner/repo/dir/file` → (`owner/repo`, `dir/file`).
fn split_hf(rest: &str) -> Option<(&str, &str)> {
    let mut slashes = rest.match_indices('/').map(|(i, _)| i);
    let _owner_end = slashes.next()?;
    let repo_end = slashes.next()?;
    let (repo, file) = (&rest[..repo_end], &rest[repo_end + 1..]);
    (!file.is_empty() && !repo.contains("..") && !file.contains("..")).then_some((repo, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_references_split_into_repo_and_file() {
        assert_eq!(
            split_hf("Qwen/Qwen2.5-0.5B-Instruct-GGUF/q4.gguf"),
            Some(("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q4.gguf"))
        );
        assert_eq!(
            split_hf("owner/repo/sub/f.gguf"),
            Some(("owner/repo", "sub/f.gguf"))
        );
        assert_eq!(split_hf("owner/repo"), None);
        assert_eq!(split_hf("owner/repo/../x"), None);
    }

    #[test]
    fn missing_reference_names_the_models_folder() {
        let err = resolve("nope.gguf", Path::new("/nonexistent-models")).unwrap_err();
        assert!(err.to_string().contains("models/fetch"));
    }
}
