//! Unit tests of the library's add and sync on a real store and real indexes, with a
//! deterministic fake embedder: pinned roots, special files, one sync at a time,
//! cancellation at a batch boundary, files swapped after listing, and the time budget.

use std::sync::Arc;
use std::time::Duration;

use super::sync::{read_listed, NotRead};
use super::*;
use crate::retrieval::safe_open::RootError;
use crate::retrieval::source::SkipKind;
use crate::retrieval::{AddedBy, EmbedError, FailKind};
use crate::store::Store;

/// Unit vectors from a hash of the text: deterministic, no model.
struct HashEmbedder;

impl Embedder for HashEmbedder {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector: Vec<f32> = (0..8u8)
                    .map(|i| {
                        let byte = text
                            .bytes()
                            .fold(i, |a, b| a.wrapping_mul(31).wrapping_add(b));
                        f32::from(byte) + 1.0
                    })
                    .collect();
                let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
                vector.iter_mut().for_each(|x| *x /= norm);
                vector
            })
            .collect())
    }

    fn dimensions(&self) -> usize {
        8
    }
}

struct Words;

impl TokenCounter for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

struct Fixture {
    _data: tempfile::TempDir,
    data: PathBuf,
    folders: tempfile::TempDir,
    store: Arc<Store>,
    library: Library,
}

fn fixture(config: RetrievalConfig) -> Fixture {
    let data = tempfile::tempdir().unwrap();
    let data_path = data.path().canonicalize().unwrap();
    let store = Arc::new(Store::open(&data_path.join("warden.db")).unwrap());
    let mut config = config;
    config.roots.protect(&data_path, "data folder");
    let library = Library::open(
        &data_path.join("kb"),
        store.clone(),
        Arc::new(HashEmbedder),
        Arc::new(Words),
        config,
    )
    .unwrap();
    Fixture {
        _data: data,
        data: data_path,
        folders: tempfile::tempdir().unwrap(),
        store,
        library,
    }
}

impl Fixture {
    /// A folder named `name` holding `files` notes.
    fn folder(&self, name: &str, files: usize) -> PathBuf {
        let folder = self.folders.path().canonicalize().unwrap().join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for i in 0..files {
            let text = format!("# Note {i}\n\nService {i} was restarted by worker {i}.\n");
            std::fs::write(folder.join(format!("note-{i:03}.md")), text).unwrap();
        }
        folder
    }

    fn counts(&self, name: &str) -> (i64, i64) {
        let kb = self.store.knowledge_base(name).unwrap();
        (kb.documents, kb.chunks)
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
}

#[test]
fn a_fifo_is_skipped_with_its_reason_and_the_sync_finishes() {
    let f = fixture(RetrievalConfig::default());
    let folder = f.folder("ops", 2);
    mkfifo(&folder.join("pipe.md"));
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let report = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!(report.added, 2);
    let skipped: Vec<(&str, SkipKind)> = report
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.kind))
        .collect();
    assert_eq!(skipped, vec![("pipe.md", SkipKind::Fifo)]);
}

#[test]
fn a_root_swapped_for_another_folder_or_a_symlink_is_refused() {
    let f = fixture(RetrievalConfig::default());
    let folder = f.folder("ops", 2);
    let record = f.library.add("ops", &folder, AddedBy::Host).unwrap();
    assert!(record.root_identity.is_some());
    f.library.sync("ops", &mut |_| {}).unwrap();

    std::fs::rename(&folder, folder.with_file_name("ops-old")).unwrap();
    f.folder("ops", 5);
    let error = f.library.sync("ops", &mut |_| {}).unwrap_err();
    assert!(
        matches!(error, RetrievalError::Root(RootError::Replaced { .. })),
        "{error:?}"
    );
    assert!(f.library.check_root("ops").is_err());

    std::fs::remove_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(folder.with_file_name("ops-old"), &folder).unwrap();
    let error = f.library.sync("ops", &mut |_| {}).unwrap_err();
    assert!(
        matches!(error, RetrievalError::Root(RootError::Symlink { .. })),
        "{error:?}"
    );
    // Nothing was taken from the other folders.
    assert_eq!(f.counts("ops"), (2, 2));
}

#[test]
fn a_knowledge_base_added_before_pinning_is_pinned_at_its_next_sync() {
    let f = fixture(RetrievalConfig::default());
    let folder = f.folder("old", 1);
    f.store
        .create_kb("old", &folder.to_string_lossy(), 1)
        .unwrap();
    assert_eq!(f.store.knowledge_base("old").unwrap().root_identity, None);
    f.library.sync("old", &mut |_| {}).unwrap();
    let pinned = f.store.knowledge_base("old").unwrap().root_identity;
    let identity = RootDir::open(&folder).unwrap().identity();
    assert_eq!(pinned, Some((identity.dev, identity.ino)));
}

#[test]
fn one_sync_per_knowledge_base_at_a_time() {
    let f = fixture(RetrievalConfig::default());
    let folder = f.folder("ops", 1);
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let ticket = f.library.begin_sync("ops").unwrap();
    assert!(matches!(
        f.library.sync("ops", &mut |_| {}),
        Err(RetrievalError::SyncInProgress(_))
    ));
    assert!(f.library.cancel_sync("ops"));
    drop(ticket);
    assert!(!f.library.cancel_sync("ops"));
    assert_eq!(f.library.sync("ops", &mut |_| {}).unwrap().added, 1);
}

