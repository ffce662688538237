//! Opening a knowledge base's folder so that it cannot be turned against the host. The
//! root is opened once without following a symlink (`O_NOFOLLOW | O_DIRECTORY`) and
//! identified by device and inode, which pins it: a root later swapped for another folder
//! or for a symlink is refused. Everything below it is reached relative to its parent's
//! handle, one path component at a time (`openat`), never following a symlink, so a
//! folder or file replaced by a symlink between listing and opening fails to open instead
//! of leading out of the root. A file is read only when the opened handle is a regular
//! file: FIFOs are opened non-blocking (they can never hang a sync) and, like sockets and
//! devices, never read. Unix only (`rustix`).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Device and inode: what identifies a folder however it is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// What a directory entry is, seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Fifo,
    Socket,
    Device,
    Other,
}

/// An entry's kind, size and modification time (`fstatat` without following links).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EntryStat {
    pub kind: EntryKind,
    pub bytes: u64,
    pub modified: Option<SystemTime>,
}

/// Why a knowledge base's root folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("{path} is now a symlink, not the folder that was added; the sync is refused")]
    Symlink { path: PathBuf },
    #[error(
        "{path} is no longer the folder that was added (another folder took its place); the \
         sync is refused: remove the knowledge base and add the folder again if this is intended"
    )]
    Replaced { path: PathBuf },
    #[error("{path} is not a readable folder: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

/// Why a file below the root was not opened for reading.
#[derive(Debug)]
pub enum OpenRefusal {
    /// The path leads through or to something that is not a folder or a regular file
    /// (a symlink, FIFO, socket, device), seen on the opened handle.
    NotRegular(EntryKind),
    /// The path is not a plain relative path of names (empty, `.`, `..`, absolute).
    BadPath,
    Io(std::io::Error),
}

/// An open folder handle; everything below it is opened relative to it.
#[derive(Debug)]
pub struct Folder(OwnedFd);

/// A knowledge base's root folder, open and identified.
#[derive(Debug)]
pub struct RootDir {
    folder: Folder,
    path: PathBuf,
    identity: FileIdentity,
}

impl RootDir {
    /// Opens `path` as a root; its last component must not be a symlink.
    pub fn open(path: &Path) -> Result<RootDir, RootError> {
        let fd = rustix::fs::open(path, folder_flags(), Mode::empty()).map_err(|errno| {
            // `O_NOFOLLOW | O_DIRECTORY` on a symlink fails with `ELOOP` or `ENOTDIR`.
            let is_link = rustix::fs::lstat(path)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink);
            if is_link || errno == Errno::LOOP {
                RootError::Symlink {
                    path: path.to_path_buf(),
                }
            } else {
                RootError::Unreadable {
                    path: path.to_path_buf(),
                    reason: std::io::Error::from(errno).to_string(),
                }
            }
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| RootError::Unreadable {
            path: path.to_path_buf(),
            reason: std::io::Error::from(errno).to_string(),
        })?;
        Ok(RootDir {
            folder: Folder(fd),
            path: path.to_path_buf(),
            identity: FileIdentity {
                // `c_ulong` here, `u64` on 32-bit targets.
                dev: stat.st_dev as u64,
                ino: stat.st_ino as u64,
            },
        })
    }

    /// Opens `path` and checks that it is still the folder identified by `pinned`.
    pub fn open_pinned(path: &Path, pinned: FileIdentity) -> Result<RootDir, RootError> {
        let root = RootDir::open(path)?;
        if root.identity != pinned {
            return Err(RootError::Replaced {
                path: path.to_path_buf(),
            });
        }
        Ok(root)
    }

    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn folder(&self) -> &Folder {
        &self.folder
    }

    /// Opens `relative` (names separated by `/`) for reading, component by component from
    /// the root, never following a symlink; the result is a regular file.
    pub fn open_file(&self, relative: &str) -> Result<File, OpenRefusal> {
        let parts: Vec<&str> = relative.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(OpenRefusal::BadPath);
        }
        let Some((last, folders)) = parts.split_last() else {
            return Err(OpenRefusal::BadPath);
        };
        let mut current: Option<Folder> = None;
        for name in folders {
            let parent = current.as_ref().unwrap_or(&self.folder);
            let next = parent.open_folder(name).map_err(|err| {
                let refused = err.kind() == std::io::ErrorKind::NotADirectory
                    || err.raw_os_error() == Some(Errno::LOOP.raw_os_error());
                match parent.stat_entry(name) {
                    Ok(stat) if refused => OpenRefusal::NotRegular(stat.kind),
                    _ => OpenRefusal::Io(err),
                }
            })?;
            current = Some(next);
        }
        current.as_ref().unwrap_or(&self.folder).open_file(last)
    }
}

impl Folder {
    /// The names in this folder, except `.` and `..`, as raw bytes.
    pub fn entries(&self) -> std::io::Result<Vec<Vec<u8>>> {
        let mut dir = Dir::read_from(&self.0)?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// What `name` is, without following it.
    pub fn stat_entry(&self, name: &str) -> std::io::Result<EntryStat> {
        let stat = rustix::fs::statat(&self.0, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let modified = u64::try_from(stat.st_mtime).ok().map(|secs| {
            let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0);
            SystemTime::UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999))
        });
        Ok(EntryStat {
            kind: kind_of(FileType::from_raw_mode(stat.st_mode)),
            bytes: u64::try_from(stat.st_size).unwrap_or(0),
            modified,
        })
    }

    /// Opens the folder `name` inside this one; a symlink fails (`ELOOP`).
    pub fn open_folder(&self, name: &str) -> std::io::Result<Folder> {
        Ok(Folder(rustix::fs::openat(
            &self.0,
            name,
            folder_flags(),
            Mode::empty(),
        )?))
    }

    /// Opens `name` inside this folder for reading if, and only if, it is a regular file.
    pub fn open_file(&self, name: &str) -> Result<File, OpenRefusal> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.0, name, flags, Mode::empty()).map_err(|errno| {
            if errno == Errno::LOOP {
                OpenRefusal::NotRegular(EntryKind::Symlink)
            } else {
                OpenRefusal::Io(errno.into())
            }
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| OpenRefusal::Io(errno.into()))?;
        match kind_of(FileType::from_raw_mode(stat.st_mode)) {
            EntryKind::File => Ok(File::from(fd)),
            other => Err(OpenRefusal::NotRegular(other)),
        }
    }
}

