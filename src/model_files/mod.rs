//! Model files on disk: the manifest of default models, resolving a model reference (a
//! path, a file in the models folder, or `hf://repo/file` in the offline Hugging Face
//! cache), and sha256 verification. Never downloads anything.

mod manifest;
mod resolve;

pub use manifest::{FileState, Manifest, ManifestFile, ManifestModel};
pub use resolve::resolve;

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifest {path} is invalid: {reason}")]
    BadManifest { path: PathBuf, reason: String },
    #[error("model `{reference}` not found: {reason}")]
    NotFound { reference: String, reason: String },
}

/// Hex sha256 of a file, read in blocks.
pub fn sha256_file(path: &Path) -> Result<String, ModelFileError> {
    let io = |source| ModelFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
