//! Knowledge-base ingestion that cannot be turned against the host, end to end through the
//! CLI and HTTP on the real embedding model: FIFOs skipped without hanging, a swapped root
//! refused, Warden's own folders and folders outside `--kb-roots` refused, a PDF
//! decompression bomb failed with bounded memory, one sync per knowledge base (409),
//! cancel by endpoint and by leaving the stream with a consistent catalogue, operators'
//! reports without paths, and audit rows with the outcome.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{
    add_user, create_token, free_port, into_status_and_json, models_dir, repo, stderr, stdout,
    warden, write_file, Server, ADMIN, ADMIN_PASSWORD,
};

/// Notes per folder in the sync tests: several batches of 64 on the real model.
const NOTES: usize = 200;

/// Runs `warden kb ARGS --data DATA`, failing the test if it runs past `limit`.
fn kb_within(data: &Path, args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = warden()
        .arg("kb")
        .args(args)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run warden kb");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("warden kb {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kb(data: &Path, args: &[&str]) -> std::process::Output {
    kb_within(data, args, Duration::from_secs(120))
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success());
}

fn notes(folder: &Path, count: usize) {
    std::fs::create_dir_all(folder).expect("mkdir");
    for i in 0..count {
        let text =
            format!("# Note {i}\n\nIncident {i} involved service-{i}; worker {i} was restarted.\n");
        write_file(folder, &format!("note-{i:03}.md"), text.as_bytes());
    }
}

#[test]
fn a_fifo_is_skipped_and_a_swapped_root_is_refused_from_the_cli() {
    models_dir();
    let base = tempfile::tempdir().expect("temp dir");
    let data = base.path().join("data");
    let folder = base.path().join("docs");
    notes(&folder, 2);
    mkfifo(&folder.join("pipe.md"));
    let path = folder.to_str().expect("path");
    // With a writer-less FIFO that a plain open would block on forever.
    let added = kb_within(
        &data,
        &["add", path, "--name", "ops"],
        Duration::from_secs(60),
    );
    let report = stdout(&added);
    assert!(added.status.success(), "{}", stderr(&added));
    assert!(report.contains("2 added"), "{report}");
    assert!(
        report.contains("skipped pipe.md: named pipe (FIFO): not read"),
        "{report}"
    );

    // Another folder takes the root's place.
    std::fs::rename(&folder, base.path().join("docs-old")).expect("rename");
    notes(&folder, 1);
    let synced = kb(&data, &["sync", "ops"]);
    assert_eq!(synced.status.code(), Some(1), "{}", stdout(&synced));
    assert!(
        stderr(&synced).contains("no longer the folder that was added"),
        "{}",
        stderr(&synced)
    );
    // A symlink to the very folder that was added is refused too.
    std::fs::remove_dir_all(&folder).expect("rm");
    std::os::unix::fs::symlink(base.path().join("docs-old"), &folder).expect("symlink");
    let synced = kb(&data, &["sync", "ops"]);
    assert_eq!(synced.status.code(), Some(1));
    assert!(stderr(&synced).contains("symlink"), "{}", stderr(&synced));
}

#[test]
fn the_cli_never_adds_the_data_or_models_folder() {
    models_dir();
    let base = tempfile::tempdir().expect("temp dir");
    let data = base.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let models = repo().join("models");
    let inside_models = models.join("all-MiniLM-L6-v2");
    let cases: [(&Path, &str); 4] = [
        (&data, "data folder"),
        (base.path(), "data folder"),
        (&models, "models folder"),
        (&inside_models, "models folder"),
    ];
    for (folder, what) in cases {
        let path = folder.to_str().expect("path");
        let output = kb(&data, &["add", path, "--name", "x"]);
        assert_eq!(output.status.code(), Some(1), "{path} was added");
        assert!(
            stderr(&output).contains(what),
            "{path}: {}",
            stderr(&output)
        );
    }
    let listed = kb(&data, &["list", "--json"]);
    assert_eq!(stdout(&listed).trim(), "[]");
}

/// A server on `base/data` whose `--kb-roots` are `base` and the models folder, with an
/// operator `olga` besides the admin.
struct Setup {
    server: Server,
    operator: String,
    base: tempfile::TempDir,
}

fn start(extra_roots: &[&Path]) -> Setup {
    let base = tempfile::tempdir().expect("temp dir");
    let data = base.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    add_user(&data, ADMIN, "admin", ADMIN_PASSWORD);
    add_user(&data, "olga", "operator", ADMIN_PASSWORD);
    let token = create_token(&data, ADMIN);
    let operator = create_token(&data, "olga");
    let mut roots = vec![base.path().to_str().expect("path").to_string()];
    roots.extend(
        extra_roots
            .iter()
            .map(|r| r.to_str().expect("path").to_string()),
    );
    let roots = roots.join(",");
    let server = Server::start_in(
        &data,
        &token,
        free_port(),
        &["--sample-kb", "/nonexistent", "--kb-roots", &roots],
    );
    Setup {
        server,
        operator,
        base,
    }
}

fn add(server: &Server, name: &str, path: &Path) -> (u16, Value) {
    server.post_json("/api/kb", &json!({"name": name, "path": path}))
}

/// An open sync stream.
struct SyncStream {
    reader: BufReader<Box<dyn Read + Send + Sync>>,
}

impl SyncStream {
    fn open(server: &Server, token: &str, name: &str) -> SyncStream {
        let response = ureq::post(&server.url(&format!("/api/kb/{name}/sync")))
            .set("Authorization", &format!("Bearer {token}"))
            .timeout(Duration::from_secs(300))
            .call()
            .expect("sync stream");
        SyncStream {
            reader: BufReader::new(response.into_reader()),
        }
    }

    /// The next event's name and data.
    fn next(&mut self) -> Option<(String, Value)> {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !event.is_empty() || !data.is_empty() {
                    return Some((event, serde_json::from_str(&data).unwrap_or(Value::Null)));
                }
            } else if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_string();
            } else if let Some(text) = line.strip_prefix("data: ") {
                data.push_str(text);
            }
        }
    }

    /// Reads up to the first committed batch.
    fn until_committed(&mut self) {
        while let Some((event, data)) = self.next() {
            assert_ne!(
                event, "completed",
                "the sync ended before it could be stopped"
            );
            if event == "progress" && data["stage"] == "committed" {
                return;
            }
        }
        panic!("the stream ended before a batch was committed");
    }

    /// Every remaining event.
    fn rest(mut self) -> Vec<(String, Value)> {
        std::iter::from_fn(|| self.next()).collect()
    }
}