impl std::fmt::Display for OpenRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenRefusal::NotRegular(kind) => write!(f, "{}: not read", kind.describe()),
            OpenRefusal::BadPath => f.write_str("not a plain relative path"),
            OpenRefusal::Io(err) => write!(f, "cannot open: {err}"),
        }
    }
}

impl EntryKind {
    /// A short phrase for reports ("named pipe (FIFO)", "symlink", …).
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "regular file",
            EntryKind::Directory => "folder",
            EntryKind::Symlink => "symlink",
            EntryKind::Fifo => "named pipe (FIFO)",
            EntryKind::Socket => "socket",
            EntryKind::Device => "device file",
            EntryKind::Other => "not a regular file",
        }
    }
}

fn folder_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn kind_of(file_type: FileType) -> EntryKind {
    match file_type {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Directory,
        FileType::Symlink => EntryKind::Symlink,
        FileType::Fifo => EntryKind::Fifo,
        FileType::Socket => EntryKind::Socket,
        FileType::CharacterDevice | FileType::BlockDevice => EntryKind::Device,
        _ => EntryKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
    }

    fn read(root: &RootDir, relative: &str) -> Result<String, String> {
        let mut text = String::new();
        root.open_file(relative)
            .map_err(|refusal| refusal.to_string())?
            .read_to_string(&mut text)
            .map_err(|e| e.to_string())?;
        Ok(text)
    }

    #[test]
    fn a_root_is_pinned_by_device_and_inode() {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("docs");
        std::fs::create_dir(&path).unwrap();
        let pinned = RootDir::open(&path).unwrap().identity();
        assert!(RootDir::open_pinned(&path, pinned).is_ok());

        // Another folder under the same name.
        std::fs::rename(&path, parent.path().join("old")).unwrap();
        std::fs::create_dir(&path).unwrap();
        let error = RootDir::open_pinned(&path, pinned).unwrap_err();
        assert!(matches!(error, RootError::Replaced { .. }), "{error:?}");

        // A symlink to the very folder that was pinned is still refused.
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(parent.path().join("old"), &path).unwrap();
        let error = RootDir::open_pinned(&path, pinned).unwrap_err();
        assert!(matches!(error, RootError::Symlink { .. }), "{error:?}");
    }

    #[test]
    fn files_open_only_when_regular_and_never_through_a_symlink() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.md"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), dir.path().join("l.md"))
            .unwrap();
        mkfifo(&dir.path().join("pipe.md"));
        let root = RootDir::open(dir.path()).unwrap();

        assert_eq!(read(&root, "sub/a.md").unwrap(), "inside");
        assert_eq!(read(&root, "l.md").unwrap_err(), "symlink: not read");
        // Opening a FIFO with no writer returns at once (non-blocking) and is refused.
        assert_eq!(
            read(&root, "pipe.md").unwrap_err(),
            "named pipe (FIFO): not read"
        );
        assert_eq!(read(&root, "sub").unwrap_err(), "folder: not read");
        for bad in ["", "../x", "sub/../sub/a.md", "/etc/passwd", "sub//a.md"] {
            assert!(
                matches!(root.open_file(bad), Err(OpenRefusal::BadPath)),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_folder_swapped_for_a_symlink_after_listing_is_not_followed() {
        // The race: `sub/a.md` was listed, then `sub` (or the file itself) became a symlink
        // to a folder outside the root before the file was opened.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("a.md"), "outside").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.md"), "inside").unwrap();
        std::fs::write(dir.path().join("b.md"), "inside").unwrap();
        let root = RootDir::open(dir.path()).unwrap();
        let listed: Vec<Vec<u8>> = root.folder().entries().unwrap();
        assert_eq!(listed.len(), 2);

        std::fs::rename(dir.path().join("sub"), dir.path().join("gone")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
        std::fs::remove_file(dir.path().join("b.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("a.md"), dir.path().join("b.md")).unwrap();

        assert_eq!(read(&root, "sub/a.md").unwrap_err(), "symlink: not read");
        assert_eq!(read(&root, "b.md").unwrap_err(), "symlink: not read");
        // The real path through the symlink does resolve outside: it is the open that
        // refuses, not a missing file.
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/a.md")).unwrap(),
            "outside"
        );
    }

    #[test]
    fn entries_are_classified_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.md"), "12345").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("d"), dir.path().join("l")).unwrap();
        mkfifo(&dir.path().join("p"));
        let socket = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        let root = RootDir::open(dir.path()).unwrap();
        let folder = root.folder();
        let kind = |name: &str| folder.stat_entry(name).unwrap().kind;
        assert_eq!(kind("f.md"), EntryKind::File);
        assert_eq!(folder.stat_entry("f.md").unwrap().bytes, 5);
        assert_eq!(kind("d"), EntryKind::Directory);
        assert_eq!(kind("l"), EntryKind::Symlink);
        assert_eq!(kind("p"), EntryKind::Fifo);
        assert_eq!(kind("s"), EntryKind::Socket);
        assert!(folder.open_folder("l").is_err());
        assert!(folder.open_folder("d").is_ok());
        drop(socket);
    }
}
