//! Unit tests of the upstream chat model.
use std::io::{Read, Write};
use std::net::TcpListener;

use super::*;
use crate::engine::{ChatModelHandle, ModelInfo, ModelKind};
use crate::upstream::config::{
    BreakerSettings, EndpointConfig, Timeouts, TlsSettings, TokenizerSource,
};
use serde_json::json;

/// A server that answers every connection with `reply` (raw bytes, then holds the
/// socket open for `hold`); the base URL.
fn scripted(reply: &'static [u8], hold: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = stream.write_all(reply);
                let _ = stream.flush();
                std::thread::sleep(hold);
            });
        }
    });
    format!("http://127.0.0.1:{port}/v1")
}

fn upstream_model(urls: &[String], timeouts: Timeouts) -> ChatModelHandle {
    upstream_model_with(urls, timeouts, TlsSettings::default())
}

/// A model over `urls` (tried in that order) with `tls` for every endpoint.
fn upstream_model_with(urls: &[String], timeouts: Timeouts, tls: TlsSettings) -> ChatModelHandle {
    let config = UpstreamModel {
        name: "m".into(),
        upstream_name: "m".into(),
        endpoints: urls
            .iter()
            .enumerate()
            .map(|(i, url)| EndpointConfig {
                url: url.clone(),
                priority: i as u32,
                weight: 1,
                max_concurrent: 2,
            })
            .collect(),
        timeouts,
        breaker: BreakerSettings::DEFAULT,
        queue_depth: 4,
        context_length: Some(4096),
        tokenizer: TokenizerSource::Estimate,
        tls,
    };
    let endpoints = config
        .endpoints
        .iter()
        .map(|e| {
            Arc::new(Endpoint::new(e.clone(), &timeouts, config.breaker, &config.tls).unwrap())
        })
        .collect();
    let chat = UpstreamChat::start(
        &config,
        endpoints,
        TokenCounter::Estimate,
        None,
        4096,
        Arc::new(Metrics::new()),
    )
    .unwrap();
    let info = ModelInfo {
        id: "m".into(),
        kind: ModelKind::Chat,
        architecture: "upstream".into(),
        context_length: 4096,
        path: String::new(),
        dimensions: None,
        precision: None,
    };
    ChatModelHandle::remote(info, Arc::new(chat))
}

/// Short enough for the silent upstream to time out soon, long enough for a loaded CI
/// machine to finish a TLS handshake.
fn quick() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(3),
        first_token: Duration::from_secs(2),
        idle: Duration::from_secs(2),
        total: Duration::from_secs(20),
    }
}

/// The text and the end of one generation: `Ok(summary)` or the error's message.
fn generate(
    model: &ChatModelHandle,
    format: ResponseFormat,
) -> (String, Result<GenerationSummary, String>) {
    let request = ChatRequest {
        messages: vec![ChatMessage::new(Role::User, "hi")],
        response_format: format,
        max_tokens: Some(16),
        ..ChatRequest::default()
    };
    let mut stream = model.submit(request).unwrap();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match stream.next_timeout(Duration::from_millis(100)) {
            Err(()) => {}
            Ok(None) => return (text, Err("ended without Done".into())),
            Ok(Some(Ok(GenerationEvent::Delta(piece)))) => text.push_str(&piece),
            Ok(Some(Ok(GenerationEvent::Done(summary)))) => return (text, Ok(summary)),
            Ok(Some(Err(err))) => return (text, Err(err.to_string())),
        }
    }
    panic!("the generation never ended");
}

const STREAM: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
    data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n\
    data: [DONE]\n\n";

#[test]
fn a_stream_becomes_deltas_and_a_summary() {
    let model = upstream_model(&[scripted(STREAM, Duration::ZERO)], quick());
    let (text, done) = generate(&model, ResponseFormat::Text);
    assert_eq!(text, "Hello");
    let summary = done.unwrap();
    assert_eq!((summary.prompt_tokens, summary.completion_tokens), (7, 2));
    assert_eq!(summary.finish_reason, FinishReason::Stop);
}