fn last_event(events: &[(String, Value)]) -> (String, Value) {
    events.last().cloned().expect("at least one event")
}

fn sync_to_end(server: &Server, token: &str, name: &str) -> (String, Value) {
    last_event(&SyncStream::open(server, token, name).rest())
}

fn counts(server: &Server, name: &str) -> (u64, u64) {
    let listed: Value = server
        .get("/api/kb")
        .call()
        .expect("list")
        .into_json()
        .expect("json");
    let kb = listed["knowledge_bases"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|kb| kb["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {listed}"));
    (
        kb["documents"].as_u64().unwrap_or(0),
        kb["chunks"].as_u64().unwrap_or(0),
    )
}

fn audit_results(server: &Server, name: &str) -> Vec<String> {
    let audit: Value = server
        .get("/api/audit?limit=200")
        .call()
        .expect("audit")
        .into_json()
        .expect("json");
    audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|row| row["action"] == "kb.sync" && row["target"] == name)
        .map(|row| row["detail"]["result"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn http_adds_only_inside_the_roots_and_never_warden_folders() {
    let models = models_dir();
    let setup = start(&[&models]);
    let server = &setup.server;
    let outside = tempfile::tempdir().expect("temp dir");
    let data = server.data().to_path_buf();
    let cases: [(&Path, &str); 4] = [
        (outside.path(), "outside the folders"),
        (&data, "data folder"),
        (setup.base.path(), "data folder"),
        (&models, "models folder"),
    ];
    for (path, message) in cases {
        let (status, body) = add(server, "x", path);
        assert_eq!(status, 403, "{}: {body}", path.display());
        assert_eq!(body["error"]["code"], "path_not_allowed", "{body}");
        let text = body["error"]["message"].as_str().unwrap_or("");
        assert!(text.contains(message), "{}: {text}", path.display());
    }
    let (status, body) = add(server, "x", Path::new("relative/docs"));
    assert_eq!(status, 400, "{body}");
    let listed: Value = server
        .get("/api/kb")
        .call()
        .expect("list")
        .into_json()
        .expect("json");
    assert_eq!(listed["knowledge_bases"], json!([]));

    // Without --kb-roots, HTTP adds are off (fail closed).
    let closed = Server::start(&["--sample-kb", "/nonexistent"]);
    let folder = tempfile::tempdir().expect("temp dir");
    let (status, body) = add(&closed, "x", folder.path());
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--kb-roots"),
        "{body}"
    );
}

#[test]
fn http_syncs_one_at_a_time_cancel_and_leave_a_consistent_catalogue() {
    let setup = start(&[]);
    let server = &setup.server;
    let folder = setup.base.path().join("notes");
    notes(&folder, NOTES);
    assert_eq!(add(server, "notes", &folder).0, 201);

    // A second sync while the first runs: 409; then cancel the first.
    let mut first = SyncStream::open(server, &server.token, "notes");
    first.until_committed();
    let (status, body) = into_status_and_json(server.post("/api/kb/notes/sync").call());
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "sync_in_progress", "{body}");
    let (status, body) = into_status_and_json(server.post("/api/kb/notes/sync/cancel").call());
    assert_eq!(status, 202, "{body}");
    let (event, _) = last_event(&first.rest());
    assert_eq!(event, "cancelled");
    let (done, _) = counts(server, "notes");
    assert!(
        done > 0 && done < NOTES as u64,
        "{done} documents after cancel"
    );
    let (status, body) = into_status_and_json(server.post("/api/kb/notes/sync/cancel").call());
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (409, json!("no_sync_in_progress"))
    );

    // Leaving the stream cancels too.
    assert_eq!(add(server, "clean", &folder).0, 201);
    let mut left = SyncStream::open(server, &server.token, "clean");
    left.until_committed();
    drop(left);
    let started = Instant::now();
    while !audit_results(server, "clean").contains(&"cancelled".to_string()) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "leaving did not cancel"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The next syncs finish the job: the same catalogue as one clean sync.
    for name in ["notes", "clean"] {
        let (event, report) = sync_to_end(server, &server.token, name);
        assert_eq!(event, "completed", "{report}");
        assert!(report["unchanged"].as_u64().unwrap_or(0) > 0, "{report}");
    }
    assert_eq!(counts(server, "notes").0, NOTES as u64);
    assert_eq!(counts(server, "notes"), counts(server, "clean"));
    let found: Value = server
        .get("/api/kb/search")
        .query("q", "service-199 worker 199")
        .query("kb", "notes")
        .query("mode", "bm25")
        .call()
        .expect("search")
        .into_json()
        .expect("json");
    assert_eq!(
        found["hits"][0]["citation"]["path"], "note-199.md",
        "{found}"
    );
    let results = audit_results(server, "notes");
    assert!(results.contains(&"cancelled".to_string()), "{results:?}");
    assert!(results.contains(&"completed".to_string()), "{results:?}");
}

