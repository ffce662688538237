//! Turning a model reference into a local path: an existing path, a name inside the models
//! folder, or `hf://owner/repo/file` looked up in the Hugging Face offline cache (nothing is
//! ever downloaded at run time).

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
    let cache = hub_cache_dir().ok_or_else(|| {
        not_found("no Hugging Face cache folder: set HF_HUB_CACHE or HF_HOME".into())
    })?;
    cached_file(&cache, repo, file).ok_or_else(|| {
        not_found(format!(
            "not in the offline Hugging Face cache {} (Warden never downloads at run time: \
             copy the repository's snapshot there, or give the file's path)",
            cache.display()
        ))
    })
}

/// The hub cache: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
fn hub_cache_dir() -> Option<PathBuf> {
    let set = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    set("HF_HUB_CACHE")
        .or_else(|| set("HF_HOME").map(|home| home.join("hub")))
        .or_else(|| set("HOME").map(|home| home.join(".cache/huggingface/hub")))
}

/// `models--owner--repo/snapshots/<refs/main>/file`, when that file is there.
fn cached_file(cache: &Path, repo: &str, file: &str) -> Option<PathBuf> {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let revision = std::fs::read_to_string(folder.join("refs/main")).ok()?;
    let revision = revision.trim();
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
    if !plain(revision) {
        return None;
    }
    let path = folder.join("snapshots").join(revision).join(file);
    path.is_file().then_some(path)
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
    fn hf_references_resolve_from_the_offline_cache_only() {
        let cache = tempfile::tempdir().unwrap();
        let folder = cache.path().join("models--owner--repo");
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::create_dir_all(folder.join("snapshots/abc123/sub")).unwrap();
        std::fs::write(folder.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(folder.join("snapshots/abc123/sub/m.gguf"), b"GGUF").unwrap();
        assert_eq!(
            cached_file(cache.path(), "owner/repo", "sub/m.gguf"),
            Some(folder.join("snapshots/abc123/sub/m.gguf"))
        );
        assert_eq!(
            cached_file(cache.path(), "owner/repo", "missing.gguf"),
            None
        );
        assert_eq!(cached_file(cache.path(), "owner/other", "sub/m.gguf"), None);
        // A revision that is not a plain name never leads outside the snapshots.
        std::fs::write(folder.join("refs/main"), "../../x").unwrap();
        assert_eq!(cached_file(cache.path(), "owner/repo", "sub/m.gguf"), None);
    }

    #[test]
    fn missing_reference_names_the_models_folder() {
        let err = resolve("nope.gguf", Path::new("/nonexistent-models")).unwrap_err();
        assert!(err.to_string().contains("models/fetch"));
    }
}
