//! Per-user allowances on the real model: a user's concurrent `/v1` requests and queued chat
//! messages are bounded (429 `quota_exceeded` with `Retry-After`, nothing stored) without
//! affecting other users, and no request holds the model past the server's answer cap.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{add_user, create_token, free_port, into_status_and_json, Server, ADMIN};

/// The server's answer cap in these tests.
const CAP: u64 = 300;

/// A JSON schema the model cannot finish within `CAP` tokens: 64 strings of 300 characters.
fn endless_schema() -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {"name": "endless", "schema": {
            "type": "array", "minItems": 64, "maxItems": 64,
            "items": {"type": "string", "minLength": 300, "maxLength": 300}
        }}
    })
}

fn chat_as(server: &Server, token: &str, body: &Value) -> (u16, Value, Option<String>) {
    let result = ureq::post(&server.url("/v1/chat/completions"))
        .timeout(Duration::from_secs(300))
        .set("Authorization", &format!("Bearer {token}"))
        .send_json(body.clone());
    let retry_after = match &result {
        Err(ureq::Error::Status(_, response)) => response.header("retry-after").map(str::to_owned),
        _ => None,
    };
    let (status, body) = into_status_and_json(result);
    (status, body, retry_after)
}

fn short_question() -> Value {
    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
}

#[test]
fn one_user_cannot_hold_more_than_their_share_of_the_server() {
    let data = tempfile::tempdir().expect("temp dir");
    add_user(data.path(), ADMIN, "admin", "admin-password-1");
    add_user(data.path(), "bob", "viewer", "bob-password-1");
    let token = create_token(data.path(), ADMIN);
    let bob = create_token(data.path(), "bob");
    let cap = CAP.to_string();
    let server = Server::start_in(
        data.path(),
        &token,
        free_port(),
        &[
            "--max-output-tokens",
            &cap,
            "--max-v1-requests-per-user",
            "1",
            "--max-queued-runs-per-user",
            "1",
            "--run-workers",
            "1",
            "--max-answer-tokens",
            "200",
        ],
    );

    // A request asking for more than the cap is refused.
    let too_many = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": CAP + 1});
    let (status, body, _) = chat_as(&server, &token, &too_many);
    assert_eq!(status, 400, "{body}");

    // A stream whose schema never lets the model stop, with no max_tokens: it holds the
    // admin's only /v1 slot while it runs.
    let endless = json!({
        "messages": [{"role": "user", "content": "List sixty-four long sentences."}],
        "response_format": endless_schema(),
        "stream": true,
        "stream_options": {"include_usage": true}
    });
    let stream = ureq::post(&server.url("/v1/chat/completions"))
        .timeout(Duration::from_secs(600))
        .set("Authorization", &format!("Bearer {token}"))
        .send_json(endless)
        .expect("the stream starts");
    let mut lines = BufReader::new(stream.into_reader()).lines();

    let (status, body, retry_after) = chat_as(&server, &token, &short_question());
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert!(retry_after.is_some(), "no Retry-After");

    // Another user is not limited by the admin's requests (this one waits for the model).
    let other = {
        let (base, bob) = (server.base.clone(), bob.clone());
        std::thread::spawn(move || {
            ureq::post(&format!("{base}/v1/chat/completions"))
                .timeout(Duration::from_secs(600))
                .set("Authorization", &format!("Bearer {bob}"))
                .send_json(short_question())
                .map(|response| response.status())
                .map_err(|err| err.to_string())
        })
    };

    // The stream ends at the cap, cut by length.
    let mut finish = None;
    let mut usage = None;
    for line in lines.by_ref() {
        let line = line.expect("stream line");
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).expect("chunk JSON");
        if let Some(reason) = chunk["choices"][0]["finish_reason"].as_str() {
            finish = Some(reason.to_owned());
        }
        if chunk["usage"].is_object() {
            usage = Some(chunk["usage"].clone());
        }
    }
    drop(lines);
    assert_eq!(finish.as_deref(), Some("length"));
    let usage = usage.expect("usage in the last chunk");
    assert_eq!(usage["completion_tokens"], CAP, "{usage}");
    assert_eq!(other.join().expect("bob's thread"), Ok(200));

    // The slot came back with the end of the stream.
    let started = Instant::now();
    loop {
        let (status, body, _) = chat_as(&server, &token, &short_question());
        if status == 200 {
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the slot was not given back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Queued chat messages: with one worker and one queued message allowed, the third
    // message at the latest is refused, and nothing of it is stored.
    let mut refused = None;
    for attempt in 0..3 {
        let (_, conversation) = server.post_json("/api/conversations", &json!({}));
        let id = conversation["id"]
            .as_str()
            .expect("conversation id")
            .to_owned();
        let posted = server
            .post(&format!("/api/conversations/{id}/messages"))
            .send_json(json!({"content": format!("Tell me a long story, number {attempt}.")}));
        match posted {
            Ok(response) => assert_eq!(response.status(), 202),
            Err(ureq::Error::Status(status, response)) => {
                assert_eq!(status, 429);
                assert!(response.header("retry-after").is_some());
                let body: Value = response.into_json().expect("JSON error");
                assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
                refused = Some(id);
                break;
            }
            Err(err) => panic!("posting failed: {err}"),
        }
    }
    let refused = refused.expect("a message beyond the allowance was refused");
    let stored: Value = server
        .get(&format!("/api/conversations/{refused}"))
        .call()
        .expect("conversation")
        .into_json()
        .expect("JSON");
    assert_eq!(stored["messages"], json!([]), "{stored}");
    // Bob's messages are not affected by the admin's queue.
    let (_, conversation) = into_status_and_json(
        ureq::post(&server.url("/api/conversations"))
            .set("Authorization", &format!("Bearer {bob}"))
            .send_json(json!({})),
    );
    let id = conversation["id"].as_str().expect("conversation id");
    let (status, body) = into_status_and_json(
        ureq::post(&server.url(&format!("/api/conversations/{id}/messages")))
            .set("Authorization", &format!("Bearer {bob}"))
            .send_json(json!({"content": "hello"})),
    );
    assert_eq!(status, 202, "{body}");
}

#[test]
fn the_conversation_list_comes_a_page_at_a_time() {
    let server = Server::start(&[]);
    let mut created = Vec::new();
    for n in 0..5 {
        let (status, body) =
            server.post_json("/api/conversations", &json!({"title": format!("c{n}")}));
        assert_eq!(status, 201, "{body}");
        created.push(body["id"].as_str().expect("id").to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/api/conversations?limit=2".to_owned();
    loop {
        let page: Value = server
            .get(&path)
            .call()
            .expect("page")
            .into_json()
            .expect("JSON");
        let items = page["conversations"].as_array().expect("conversations");
        assert!(items.len() <= 2, "{page}");
        seen.extend(
            items
                .iter()
                .map(|c| c["id"].as_str().expect("id").to_owned()),
        );
        match page["next_before"].as_str() {
            Some(cursor) => path = format!("/api/conversations?limit=2&before={cursor}"),
            None => break,
        }
    }
    created.sort();
    seen.sort();
    assert_eq!(seen, created);
    let bad = server.get("/api/conversations?before=nonsense").call();
    let (status, body) = into_status_and_json(bad);
    assert_eq!(status, 400, "{body}");
    let (status, _) = into_status_and_json(server.get("/api/conversations?limit=0").call());
    assert_eq!(status, 400);
}
