//! Reading an admin's folder safely: only files under the added root, symlinks that leave
//! it are not followed, suspicious names and oversized files are skipped with a reason.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

/// Files larger than this are skipped (the extractors have their own, format-specific caps).
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// Directory depth below the root that is scanned.
const MAX_DEPTH: usize = 32;
/// Files per knowledge base.
const MAX_FILES: usize = 100_000;

/// A file to ingest.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFile {
    /// Path relative to the root, with `/` separators: the document's identity.
    pub path: String,
    pub absolute: PathBuf,
    pub bytes: u64,
    pub modified: Option<std::time::SystemTime>,
}

/// A file that was not ingested, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Scan {
    pub files: Vec<SourceFile>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path} is not a readable folder: {reason}")]
    BadRoot { path: PathBuf, reason: String },
    #[error("invalid name `{name}`: {reason}")]
    BadName { name: String, reason: String },
}

/// Checks a knowledge-base name: 1–64 characters, no path separators, `..`, NUL or
/// control characters, not starting with a dot.
pub fn validate_name(name: &str) -> Result<(), SourceError> {
    let bad = |reason: &str| {
        Err(SourceError::BadName {
            name: name.escape_debug().to_string(),
            reason: reason.into(),
        })
    };
    if name.is_empty() || name.chars().count() > 64 {
        return bad("must be 1 to 64 characters");
    }
    if name.contains(['/', '\\']) || name.contains("..") || name.starts_with('.') {
        return bad("must not contain path separators or `..`, nor start with `.`");
    }
    if name.chars().any(|c| c.is_control()) {
        return bad("must not contain control characters or NUL");
    }
    Ok(())
}

/// The canonical form of a root folder, which must exist and be a directory.
pub fn canonical_root(root: &Path) -> Result<PathBuf, SourceError> {
    let bad = |reason: String| SourceError::BadRoot {
        path: root.to_path_buf(),
        reason,
    };
    let canonical = root.canonicalize().map_err(|e| bad(e.to_string()))?;
    if !canonical.is_dir() {
        return Err(bad("not a directory".into()));
    }
    Ok(canonical)
}

/// Lists the files under `root` (canonical) that may be ingested.
pub fn scan(root: &Path, is_supported: &dyn Fn(&str) -> bool) -> Scan {
    let mut scan = Scan::default();
    visit(root, root, 0, is_supported, &mut scan);
    scan.files.sort_by(|a, b| a.path.cmp(&b.path));
    scan
}

fn visit(
    root: &Path,
    dir: &Path,
    depth: usize,
    is_supported: &dyn Fn(&str) -> bool,
    scan: &mut Scan,
) {
    let relative = |p: &Path| relative_path(root, p);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            scan.skipped.push(Skipped {
                path: relative(dir),
                reason: format!("cannot read folder: {err}"),
            });
            return;
        }
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let shown = relative(&path);
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            scan.skipped.push(Skipped {
                path: shown,
                reason: "file name is not valid UTF-8".into(),
            });
            continue;
        };
        if let Err(reason) = check_file_name(name) {
            scan.skipped.push(Skipped {
                path: shown,
                reason,
            });
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let (is_dir, target) = if kind.is_symlink() {
            match path.canonicalize() {
                Ok(target) if target.starts_with(root) => (target.is_dir(), target),
                Ok(_) => {
                    scan.skipped.push(Skipped {
                        path: shown,
                        reason: "symlink points outside the folder: not followed".into(),
                    });
                    continue;
                }
                Err(_) => {
                    scan.skipped.push(Skipped {
                        path: shown,
                        reason: "broken symlink".into(),
                    });
                    continue;
                }
            }
        } else {
            (kind.is_dir(), path.clone())
        };
        if is_dir {
            if kind.is_symlink() {
                // An in-root folder link would list the same files twice (or loop).
                scan.skipped.push(Skipped {
                    path: shown,
                    reason: "symlinked folder: not followed".into(),
                });
            } else if depth + 1 > MAX_DEPTH {
                scan.skipped.push(Skipped {
                    path: shown,
                    reason: format!("deeper than {MAX_DEPTH} folders"),
                });
            } else {
                visit(root, &path, depth + 1, is_supported, scan);
            }
            continue;
        }
        if !is_supported(name) {
            let extension = Path::new(name)
                .extension()
                .map(|e| format!(".{}", e.to_string_lossy()))
                .unwrap_or_default();
            scan.skipped.push(Skipped {
                path: shown,
                reason: format!("unsupported format {extension}")
                    .trim_end()
                    .to_string(),
            });
            continue;
        }
        let metadata = target.metadata().ok();
        let bytes = metadata.as_ref().map(|m| m.len()).unwrap_or(0);
        let modified = metadata.and_then(|m| m.modified().ok());
        if bytes > MAX_FILE_BYTES {
            scan.skipped.push(Skipped {
                path: shown,
                reason: format!("{bytes} bytes exceeds the {MAX_FILE_BYTES}-byte limit"),
            });
            continue;
        }
        if scan.files.len() >= MAX_FILES {
            scan.skipped.push(Skipped {
                path: shown,
                reason: format!("more than {MAX_FILES} files"),
            });
            continue;
        }
        scan.files.push(SourceFile {
            path: shown,
            absolute: target,
            bytes,
            modified,
        });
    }
}

/// A cheap summary of a scan (names, sizes, modification times): it changes when a file
/// is added, removed or modified, without reading any file.
pub fn fingerprint(scan: &Scan) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in &scan.files {
        (&file.path, file.bytes, file.modified).hash(&mut hasher);
    }
    hasher.finish()
}

/// Names that could be used for traversal or that terminals would mangle.
fn check_file_name(name: &str) -> Result<(), String> {
    if name.chars().any(|c| c.is_control()) {
        return Err("file name contains control characters".into());
    }
    if name.contains('\\') || name == ".." {
        return Err("file name contains a path separator or `..`".into());
    }
    Ok(())
}

fn relative_path(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_separators_dots_or_controls_are_rejected() {
        for bad in [
            "",
            "a/b",
            "a\\b",
            "..",
            "x..y",
            ".hidden",
            "a\0b",
            "tab\there",
            &"x".repeat(65),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["ops", "ops-runbooks_2", "运维手册"] {
            assert!(validate_name(good).is_ok(), "{good:?} rejected");
        }
    }

    #[test]
    fn scan_skips_escaping_symlinks_unsupported_and_hidden_files() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "# secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = canonical_root(dir.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.md"), "# a").unwrap();
        std::fs::write(root.join("b.bin"), [0u8, 1]).unwrap();
        std::fs::write(root.join(".git"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("leak.md")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("leakdir")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/a.md"), root.join("inside.md")).unwrap();
        let scan = scan(&root, &|name| name.ends_with(".md"));
        let files: Vec<&str> = scan.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(files, vec!["inside.md", "sub/a.md"]);
        let reasons: Vec<(&str, &str)> = scan
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.reason.as_str()))
            .collect();
        assert!(
            reasons.contains(&("leak.md", "symlink points outside the folder: not followed")),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&("leakdir", "symlink points outside the folder: not followed")),
            "{reasons:?}"
        );
        assert!(
            reasons.contains(&("b.bin", "unsupported format .bin")),
            "{reasons:?}"
        );
    }
}
