//! Access per knowledge base, end to end on the real models: users × groups × knowledge
//! bases × search modes, through the CLI and the HTTP API. A caller never sees a knowledge
//! base they may not read — in a list, a hit, a passage or a score: a forbidden knowledge
//! base holding the query's best hit changes nothing in what others find, to the last digit
//! (their results are identical before and after it is removed).

use std::path::Path;

use serde_json::{json, Value};

use crate::util::{
    add_user, create_token, into_status_and_json, run, stderr, stdout, write_file, Server,
};

const PASSWORD: &str = "access-password-1";
const QUERY: &str = "deadlock blocking session";

/// (knowledge base, readers, document).
const KBS: [(&str, &str, &str); 4] = [
    (
        "public",
        "role:viewer",
        "# Connection pools\n\nSize the pool to the database's cores. A blocking session holds a connection until it commits.\n",
    ),
    (
        "ops",
        "group:ops",
        "# Lock runbook\n\nFind the blocked query in pg_locks, then the deadlock victim in the log.\n",
    ),
    (
        "eng",
        "role:operator",
        "# CI pipeline\n\nA deadlock between build agents shows as a job waiting on a blocking session forever.\n",
    ),
    (
        "hr",
        "",
        "# Deadlock blocking session\n\nA deadlock blocking session: the blocking session of the payroll deadlock during the salary review.\n",
    ),
];

/// Who calls, and the knowledge bases they may read.
const CALLERS: [(&str, &[&str]); 4] = [
    ("admin", &["eng", "hr", "ops", "public"]),
    ("vic", &["public"]),
    ("olive", &["ops", "public"]),
    ("otto", &["eng", "public"]),
];

fn cli(data: &Path, args: &[&str]) -> std::process::Output {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--data", data.to_str().expect("utf-8 path")]);
    run(&all)
}

fn ok(output: std::process::Output) -> String {
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

fn get(server: &Server, token: &str, path: &str) -> (u16, Value) {
    into_status_and_json(
        ureq::get(&server.url(path))
            .set("Authorization", &format!("Bearer {token}"))
            .call(),
    )
}

/// (kb, chunk id, score, bm25 rank, vector rank) of each hit.
fn hits(body: &Value) -> Vec<(String, u64, String, Value, Value)> {
    body["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| {
            (
                h["citation"]["kb"].as_str().unwrap_or_default().to_owned(),
                h["chunk_id"].as_u64().unwrap_or_default(),
                h["score"].to_string(),
                h["bm25"].clone(),
                h["vector"].clone(),
            )
        })
        .collect()
}