#[test]
fn a_cancelled_sync_keeps_its_committed_batches_and_the_next_one_finishes() {
    let f = fixture(RetrievalConfig::default());
    let files = DOCUMENTS_PER_BATCH * 2 + 10;
    let folder = f.folder("ops", files);
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let ticket = f.library.begin_sync("ops").unwrap();
    let canceller = ticket.canceller();
    let result = f.library.run_sync(&ticket, &mut |progress| {
        if matches!(progress, Progress::Committed { .. }) {
            canceller.cancel();
        }
    });
    assert!(
        matches!(result, Err(RetrievalError::Cancelled)),
        "{result:?}"
    );
    drop(ticket);
    assert_eq!(f.counts("ops").0, DOCUMENTS_PER_BATCH as i64);

    let report = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!(
        (report.added, report.unchanged),
        (files - DOCUMENTS_PER_BATCH, DOCUMENTS_PER_BATCH)
    );
    // The same as a clean sync of the same folder.
    f.library.add("clean", &folder, AddedBy::Host).unwrap();
    f.library.sync("clean", &mut |_| {}).unwrap();
    assert_eq!(f.counts("ops"), f.counts("clean"));
    let hits = f
        .library
        .search(
            "worker 137",
            Some(&["ops".to_string()]),
            SearchMode::Bm25,
            1,
        )
        .unwrap();
    assert_eq!(hits[0].citation.path, "note-137.md");
}

#[test]
fn a_file_swapped_for_a_symlink_after_listing_is_not_read() {
    let f = fixture(RetrievalConfig::default());
    let outside = f.folder("outside", 1);
    let folder = f.folder("ops", 1);
    std::fs::create_dir(folder.join("sub")).unwrap();
    std::fs::write(folder.join("sub/a.md"), "# A\n\ninside text\n").unwrap();
    let root = RootDir::open(&folder).unwrap();
    let scan = source::scan(&root, &super::super::extract::is_supported);
    assert_eq!(scan.files.len(), 2);

    // Between listing and reading: the folder and the file become symlinks out.
    std::fs::rename(folder.join("sub"), folder.join("was-sub")).unwrap();
    std::os::unix::fs::symlink(&outside, folder.join("sub")).unwrap();
    std::fs::copy(outside.join("note-000.md"), outside.join("a.md")).unwrap();
    std::fs::remove_file(folder.join("note-000.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("note-000.md"), folder.join("note-000.md")).unwrap();

    for file in &scan.files {
        match read_listed(&root, &file.path) {
            Err(NotRead::Skipped(skipped)) => {
                assert_eq!(skipped.kind, SkipKind::Symlink, "{skipped:?}");
                assert!(skipped.reason.contains("changed since it was listed"));
            }
            Ok(bytes) => panic!("{} read: {}", file.path, String::from_utf8_lossy(&bytes)),
            Err(NotRead::Failed(failed)) => panic!("{failed:?}"),
        }
    }
}

#[test]
fn over_the_time_budget_a_file_fails_and_the_sync_goes_on() {
    let mut config = RetrievalConfig::default();
    config.extract_limits.max_time_per_file = Duration::ZERO;
    let f = fixture(config);
    let folder = f.folder("ops", 2);
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let report = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!(report.added, 0);
    let kinds: Vec<FailKind> = report.failed.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, vec![FailKind::TimedOut, FailKind::TimedOut]);
    assert!(
        report.failed[0].error.contains("0-second budget"),
        "{:?}",
        report.failed
    );
}

#[test]
fn a_sync_stops_at_its_chunk_budget_and_the_next_goes_on() {
    let f = fixture(RetrievalConfig {
        max_chunks_per_sync: 3,
        ..RetrievalConfig::default()
    });
    let folder = f.folder("ops", 5);
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let first = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!(first.added, 3);
    let left: Vec<FailKind> = first.failed.iter().map(|f| f.kind).collect();
    assert_eq!(left, [FailKind::SyncBudgetSpent; 2]);
    let second = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!((second.added, second.unchanged), (2, 3));
    assert!(second.failed.is_empty());
    assert_eq!(f.counts("ops").0, 5);
}

#[test]
fn a_file_giving_too_many_chunks_fails_with_its_reason() {
    let mut config = RetrievalConfig::default();
    config.extract_limits.max_chunks_per_file = 1;
    let f = fixture(config);
    let folder = f.folder("ops", 1);
    let long: String = (0..400)
        .map(|i| format!("Paragraph {i} of a long note.\n\n"))
        .collect();
    std::fs::write(folder.join("long.md"), long).unwrap();
    f.library.add("ops", &folder, AddedBy::Host).unwrap();
    let report = f.library.sync("ops", &mut |_| {}).unwrap();
    assert_eq!(report.added, 1);
    let failed: Vec<(&str, FailKind)> = report
        .failed
        .iter()
        .map(|f| (f.path.as_str(), f.kind))
        .collect();
    assert_eq!(failed, [("long.md", FailKind::TooMuchText)]);
    assert!(
        report.failed[0].error.contains("chunk limit"),
        "{}",
        report.failed[0].error
    );
}

#[test]
fn remote_adds_follow_the_root_policy() {
    let f = fixture(RetrievalConfig::default());
    let folder = f.folder("ops", 1);
    let error = f.library.add("ops", &folder, AddedBy::Remote).unwrap_err();
    assert!(error.to_string().contains("--kb-roots"), "{error}");
    for who in [AddedBy::Host, AddedBy::Remote] {
        let error = f.library.add("data", &f.data, who).unwrap_err();
        assert!(matches!(error, RetrievalError::Policy(_)), "{error:?}");
    }
    assert!(f.store.knowledge_bases().unwrap().is_empty());
}
