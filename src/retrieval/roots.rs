//! Which folders may become knowledge bases. Over HTTP, only folders inside the allowed
//! roots (`--kb-roots`) may be added, and with none configured nothing may (fail closed);
//! the host itself (the CLI, the server's sample on first start) may add any folder.
//! Warden's own data folder and models folder can never be added by anyone, nor a folder
//! inside or containing either. Paths are compared after normalisation, both as written
//! and in canonical form (symlinks resolved), so neither `..` nor a link gets around it.

use std::path::{Component, Path, PathBuf};

use super::source::canonical_root;
use super::RetrievalError;

/// Who asks to add a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddedBy {
    /// The host: `warden kb add`, the server's own sample knowledge base.
    Host,
    /// A client over HTTP: only folders inside the allowed roots.
    Remote,
}

/// Why a folder may not become a knowledge base.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "adding folders over HTTP is turned off: start the server with --kb-roots DIR[,DIR…] \
         (or WARDEN_KB_ROOTS) naming the folders knowledge bases may come from"
    )]
    NoAllowedRoots,
    #[error("{path} is outside the folders knowledge bases may come from ({roots})")]
    OutsideAllowedRoots { path: String, roots: String },
    #[error(
        "{path} is, contains or lies inside Warden's {what}; it can never be a knowledge base"
    )]
    Protected { path: String, what: &'static str },
    #[error("the folder must be given as an absolute path")]
    NotAbsolute,
    #[error("knowledge-base root {path} cannot be used: {reason}")]
    BadAllowedRoot { path: String, reason: String },
}

/// The rule a library applies when a folder is added.
#[derive(Debug, Clone, Default)]
pub struct RootPolicy {
    /// Canonical folders HTTP adds must lie in.
    allowed: Vec<PathBuf>,
    protected: Vec<Protected>,
}

#[derive(Debug, Clone)]
struct Protected {
    /// The folder as written (absolute, normalised) and in canonical form.
    forms: Vec<PathBuf>,
    what: &'static str,
}

impl RootPolicy {
    /// A policy whose HTTP adds must lie in `allowed` (each must be an existing folder).
    pub fn with_allowed_roots(allowed: &[PathBuf]) -> Result<RootPolicy, PolicyError> {
        let mut roots = Vec::with_capacity(allowed.len());
        for root in allowed {
            let canonical = canonical_root(root).map_err(|e| PolicyError::BadAllowedRoot {
                path: root.display().to_string(),
                reason: e.to_string(),
            })?;
            roots.push(canonical);
        }
        Ok(RootPolicy {
            allowed: roots,
            protected: Vec::new(),
        })
    }

    /// Never lets `folder` (Warden's `what`: "data folder", "models folder"), anything
    /// inside it or anything containing it become a knowledge base.
    pub fn protect(&mut self, folder: &Path, what: &'static str) {
        let mut forms = vec![normalize(&absolute(folder))];
        if let Ok(canonical) = folder.canonicalize() {
            forms.push(canonical);
        }
        self.protected.push(Protected { forms, what });
    }

    /// The allowed roots, canonical.
    pub fn allowed_roots(&self) -> &[PathBuf] {
        &self.allowed
    }

    /// Checks that `requested` may be added by `who`; returns its canonical form.
    pub fn check(&self, requested: &Path, who: AddedBy) -> Result<PathBuf, RetrievalError> {
        if who == AddedBy::Remote {
            if self.allowed.is_empty() {
                return Err(PolicyError::NoAllowedRoots.into());
            }
            if !requested.is_absolute() {
                return Err(PolicyError::NotAbsolute.into());
            }
            // Before the path is touched at all: no probing of folders outside the roots.
            self.check_allowed(&normalize(requested), requested)?;
        }
        let written = normalize(&absolute(requested));
        self.check_protected(&written, requested)?;
        let canonical = canonical_root(requested)?;
        self.check_protected(&canonical, requested)?;
        if who == AddedBy::Remote {
            self.check_allowed(&canonical, requested)?;
        }
        Ok(canonical)
    }

