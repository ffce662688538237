//! Knowledge bases end to end through the CLI and the HTTP API on the real embedding
//! model: add, search with citations, incremental sync (modify, delete), crash recovery,
//! unsafe names and links, bad documents, Chinese queries, and the SciFact BM25 target.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{models_dir, repo, run, stderr, stdout, warden, write_file, Server};

const DEADLOCK_MD: &str = "# Database runbook\n\n## Deadlocks\n\nWhen PostgreSQL reports a deadlock, two transactions wait for each other's row locks.\nRead the server log for the statements involved.\n\n```sql\nSELECT * FROM pg_locks WHERE NOT granted;\n```\n";
const DISK_MD: &str = "# Disk full\n\nWhen the log volume fills up, writes fail with no space left on device.\nRotate logs and find deleted-but-open files with lsof.\n";
const CHINESE_MD: &str = "# 连接池耗尽\n\n## 现象\n\n应用报错无法获取数据库连接，连接池中的连接全部被占用。\n\n## 排查\n\n检查慢查询和未归还的连接，调整连接池大小。\n";

fn kb(data: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["kb"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--data", data.to_str().expect("utf-8 path")]);
    run(&all)
}

fn search(data: &Path, name: &str, query: &str) -> Vec<Value> {
    let output = kb(data, &["search", name, query, "--json", "--limit", "5"]);
    assert!(
        output.status.success(),
        "search failed: {}",
        stderr(&output)
    );
    serde_json::from_str(&stdout(&output)).expect("search JSON")
}

fn paths(hits: &[Value]) -> Vec<String> {
    hits.iter()
        .map(|h| h["citation"]["path"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn add_search_modify_delete_and_chinese() {
    models_dir();
    let folder = tempfile::tempdir().expect("temp dir");
    let data = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(folder.path().join("zh")).expect("mkdir");
    write_file(folder.path(), "db.md", DEADLOCK_MD.as_bytes());
    write_file(folder.path(), "disk.md", DISK_MD.as_bytes());
    write_file(&folder.path().join("zh"), "pool.md", CHINESE_MD.as_bytes());
    let added = kb(
        data.path(),
        &[
            "add",
            folder.path().to_str().expect("path"),
            "--name",
            "ops",
        ],
    );
    assert!(added.status.success(), "kb add failed: {}", stderr(&added));
    assert!(stdout(&added).contains("3 added"), "{}", stdout(&added));

    let hits = search(data.path(), "ops", "postgres deadlock between transactions");
    assert_eq!(
        paths(&hits).first().map(String::as_str),
        Some("db.md"),
        "{hits:?}"
    );
    let citation = &hits[0]["citation"];
    assert_eq!(
        citation["heading_path"],
        serde_json::json!(["Database runbook", "Deadlocks"])
    );
    assert_eq!(citation["location"]["kind"], "lines");
    assert!(
        hits[0]["bm25"]["rank"].as_u64().is_some() && hits[0]["vector"]["rank"].as_u64().is_some(),
        "{hits:?}"
    );

    let chinese = search(data.path(), "ops", "数据库连接池耗尽怎么办");
    assert_eq!(
        paths(&chinese).first().map(String::as_str),
        Some("zh/pool.md"),
        "{chinese:?}"
    );

    // Modify: the new text is found, the old is gone.
    write_file(
        folder.path(),
        "disk.md",
        b"# Disk full\n\nInode exhaustion: df -i shows 100% while space is free.\n",
    );
    let synced = kb(data.path(), &["sync", "ops"]);
    assert!(
        stdout(&synced).contains("1 updated") && stdout(&synced).contains("2 unchanged"),
        "{}",
        stdout(&synced)
    );
    let inode = search(data.path(), "ops", "inode exhaustion");
    assert_eq!(paths(&inode).first().map(String::as_str), Some("disk.md"));
    let old = kb(
        data.path(),
        &[
            "search",
            "ops",
            "lsof deleted open files",
            "--mode",
            "bm25",
            "--json",
        ],
    );
    let old: Vec<Value> = serde_json::from_str(&stdout(&old)).expect("json");
    assert!(
        old.iter()
            .all(|h| !h["text"].as_str().unwrap_or("").contains("lsof")),
        "stale chunk still indexed: {old:?}"
    );

    // Delete: the file disappears from results.
    std::fs::remove_file(folder.path().join("db.md")).expect("rm");
    let synced = kb(data.path(), &["sync", "ops"]);
    assert!(stdout(&synced).contains("1 deleted"), "{}", stdout(&synced));
    assert!(!paths(&search(data.path(), "ops", "deadlock pg_locks")).contains(&"db.md".to_string()));
}

#[test]
fn unsafe_names_links_and_bad_documents_are_reported() {
    models_dir();
    let outside = tempfile::tempdir().expect("temp dir");
    write_file(outside.path(), "secret.md", b"# Secret\n\nthe launch codes");
    let folder = tempfile::tempdir().expect("temp dir");
    let data = tempfile::tempdir().expect("temp dir");
    write_file(folder.path(), "ok.md", DISK_MD.as_bytes());
    write_file(
        folder.path(),
        "broken.pdf",
        b"%PDF-1.4 this is not really a pdf",
    );
    write_file(folder.path(), "bomb.docx", &zip_bomb());
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        folder.path().join("escape.md"),
    )
    .expect("symlink");

    for bad in ["../evil", "a/b", "x\u{7}y"] {
        let output = kb(
            data.path(),
            &["add", folder.path().to_str().expect("path"), "--name", bad],
        );
        assert_eq!(output.status.code(), Some(1), "name {bad:?} accepted");
        assert!(
            stderr(&output).contains("invalid name"),
            "{}",
            stderr(&output)
        );
    }
    let added = kb(
        data.path(),
        &[
            "add",
            folder.path().to_str().expect("path"),
            "--name",
            "ops",
        ],
    );
    let report = stdout(&added);
    assert!(added.status.success(), "{}", stderr(&added));
    assert!(
        report.contains("skipped escape.md: symlink: not followed"),
        "{report}"
    );
    assert!(report.contains("failed  broken.pdf"), "{report}");
    assert!(
        report.contains("failed  bomb.docx") && report.to_lowercase().contains("zip bomb"),
        "{report}"
    );
    assert!(report.contains("1 added"), "{report}");
    let hits = search(data.path(), "ops", "launch codes");
    assert!(
        hits.iter()
            .all(|h| !h["text"].as_str().unwrap_or("").contains("launch codes")),
        "{hits:?}"
    );
}

/// A DOCX whose document.xml inflates to 200 MB of zeros.
fn zip_bomb() -> Vec<u8> {
    use std::io::Write;
    let mut buffer = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut buffer);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(true);
    zip.start_file("word/document.xml", options)
        .expect("zip entry");
    let zeros = vec![b' '; 1 << 20];
    for _ in 0..200 {
        zip.write_all(&zeros).expect("write");
    }
    zip.finish().expect("finish");
    buffer.into_inner()
}

#[test]
fn killed_ingestion_recovers_on_next_sync() {
    models_dir();
    let folder = tempfile::tempdir().expect("temp dir");
    let data = tempfile::tempdir().expect("temp dir");
    for i in 0..400 {
        let text = format!("# Note {i}\n\nIncident number {i} involved service-{i} and was resolved by restarting worker {i}.\n");
        write_file(folder.path(), &format!("note-{i:03}.md"), text.as_bytes());
    }
    let mut child = warden()
        .args([
            "kb",
            "add",
            folder.path().to_str().expect("path"),
            "--name",
            "notes",
            "--data",
            data.path().to_str().expect("path"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kb add");
    // Kill once some batches are committed but before the end.
    let started = Instant::now();
    let database = data.path().join("warden.db");
    while started.elapsed() < Duration::from_secs(60) && !database.exists() {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(3000));
    let _ = child.kill();
    let _ = child.wait();

    let synced = kb(data.path(), &["sync", "notes"]);
    assert!(
        synced.status.success(),
        "sync after kill failed: {}",
        stderr(&synced)
    );
    let listed = kb(data.path(), &["list", "--json"]);
    let kbs: Vec<Value> = serde_json::from_str(&stdout(&listed)).expect("json");
    assert_eq!(kbs[0]["documents"], 400, "{kbs:?}");
    // Every note is findable, exactly once, in BM25 and vector results alike.
    for i in [0, 199, 399] {
        for mode in ["bm25", "vector"] {
            let output = kb(
                data.path(),
                &[
                    "search",
                    "notes",
                    &format!("service-{i} worker {i}"),
                    "--mode",
                    mode,
                    "--json",
                    "--limit",
                    "20",
                ],
            );
            let hits: Vec<Value> = serde_json::from_str(&stdout(&output)).expect("json");
            let wanted = format!("note-{i:03}.md");
            assert_eq!(
                paths(&hits).iter().filter(|p| **p == wanted).count(),
                1,
                "{mode} {wanted}: {hits:?}"
            );
        }
    }
    // Running it again changes nothing.
    let again = kb(data.path(), &["sync", "notes"]);
    assert!(
        stdout(&again).contains("0 added, 0 updated, 400 unchanged, 0 deleted"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn http_admin_api_adds_syncs_with_progress_and_searches() {
    let folder = tempfile::tempdir().expect("temp dir");
    write_file(folder.path(), "db.md", DEADLOCK_MD.as_bytes());
    let roots = folder.path().to_str().expect("path");
    let server = Server::start(&["--sample-kb", "/nonexistent", "--kb-roots", roots]);
    let body = serde_json::json!({"name": "ops", "path": folder.path()});
    let created = server
        .post("/api/kb")
        .send_json(body.clone())
        .expect("create kb");
    assert_eq!(created.status(), 201);
    match server.post("/api/kb").send_json(body) {
        Err(ureq::Error::Status(409, _)) => {}
        other => panic!(
            "duplicate name: expected 409, got {:?}",
            other.map(|r| r.status())
        ),
    }
    let stream = server
        .post("/api/kb/ops/sync")
        .call()
        .expect("sync")
        .into_string()
        .expect("sse body");
    assert!(stream.contains("event: progress"), "{stream}");
    assert!(
        stream.contains("event: completed") && stream.contains("\"added\":1"),
        "{stream}"
    );
    let found: Value = server
        .get("/api/kb/search")
        .query("q", "deadlock")
        .query("kb", "ops")
        .call()
        .expect("search")
        .into_json()
        .expect("json");
    assert_eq!(found["hits"][0]["citation"]["path"], "db.md", "{found}");
    match server
        .get("/api/kb/search")
        .query("q", "x")
        .query("limit", "0")
        .call()
    {
        Err(ureq::Error::Status(400, response)) => {
            let body: Value = response.into_json().expect("json");
            assert!(body["error"]["message"].is_string());
        }
        other => panic!("expected 400, got {:?}", other.map(|r| r.status())),
    }
    match server.post("/api/kb/nope/sync").call() {
        Err(ureq::Error::Status(404, _)) => {}
        other => panic!("expected 404, got {:?}", other.map(|r| r.status())),
    }
    assert_eq!(
        server
            .delete("/api/kb/ops")
            .call()
            .expect("delete")
            .status(),
        204
    );
}

#[test]
fn fresh_server_loads_the_sample_knowledge_base() {
    let server = Server::start(&[]);
    let started = Instant::now();
    loop {
        let listed: Value = server
            .get("/api/kb")
            .call()
            .expect("list")
            .into_json()
            .expect("json");
        if listed["knowledge_bases"][0]["chunks"].as_u64().unwrap_or(0) > 20 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "sample KB not loaded: {listed}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let found: Value = server
        .get("/api/kb/search")
        .query("q", "nginx 502 bad gateway upstream")
        .call()
        .expect("search")
        .into_json()
        .expect("json");
    assert!(
        found["hits"].as_array().is_some_and(|h| !h.is_empty()),
        "{found}"
    );
}

fn eval(dataset: &Path, mode: &str) -> Value {
    assert!(
        dataset.join("corpus.jsonl").is_file() || dataset.join("corpus.jsonl.gz").is_file(),
        "{} has no corpus.jsonl(.gz)",
        dataset.display()
    );
    let output = run(&[
        "eval",
        "retrieval",
        "--beir",
        dataset.to_str().expect("path"),
        "--mode",
        mode,
        "--json",
    ]);
    assert!(output.status.success(), "eval failed: {}", stderr(&output));
    serde_json::from_str(stdout(&output).trim()).expect("one JSON object")
}

#[test]
fn scifact_bm25_reaches_the_published_baseline() {
    let report = eval(&repo().join("tests/data/scifact"), "bm25");
    assert_eq!(report["queries"], 300, "{report}");
    assert!(
        report["ndcg_at_10"].as_f64().unwrap_or(0.0) >= 0.66,
        "{report}"
    );
}

#[test]
fn chinese_set_bm25_and_hybrid() {
    let dataset = repo().join("tests/data/zh-ops-beir");
    let bm25 = eval(&dataset, "bm25");
    let hybrid = eval(&dataset, "hybrid");
    let (b, h) = (
        bm25["ndcg_at_10"].as_f64().unwrap_or(0.0),
        hybrid["ndcg_at_10"].as_f64().unwrap_or(0.0),
    );
    assert!(b >= 0.9, "bm25 {bm25}");
    assert!(h >= b - 0.01, "hybrid {h} drowns bm25 {b}");
}