#[test]
fn bad_upstreams_give_clear_errors_and_fail_over_before_the_first_token() {
    let html: &'static [u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 13\r\n\r\n<html></html>";
    let error: &'static [u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 37\r\n\r\n{\"error\":{\"message\":\"out of memory\"}}";
    let half: &'static [u8] =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n\
        data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let silent: &'static [u8] = b"";
    for (reply, hold, expected) in [
        (html, Duration::ZERO, "bad_response"),
        (
            error,
            Duration::ZERO,
            "status_5xx (HTTP 500: out of memory)",
        ),
        (half, Duration::ZERO, "stream_cut"),
        (silent, Duration::from_secs(10), "first_token_timeout"),
    ] {
        let model = upstream_model(&[scripted(reply, hold)], quick());
        let started = Instant::now();
        let (_, done) = generate(&model, ResponseFormat::Text);
        let message = done.expect_err("a bad upstream fails");
        assert!(message.contains(expected), "{expected}: {message}");
        assert!(started.elapsed() < Duration::from_secs(8), "{expected}");
    }
    // Before any token, the next endpoint answers.
    let model = upstream_model(
        &[
            scripted(error, Duration::ZERO),
            scripted(STREAM, Duration::ZERO),
        ],
        quick(),
    );
    assert_eq!(generate(&model, ResponseFormat::Text).0, "Hello");
    // After tokens streamed, nothing is retried: the half-sent stream fails even though
    // a good endpoint follows.
    let model = upstream_model(
        &[
            scripted(half, Duration::ZERO),
            scripted(STREAM, Duration::ZERO),
        ],
        quick(),
    );
    let (text, done) = generate(&model, ResponseFormat::Text);
    assert_eq!(text, "Hel");
    assert!(done.unwrap_err().contains("stream_cut"));
}

/// A TLS server with the test CA's server certificate that demands a client
/// certificate from the same CA, answering every request with `STREAM`.
fn tls_server() -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { return };
            let config = config.clone();
            std::thread::spawn(move || {
                let connection = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(connection, tcp);
                let mut seen = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buffer) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = tls.write_all(STREAM);
                let _ = tls.flush();
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    format!("https://127.0.0.1:{port}/v1")
}

fn tls_model(url: &str, tls: TlsSettings) -> ChatModelHandle {
    upstream_model_with(&[url.to_owned()], quick(), tls)
}

#[test]
fn tls_to_a_private_ca_with_a_client_certificate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let url = tls_server();
    let private = TlsSettings {
        ca_file: Some(dir.join("ca.pem")),
        client_cert: Some(dir.join("client.pem")),
        client_key: Some(dir.join("client.key")),
    };
    let (text, done) = generate(&tls_model(&url, private.clone()), ResponseFormat::Text);
    assert_eq!(text, "Hello", "{done:?}");
    // The public roots do not know the private CA.
    let public = TlsSettings {
        ca_file: None,
        ..private.clone()
    };
    let (_, done) = generate(&tls_model(&url, public), ResponseFormat::Text);
    assert!(done.unwrap_err().contains("connect"));
    // The server demands a client certificate.
    let anonymous = TlsSettings {
        client_cert: None,
        client_key: None,
        ..private
    };
    let (text, done) = generate(&tls_model(&url, anonymous), ResponseFormat::Text);
    assert!(text.is_empty() && done.is_err(), "{done:?}");
    // A CA file that holds no certificate is refused when the model is configured.
    let empty = dir.join("make.sh");
    let config = EndpointConfig {
        url: url.clone(),
        priority: 0,
        weight: 1,
        max_concurrent: 1,
    };
    let bad = TlsSettings {
        ca_file: Some(empty),
        ..TlsSettings::default()
    };
    assert!(Endpoint::new(config, &quick(), BreakerSettings::DEFAULT, &bad).is_err());
}

#[test]
fn output_that_breaks_its_schema_is_asked_once_more_then_fails_closed() {
    let schema = json!({"type": "object", "required": ["route"]});
    let model = upstream_model(&[scripted(STREAM, Duration::ZERO)], quick());
    let (text, done) = generate(&model, ResponseFormat::JsonSchema(schema));
    assert_eq!(text, "", "nothing that broke the schema reaches the caller");
    assert!(done.unwrap_err().contains("broke its JSON schema twice"));
}

#[test]
fn structured_output_is_checked_in_code() {
    let schema = json!({"type": "object", "required": ["route"],
                        "properties": {"route": {"type": "string", "enum": ["kb", "chat"]}}});
    let format = ResponseFormat::JsonSchema(schema);
    assert!(check_structured(&format, "{\"route\": \"kb\"}").is_ok());
    assert!(check_structured(&format, "{\"route\": \"web\"}").is_err());
    assert!(check_structured(&format, "{\"route\": \"k").is_err());
    assert!(check_structured(&format, "<html>").is_err());
    assert!(check_structured(&ResponseFormat::JsonObject, "[1]").is_err());
    let repair = repair_request(&ChatRequest::default(), "{\"route\": ", "not JSON");
    assert_eq!(repair.messages.len(), 2);
    assert_eq!(repair.messages[0].role, Role::Assistant);
}

#[test]
fn error_bodies_give_their_message() {
    assert_eq!(
        error_message("{\"error\":{\"message\":\"model not found\",\"type\":\"x\"}}"),
        "model not found"
    );
    assert_eq!(error_message("<html>\n<body>Bad gateway"), "<html>");
}