#[test]
fn a_pdf_bomb_fails_alone_with_bounded_memory_and_operators_see_no_paths() {
    let setup = start(&[]);
    let server = &setup.server;
    let folder = setup.base.path().join("pdfs");
    std::fs::create_dir(&folder).expect("mkdir");
    write_file(
        &folder,
        "ok.md",
        b"# Disk\n\nRotate the logs when the disk is full.\n",
    );
    // 512 MiB of zeros behind about 500 KB of Flate data (the budget is 64 MiB).
    write_file(&folder, "bomb.pdf", &bomb_pdf(512 << 20));
    mkfifo(&folder.join("pipe.txt"));
    assert_eq!(add(server, "pdfs", &folder).0, 201);

    let before = peak_rss_kib(server.pid());
    let (event, report) = sync_to_end(server, &server.token, "pdfs");
    let grown = peak_rss_kib(server.pid()).saturating_sub(before);
    assert_eq!(event, "completed", "{report}");
    assert_eq!(report["added"], 1, "{report}");
    let failed = &report["failed"][0];
    assert_eq!(failed["path"], "bomb.pdf", "{report}");
    assert_eq!(failed["kind"], "decompression_bomb", "{report}");
    assert!(grown < 256 * 1024, "peak memory grew by {grown} KiB");
    assert_eq!(report["skipped"][0]["kind"], "fifo", "{report}");

    // An operator who may read the knowledge base syncs it: counts, no paths.
    let database = server.data().join("warden.db");
    let connection = rusqlite::Connection::open(&database).expect("open database");
    connection
        .execute(
            "INSERT INTO kb_readers (kb_id, reader) SELECT id, 'role:operator' FROM knowledge_bases WHERE name = 'pdfs'",
            [],
        )
        .expect("reader");
    drop(connection);
    let events = SyncStream::open(server, &setup.operator, "pdfs").rest();
    let (event, summary) = last_event(&events);
    assert_eq!(event, "completed", "{summary}");
    assert_eq!(
        summary["failed"]["by_kind"]["decompression_bomb"], 1,
        "{summary}"
    );
    assert_eq!(summary["skipped"]["by_kind"]["fifo"], 1, "{summary}");
    let everything = format!("{events:?}");
    for path in ["bomb.pdf", "pipe.txt", "ok.md"] {
        assert!(
            !everything.contains(path),
            "{path} shown to an operator: {everything}"
        );
    }

    // The root swapped for another folder: refused before any streaming.
    std::fs::rename(&folder, setup.base.path().join("pdfs-old")).expect("rename");
    std::fs::create_dir(&folder).expect("mkdir");
    let (status, body) = into_status_and_json(server.post("/api/kb/pdfs/sync").call());
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "root_changed", "{body}");
    let results = audit_results(server, "pdfs");
    assert_eq!(
        results.first().map(String::as_str),
        Some("refused"),
        "{results:?}"
    );
}

/// The server's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A one-page PDF whose content stream is `inflated` zero bytes, Flate-compressed.
fn bomb_pdf(inflated: usize) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let block = vec![0u8; 1 << 20];
    for _ in 0..inflated / block.len() {
        encoder.write_all(&block).expect("compress");
    }
    let stream = encoder.finish().expect("compress");
    let objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Count 1 /Kids [3 0 R] >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        [
            format!(
                "<< /Length {} /Filter /FlateDecode >>\nstream\n",
                stream.len()
            )
            .into_bytes(),
            stream,
            b"\nendstream".to_vec(),
        ]
        .concat(),
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend(format!("{} 0 obj\n", index + 1).bytes());
        pdf.extend(object);
        pdf.extend(b"\nendobj\n");
    }
    let xref = pdf.len();
    pdf.extend(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).bytes());
    for offset in offsets {
        pdf.extend(format!("{offset:010} 00000 n \n").bytes());
    }
    pdf.extend(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .bytes(),
    );
    pdf
}
