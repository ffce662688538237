//! Shared test helpers: paths to the real model files (failing loudly when they are
//! missing), running the `warden` binary, and a server started in a temp dir.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to load its models and answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(180);

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository's models folder; panics with instructions when the defaults are absent.
pub fn models_dir() -> PathBuf {
    let dir = repo().join("models");
    for file in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "all-MiniLM-L6-v2/model.safetensors",
    ] {
        assert!(
            dir.join(file).is_file(),
            "model file models/{file} is missing: run models/fetch first"
        );
    }
    dir
}

pub fn chat_model_path() -> PathBuf {
    models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn warden() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command
        .current_dir(repo())
        .env("WARDEN_LOG", "warn")
        .env_remove("WARDEN_CHAT_MODEL")
        .env_remove("WARDEN_EMBED_MODEL");
    command
}

/// Runs warden with `args` and returns its output.
pub fn run(args: &[&str]) -> Output {
    warden()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("cannot run the warden binary")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A `warden serve` child process on a free loopback port; killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    _data: tempfile::TempDir,
}

impl Server {
    /// Starts a server on the default models plus `extra` flags and waits until it is up.
    pub fn start(extra: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let models = models_dir();
        let mut command = warden();
        command
            .args(["serve", "--addr", &addr, "--data"])
            .arg(data.path())
            .arg("--models")
            .arg(&models)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = command.spawn().expect("cannot start warden serve");
        let mut server = Server {
            child,
            base: format!("http://{addr}"),
            _data: data,
        };
        server.wait_until_up();
        server
    }

    fn wait_until_up(&mut self) {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = pipe.read_to_string(&mut err);
                }
                panic!("warden serve exited early ({status}): {err}");
            }
            if ureq::get(&format!("{}/healthz", self.base))
                .timeout(Duration::from_secs(2))
                .call()
                .is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("warden serve did not answer /healthz within {START_TIMEOUT:?}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// A JSON POST that returns (status, body) for any status.
pub fn post_json(url: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let result = ureq::post(url)
        .timeout(Duration::from_secs(300))
        .send_json(body.clone());
    let response = match result {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(err) => panic!("POST {url} failed: {err}"),
    };
    let status = response.status();
    let text = response.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}
