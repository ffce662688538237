//! Listing an admin's folder safely: only entries under the pinned root, walked through
//! folder handles without following any symlink (`safe_open`); symlinks, FIFOs, sockets,
//! devices, suspicious names and oversized files are skipped with a reason and a kind.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::safe_open::{EntryKind, EntryStat, Folder, RootDir};

/// Files larger than this are skipped (the extractors have their own, format-specific caps).
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// Directory depth below the root that is scanned.
const MAX_DEPTH: usize = 32;
/// Files per knowledge base.
const MAX_FILES: usize = 100_000;

/// A file to ingest, found under the root (open it with `RootDir::open_file(&path)`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFile {
    /// Path relative to the root, with `/` separators: the document's identity.
    pub path: String,
    pub bytes: u64,
    pub modified: Option<std::time::SystemTime>,
}

/// Why an entry was skipped, as a closed set: what a report shows to users who may not
/// see the folder's listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipKind {
    Unsupported,
    Symlink,
    Fifo,
    Socket,
    Device,
    /// Neither a folder nor a regular file, nor any of the above.
    Special,
    BadName,
    TooLarge,
    TooDeep,
    TooMany,
    Unreadable,
}

/// An entry that was not ingested, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    pub path: String,
    pub kind: SkipKind,
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

/// Lists the files under the pinned `root` that may be ingested.
pub fn scan(root: &RootDir, is_supported: &dyn Fn(&str) -> bool) -> Scan {
    let mut scan = Scan::default();
    visit(root.folder(), "", 0, is_supported, &mut scan);
    scan.files.sort_by(|a, b| a.path.cmp(&b.path));
    scan
}

/// The kind and reason reported for an entry that is not a folder or a regular file.
pub fn skip_for(kind: EntryKind) -> (SkipKind, String) {
    let skip = match kind {
        EntryKind::Symlink => SkipKind::Symlink,
        EntryKind::Fifo => SkipKind::Fifo,
        EntryKind::Socket => SkipKind::Socket,
        EntryKind::Device => SkipKind::Device,
        EntryKind::File | EntryKind::Directory | EntryKind::Other => SkipKind::Special,
    };
    let reason = match kind {
        EntryKind::Symlink => "symlink: not followed".to_string(),
        other => format!("{}: not read", other.describe()),
    };
    (skip, reason)
}

fn visit(
    folder: &Folder,
    prefix: &str,
    depth: usize,
    is_supported: &dyn Fn(&str) -> bool,
    scan: &mut Scan,
) {
    let mut names = match folder.entries() {
        Ok(names) => names,
        Err(err) => {
            let shown = if prefix.is_empty() { "." } else { prefix };
            let reason = format!("cannot read folder: {err}");
            scan.skip(shown.to_string(), SkipKind::Unreadable, reason);
            return;
        }
    };
    names.sort();
    for raw in names {
        let shown = join(prefix, &String::from_utf8_lossy(&raw));
        let Ok(name) = std::str::from_utf8(&raw) else {
            let reason = "file name is not valid UTF-8".to_string();
            scan.skip(shown, SkipKind::BadName, reason);
            continue;
        };
        if let Err(reason) = check_file_name(name) {
            scan.skip(shown, SkipKind::BadName, reason);
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        let stat = match folder.stat_entry(name) {
            Ok(stat) => stat,
            Err(err) => {
                scan.skip(shown, SkipKind::Unreadable, format!("cannot read: {err}"));
                continue;
            }
        };
        match stat.kind {
            EntryKind::Directory if depth + 1 > MAX_DEPTH => {
                let reason = format!("deeper than {MAX_DEPTH} folders");
                scan.skip(shown, SkipKind::TooDeep, reason);
            }
            EntryKind::Directory => match folder.open_folder(name) {
                Ok(inner) => visit(&inner, &shown, depth + 1, is_supported, scan),
                // Replaced by a symlink (or removed) since it was listed.
                Err(err) => {
                    let reason = format!("cannot open folder: {err}");
                    scan.skip(shown, SkipKind::Unreadable, reason);
                }
            },
            EntryKind::File => add_file(shown, name, stat, is_supported, scan),
            other => {
                let (kind, reason) = skip_for(other);
                scan.skip(shown, kind, reason);
            }
        }
    }
}

fn add_file(
    path: String,
    name: &str,
    stat: EntryStat,
    is_supported: &dyn Fn(&str) -> bool,
    scan: &mut Scan,
) {
    if !is_supported(name) {
        let extension = Path::new(name)
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let reason = format!("unsupported format {extension}");
        scan.skip(path, SkipKind::Unsupported, reason.trim_end().to_string());
    } else if stat.bytes > MAX_FILE_BYTES {
        let bytes = stat.bytes;
        let reason = format!("{bytes} bytes exceeds the {MAX_FILE_BYTES}-byte limit");
        scan.skip(path, SkipKind::TooLarge, reason);
    } else if scan.files.len() >= MAX_FILES {
        scan.skip(
            path,
            SkipKind::TooMany,
            format!("more than {MAX_FILES} files"),
        );
    } else {
        scan.files.push(SourceFile {
            path,
            bytes: stat.bytes,
            modified: stat.modified,
        });
    }
}

impl Scan {
    fn skip(&mut self, path: String, kind: SkipKind, reason: String) {
        self.skipped.push(Skipped { path, kind, reason });
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
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
    fn scan_skips_symlinks_special_files_unsupported_and_hidden_files() {
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
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("pipe.md"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(root.join("sock.md")).unwrap();
        let pinned = RootDir::open(&root).unwrap();
        let scan = scan(&pinned, &|name| name.ends_with(".md"));
        let files: Vec<&str> = scan.files.iter().map(|f| f.path.as_str()).collect();
        // Symlinks are never followed, not even to a file inside the folder.
        assert_eq!(files, vec!["sub/a.md"]);
        let reasons: Vec<(&str, SkipKind, &str)> = scan
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.kind, s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                ("b.bin", SkipKind::Unsupported, "unsupported format .bin"),
                ("inside.md", SkipKind::Symlink, "symlink: not followed"),
                ("leak.md", SkipKind::Symlink, "symlink: not followed"),
                ("leakdir", SkipKind::Symlink, "symlink: not followed"),
                ("pipe.md", SkipKind::Fifo, "named pipe (FIFO): not read"),
                ("sock.md", SkipKind::Socket, "socket: not read"),
            ]
        );
    }
}
