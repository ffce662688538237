//! Attacks on the real server by clients that have no account.
//! - Slow and idle clients (slowloris): hundreds of sockets that never finish their headers
//!   cannot keep `/healthz`, a sign-in or an API call from answering; they are closed at the
//!   header deadline; a body sent too slowly gets 408.
//! - A password-guessing flood from many addresses: the real user, from an address of their
//!   own, still signs in.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::{into_status_and_json, Server, ADMIN, ADMIN_PASSWORD};

const SLOW_CLIENTS: usize = 300;
const HEADER_TIMEOUT_SECS: u64 = 3;

fn address(server: &Server) -> String {
    server
        .base
        .strip_prefix("http://")
        .expect("the server's base URL is http://")
        .to_owned()
}

/// A socket that sends a request line and one header, then nothing: the headers never end.
fn slow_client(address: &str) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .write_all(b"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: ")
        .ok()?;
    Some(stream)
}

/// Whether the server closed `stream` (end of stream or a reset) within `within`.
fn closed_by_server(stream: &TcpStream, within: Duration) -> bool {
    let mut reader = stream;
    let deadline = Instant::now() + within;
    let mut buffer = [0_u8; 512];
    while Instant::now() < deadline {
        if stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .is_err()
        {
            return true;
        }
        match reader.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn slow_clients_cannot_take_the_server() {
    let server = Server::start(&[
        "--max-connections",
        "32",
        "--health-connections",
        "4",
        "--header-timeout-seconds",
        &HEADER_TIMEOUT_SECS.to_string(),
        "--body-timeout-seconds",
        "3",
    ]);
    let address = address(&server);
    let started = Instant::now();
    let slow: Vec<TcpStream> = (0..SLOW_CLIENTS)
        .filter_map(|_| slow_client(&address))
        .collect();
    assert!(
        slow.len() > 100,
        "only {} slow clients connected",
        slow.len()
    );

    // While they hang on, the server answers a probe, a sign-in and an API call.
    let health = ureq::get(&server.url("/healthz"))
        .timeout(Duration::from_secs(5))
        .call();
    assert_eq!(into_status_and_json(health).0, 200);
    let login = ureq::post(&server.url("/api/login"))
        .timeout(Duration::from_secs(10))
        .send_json(json!({"name": ADMIN, "password": ADMIN_PASSWORD}));
    assert_eq!(into_status_and_json(login).0, 200);
    let me = ureq::get(&server.url("/api/me"))
        .timeout(Duration::from_secs(5))
        .set("Authorization", &format!("Bearer {}", server.token))
        .call();
    let (status, body) = into_status_and_json(me);
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(HEADER_TIMEOUT_SECS),
        "the answers above came only after the slow clients' header deadline"
    );

    // Every slow client is closed by the header deadline, never left open.
    let still_open = slow
        .iter()
        .filter(|stream| !closed_by_server(stream, Duration::from_secs(HEADER_TIMEOUT_SECS + 5)))
        .count();
    assert_eq!(still_open, 0, "slow clients the server kept open");

    // A body sent too slowly: headers at once, half the body, then silence → 408.
    let mut stream = TcpStream::connect(&address).expect("connect");
    stream
        .write_all(
            b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 64\r\n\r\n{\"name\": \"adm",
        )
        .expect("send half a request");
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("read timeout");
    // Kept on a read error too (the server may leave the connection open after answering).
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    assert!(
        response.starts_with("HTTP/1.1 408"),
        "a half-sent body got: {response}"
    );
    assert!(response.contains("request_timeout"), "{response}");
}

/// Guessing threads, and the addresses they rotate through (behind a trusted proxy).
const GUESSERS: usize = 16;
const GUESSING_ADDRESSES: usize = 200;
/// The real user's sign-ins during the flood.
const USER_SIGN_INS: usize = 20;

fn sign_in_from(server: &Server, address: &str, password: &str) -> u16 {
    let result = ureq::post(&server.url("/api/login"))
        .timeout(Duration::from_secs(30))
        .set("X-Forwarded-For", address)
        .send_json(json!({"name": ADMIN, "password": password}));
    into_status_and_json(result).0
}

#[test]
fn the_real_user_signs_in_during_a_many_address_guessing_flood() {
    let server = Arc::new(Server::start(&["--trusted-proxy", "127.0.0.1"]));
    let stop = Arc::new(AtomicBool::new(false));
    let guesses = Arc::new(AtomicUsize::new(0));
    let guessers: Vec<_> = (0..GUESSERS)
        .map(|thread| {
            let (server, stop, guesses) = (server.clone(), stop.clone(), guesses.clone());
            std::thread::spawn(move || {
                let mut n = thread;
                while !stop.load(Ordering::Relaxed) {
                    let address = format!("10.9.{}.{}", n % GUESSING_ADDRESSES / 250, n % 250);
                    sign_in_from(&server, &address, "not-the-password");
                    guesses.fetch_add(1, Ordering::Relaxed);
                    n += GUESSERS;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let mut signed_in = 0;
    let mut waits = Vec::new();
    for _ in 0..USER_SIGN_INS {
        let started = Instant::now();
        if sign_in_from(&server, "192.168.50.7", ADMIN_PASSWORD) == 200 {
            signed_in += 1;
        }
        waits.push(started.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    for guesser in guessers {
        guesser.join().expect("a guessing thread");
    }
    waits.sort();
    println!(
        "{}",
        json!({
            "user_sign_ins": USER_SIGN_INS,
            "succeeded": signed_in,
            "p50_ms": waits[waits.len() / 2].as_millis(),
            "max_ms": waits[waits.len() - 1].as_millis(),
            "guesses": guesses.load(Ordering::Relaxed),
        })
    );
    assert_eq!(
        signed_in, USER_SIGN_INS,
        "the real user was refused during the flood (waits {waits:?})"
    );
    assert!(
        guesses.load(Ordering::Relaxed) > USER_SIGN_INS,
        "the flood did not run"
    );
}

/// Half-sent sign-in bodies: the attack's sockets, and what each one announces and sends.
const HALF_SENT: usize = 32;
const ANNOUNCED_BYTES: usize = 8_000;
const SENT_BYTES: usize = 100;
const WEBHOOK_TOKEN: &str = "abuse-test-webhook-token";

/// A connection from `source` (any 127.x.y.z reaches the loopback server) that sends a
/// sign-in announcing `ANNOUNCED_BYTES` and then only the first `SENT_BYTES`.
fn half_sent_sign_in(runtime: &tokio::runtime::Runtime, source: &str, address: &str) -> TcpStream {
    let source: std::net::SocketAddr = format!("{source}:0").parse().expect("source address");
    let target: std::net::SocketAddr = address.parse().expect("server address");
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(source).expect("bind the source address");
        socket.connect(target).await.expect("connect")
    });
    let mut stream = stream.into_std().expect("std stream");
    stream.set_nonblocking(false).expect("blocking");
    let head = format!(
        "POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {ANNOUNCED_BYTES}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("headers");
    stream
        .write_all(&[b' '; SENT_BYTES])
        .expect("the first bytes of the body");
    stream
}

#[test]
fn half_sent_sign_in_bodies_from_one_client_lock_nobody_out() {
    let server = Server::start(&["--alert-token", WEBHOOK_TOKEN]);
    let address = address(&server);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let attack: Vec<TcpStream> = (0..HALF_SENT)
        .map(|_| half_sent_sign_in(&runtime, "127.0.0.2", &address))
        .collect();
    std::thread::sleep(Duration::from_millis(300));

    // The real user, from an address of their own, and Alertmanager sign in and post while
    // the attack's sockets are open.
    let mut signed_in = 0;
    let mut alerts_taken = 0;
    for _ in 0..20 {
        let login = ureq::post(&server.url("/api/login"))
            .timeout(Duration::from_secs(10))
            .send_json(json!({"name": ADMIN, "password": ADMIN_PASSWORD}));
        if into_status_and_json(login).0 == 200 {
            signed_in += 1;
        }
        let alert = ureq::post(&server.url("/api/alerts"))
            .timeout(Duration::from_secs(10))
            .set("Authorization", &format!("Bearer {WEBHOOK_TOKEN}"))
            .send_json(json!({
                "version": "4", "groupKey": "g", "status": "firing", "receiver": "warden",
                "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                "externalURL": "http://alertmanager.local", "truncatedAlerts": 0,
                "alerts": [{"status": "firing",
                            "labels": {"alertname": "DiskFull", "service": "db"},
                            "annotations": {}, "startsAt": "2026-12-07T10:00:00Z",
                            "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "0123456789abcdef"}],
            }));
        let (status, body) = into_status_and_json(alert);
        if status == 200 {
            alerts_taken += 1;
        } else {
            println!("alert post: {status} {body}");
        }
    }
    println!(
        "{}",
        json!({"half_sent": attack.len(), "user_sign_ins": 20, "succeeded": signed_in,
               "alerts": 20, "alerts_taken": alerts_taken})
    );
    assert_eq!(
        signed_in, 20,
        "the real user was locked out by half-sent bodies"
    );
    assert_eq!(
        alerts_taken, 20,
        "Alertmanager was locked out by half-sent bodies"
    );

    // The attack's sockets are answered 408 by the short sign-in deadline or 503 when over
    // the per-address cap, never left holding a slot.
    let mut answered = 0;
    for mut stream in attack {
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("read timeout");
        let mut response = [0_u8; 12];
        if stream.read_exact(&mut response).is_ok() {
            let line = String::from_utf8_lossy(&response);
            assert!(
                line.starts_with("HTTP/1.1 408") || line.starts_with("HTTP/1.1 503"),
                "{line}"
            );
            answered += 1;
        }
    }
    assert_eq!(answered, HALF_SENT);

    // A sign-in announcing more than a sign-in can hold is refused before its body.
    let mut stream = TcpStream::connect(&address).expect("connect");
    stream
        .write_all(
            b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 4194304\r\n\r\n{",
        )
        .expect("send the head");
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("read timeout");
    let mut response = [0_u8; 12];
    stream
        .read_exact(&mut response)
        .expect("an answer without the body");
    assert_eq!(&response, b"HTTP/1.1 413");
}