#[test]
fn each_caller_finds_only_the_knowledge_bases_they_may_read() {
    let data = tempfile::tempdir().expect("temp dir");
    let data = data.path();
    let folders = tempfile::tempdir().expect("temp dir");
    add_user(data, "admin", "admin", PASSWORD);
    add_user(data, "vic", "viewer", PASSWORD);
    add_user(data, "otto", "operator", PASSWORD);
    ok(cli(data, &["group", "add", "ops"]));
    // `user add --group` joins at creation; an unknown group refuses the user.
    let refused = cli(
        data,
        &[
            "user",
            "add",
            "x",
            "--role",
            "viewer",
            "--password-stdin",
            "--group",
            "nope",
        ],
    );
    assert!(
        !refused.status.success() && stderr(&refused).contains("nope"),
        "{}",
        stderr(&refused)
    );
    add_user(data, "olive", "viewer", PASSWORD);
    assert!(ok(cli(data, &["user", "groups", "olive", "--add", "ops"])).contains("olive: ops"));
    for (name, readers, text) in KBS {
        let folder = folders.path().join(name);
        std::fs::create_dir_all(&folder).expect("folder");
        write_file(&folder, "doc.md", text.as_bytes());
        let path = folder.to_str().expect("utf-8 path");
        ok(cli(
            data,
            &["kb", "add", path, "--name", name, "--readers", readers],
        ));
    }
    let listed = ok(cli(data, &["kb", "list"]));
    assert!(
        listed.contains("group:ops") && listed.contains("(admins only)"),
        "{listed}"
    );
    let bad = cli(data, &["kb", "readers", "hr", "--set", "group:nobody"]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("nobody"),
        "{}",
        stderr(&bad)
    );

    // The CLI searches as a user: a knowledge base they may not read is refused.
    for (user, readable) in [("vic", &["public"][..]), ("olive", &["ops", "public"][..])] {
        for kb in ["ops", "hr", "public"] {
            let output = cli(data, &["kb", "search", kb, QUERY, "--as", user, "--json"]);
            assert_eq!(
                output.status.success(),
                readable.contains(&kb),
                "{user} {kb}: {}",
                stderr(&output)
            );
        }
    }

    let tokens: Vec<(&str, String)> = CALLERS
        .iter()
        .map(|(user, _)| (*user, create_token(data, user)))
        .collect();
    let token = |user: &str| {
        tokens
            .iter()
            .find(|(u, _)| *u == user)
            .map(|(_, t)| t.clone())
            .expect("token")
    };
    let server = Server::start_in(
        data,
        &token("admin"),
        crate::util::free_port(),
        &["--sample-kb", "/nonexistent"],
    );

    let (_, missing) = get(&server, &token("vic"), "/api/kb/search?q=x&kb=nope");
    for (user, readable) in CALLERS {
        let token = token(user);
        // The list: readable ones only; the folder for admins only.
        let (status, body) = get(&server, &token, "/api/kb");
        assert_eq!(status, 200);
        let kbs = body["knowledge_bases"].as_array().expect("list");
        let names: Vec<&str> = kbs.iter().filter_map(|k| k["name"].as_str()).collect();
        assert_eq!(names, readable, "{user}");
        assert!(
            kbs.iter()
                .all(|k| k.get("root").is_some() == (user == "admin")),
            "{user}: {body}"
        );
        // Every mode: hits from readable knowledge bases only.
        for mode in ["bm25", "vector", "hybrid"] {
            let path = format!(
                "/api/kb/search?q={}&mode={mode}&limit=20",
                QUERY.replace(' ', "+")
            );
            let (status, body) = get(&server, &token, &path);
            assert_eq!(status, 200, "{user} {mode}: {body}");
            let found = hits(&body);
            assert!(!found.is_empty(), "{user} {mode}");
            assert!(
                found.iter().all(|h| readable.contains(&h.0.as_str())),
                "{user} {mode}: {found:?}"
            );
        }
        // Naming a knowledge base: readable → 200; forbidden → the same 404 as a missing one.
        for (kb, _, _) in KBS {
            let (status, body) = get(
                &server,
                &token,
                &format!("/api/kb/search?q=deadlock&kb={kb}"),
            );
            if readable.contains(&kb) {
                assert_eq!(status, 200, "{user} {kb}");
            } else {
                assert_eq!(status, 404, "{user} {kb}");
                assert_eq!(
                    body["error"]["code"], missing["error"]["code"],
                    "{user} {kb}: {body}"
                );
            }
        }
    }

    // The hybrid query's best hit is in `hr`, which only admins read.
    let hybrid = format!(
        "/api/kb/search?q={}&mode=hybrid&limit=20",
        QUERY.replace(' ', "+")
    );
    let (_, admin_view) = get(&server, &token("admin"), &hybrid);
    let admin_hits = hits(&admin_view);
    assert_eq!(admin_hits[0].0, "hr", "{admin_view}");
    let hr_chunk = admin_hits[0].1;
    // Its passage opens for admins only.
    assert_eq!(
        get(
            &server,
            &token("admin"),
            &format!("/api/kb/passages/{hr_chunk}")
        )
        .0,
        200
    );
    assert_eq!(
        get(
            &server,
            &token("olive"),
            &format!("/api/kb/passages/{hr_chunk}")
        )
        .0,
        404
    );
    let ops_chunk = hits(&get(&server, &token("olive"), "/api/kb/search?q=pg_locks&kb=ops").1)[0].1;
    let (status, passage) = get(
        &server,
        &token("olive"),
        &format!("/api/kb/passages/{ops_chunk}"),
    );
    assert_eq!(status, 200);
    assert_eq!(passage["passage"]["kb"], "ops");

    // Readers are changed by admins only, and take effect at once.
    let put = |who: &str, body: Value| {
        into_status_and_json(
            ureq::put(&server.url("/api/kb/ops/readers"))
                .set("Authorization", &format!("Bearer {}", token(who)))
                .send_json(body),
        )
    };
    assert_eq!(put("olive", json!({"readers": ["role:viewer"]})).0, 403);
    assert_eq!(put("admin", json!({"readers": ["team:x"]})).0, 400);
    assert_eq!(put("admin", json!({"readers": ["group:nobody"]})).0, 404);
    let (status, body) = put("admin", json!({"readers": ["user:vic", "group:ops"]}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["knowledge_base"]["readers"],
        json!(["group:ops", "user:vic"])
    );
    let (_, vic_list) = get(&server, &token("vic"), "/api/kb");
    assert_eq!(
        vic_list["knowledge_bases"].as_array().map(Vec::len),
        Some(2)
    );

    // What others find does not depend on the forbidden knowledge base at all.
    let before = hits(&get(&server, &token("olive"), &hybrid).1);
    let removed = server.delete("/api/kb/hr").call().expect("remove hr");
    assert_eq!(removed.status(), 204);
    let after = hits(&get(&server, &token("olive"), &hybrid).1);
    assert_eq!(before, after);
}