    fn check_allowed(&self, path: &Path, requested: &Path) -> Result<(), PolicyError> {
        if self.allowed.iter().any(|root| path.starts_with(root)) {
            return Ok(());
        }
        Err(PolicyError::OutsideAllowedRoots {
            path: requested.display().to_string(),
            roots: self
                .allowed
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn check_protected(&self, path: &Path, requested: &Path) -> Result<(), PolicyError> {
        for protected in &self.protected {
            let overlaps = protected
                .forms
                .iter()
                .any(|form| path.starts_with(form) || form.starts_with(path));
            if overlaps {
                return Err(PolicyError::Protected {
                    path: requested.display().to_string(),
                    what: protected.what,
                });
            }
        }
        Ok(())
    }
}

/// `path` made absolute against the current folder (without touching the file system).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Removes `.` and resolves `..` lexically (never above the root).
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other.as_os_str()),
        }
    }
    normal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(result: Result<PathBuf, RetrievalError>) -> String {
        match result {
            Ok(path) => panic!("accepted {}", path.display()),
            Err(RetrievalError::Policy(err)) => err.to_string(),
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }

    struct Tree {
        _dir: tempfile::TempDir,
        base: PathBuf,
    }

    /// base/{allowed/docs, allowed/data, elsewhere, models/m}
    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        for folder in ["allowed/docs", "allowed/data", "elsewhere", "models/m"] {
            std::fs::create_dir_all(base.join(folder)).unwrap();
        }
        Tree { _dir: dir, base }
    }

    fn policy(tree: &Tree) -> RootPolicy {
        let mut policy = RootPolicy::with_allowed_roots(&[tree.base.join("allowed")]).unwrap();
        policy.protect(&tree.base.join("allowed/data"), "data folder");
        policy.protect(&tree.base.join("models"), "models folder");
        policy
    }

    #[test]
    fn remote_adds_must_lie_inside_an_allowed_root() {
        let tree = tree();
        let policy = policy(&tree);
        let docs = tree.base.join("allowed/docs");
        assert_eq!(policy.check(&docs, AddedBy::Remote).unwrap(), docs);
        let outside = tree.base.join("elsewhere");
        assert!(refusal(policy.check(&outside, AddedBy::Remote)).contains("outside"));
        // `..` and symlinks do not get out.
        let dotted = tree.base.join("allowed/docs/../../elsewhere");
        assert!(refusal(policy.check(&dotted, AddedBy::Remote)).contains("outside"));
        std::os::unix::fs::symlink(&outside, tree.base.join("allowed/link")).unwrap();
        let link = tree.base.join("allowed/link");
        assert!(refusal(policy.check(&link, AddedBy::Remote)).contains("outside"));
        // A missing folder outside the roots is refused without saying whether it exists.
        let missing = tree.base.join("elsewhere/missing");
        assert!(refusal(policy.check(&missing, AddedBy::Remote)).contains("outside"));
        assert!(
            refusal(policy.check(Path::new("allowed/docs"), AddedBy::Remote)).contains("absolute")
        );
        // The host may add any folder.
        assert_eq!(policy.check(&outside, AddedBy::Host).unwrap(), outside);
    }

    #[test]
    fn without_allowed_roots_remote_adds_fail_closed() {
        let tree = tree();
        let policy = RootPolicy::default();
        let docs = tree.base.join("allowed/docs");
        assert!(refusal(policy.check(&docs, AddedBy::Remote)).contains("--kb-roots"));
        assert!(policy.check(&docs, AddedBy::Host).is_ok());
    }

    #[test]
    fn data_and_models_folders_are_never_added() {
        let tree = tree();
        let policy = policy(&tree);
        for who in [AddedBy::Host, AddedBy::Remote] {
            for folder in ["allowed/data", "allowed"] {
                let message = refusal(policy.check(&tree.base.join(folder), who));
                assert!(message.contains("data folder"), "{folder}: {message}");
            }
        }
        for folder in ["models", "models/m"] {
            let message = refusal(policy.check(&tree.base.join(folder), AddedBy::Host));
            assert!(message.contains("models folder"), "{folder}: {message}");
        }
        let message = refusal(policy.check(&tree.base, AddedBy::Host));
        assert!(
            message.contains("can never be a knowledge base"),
            "{message}"
        );
        // Reached through a symlink, or written with `..`, it is still the models folder.
        std::os::unix::fs::symlink(tree.base.join("models"), tree.base.join("elsewhere/m"))
            .unwrap();
        let message = refusal(policy.check(&tree.base.join("elsewhere/m"), AddedBy::Host));
        assert!(message.contains("models folder"), "{message}");
        let dotted = tree.base.join("elsewhere/../models/m");
        assert!(refusal(policy.check(&dotted, AddedBy::Host)).contains("models folder"));
    }

    #[test]
    fn an_allowed_root_must_exist() {
        let error =
            RootPolicy::with_allowed_roots(&[PathBuf::from("/nonexistent/kb-root")]).unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/kb-root"),
            "{error}"
        );
    }
}
