//! Shared test helpers: paths to the real model files (failing loudly when they are
//! missing), running the `warden` binary, and a server started in a temp dir.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to load its models and answer `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(180);

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chat model control-plane tests run on (routing, budgets, durability, the API's
/// shape): the fast 135M one, chosen by its manifest name. Answer-quality tests use the
/// default model instead (`warden_on_default_model`).
pub const CONTROL_PLANE_MODEL: &str = "smollm2-135m-instruct";

/// The manifest's default chat model (its first), which the answer-quality tests run on.
pub const DEFAULT_CHAT_MODEL: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m";

/// The repository's models folder; panics with instructions when the defaults are absent.
pub fn models_dir() -> PathBuf {
    let dir = repo().join("models");
    for file in [
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
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
        // Two tests run at once on CI's two cores: one inference thread each. Two processes
        // with a thread per core each would contend for both (spinning workers make that
        // several times slower, not twice).
        .env("WARDEN_THREADS", "1")
        .env("WARDEN_CHAT_MODEL", CONTROL_PLANE_MODEL)
        .env_remove("WARDEN_EMBED_MODEL");
    command
}

/// `warden` on the manifest's default chat model (no model chosen), with every CPU: for
/// the answer-quality tests.
pub fn warden_on_default_model() -> Command {
    let mut command = warden();
    command
        .env_remove("WARDEN_CHAT_MODEL")
        .env_remove("WARDEN_THREADS");
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

/// Where a test server's standard output and error go, inside its data folder.
const STDOUT_FILE: &str = "server.stdout";
const STDERR_FILE: &str = "server.stderr";

/// The administrator every test server starts with, and their password.
pub const ADMIN: &str = "admin";
pub const ADMIN_PASSWORD: &str = "admin-password-1";

/// A `warden serve` child process on a free loopback port; killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    /// An API token of `ADMIN`.
    pub token: String,
    data: PathBuf,
    _owned_data: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts a server on the default models plus `extra` flags, in a fresh data folder
    /// holding the user `ADMIN`, and waits until it is up.
    pub fn start(extra: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        add_user(data.path(), ADMIN, "admin", ADMIN_PASSWORD);
        let token = create_token(data.path(), ADMIN);
        let mut server = Server::start_in(data.path(), &token, free_port(), extra);
        server._owned_data = Some(data);
        server
    }

    /// Starts a server in a fresh data folder with no users (first start: it prints the
    /// bootstrap link, see `stdout_text`). `token` is empty.
    pub fn start_without_users(extra: &[&str]) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        let mut server = Server::start_in(data.path(), "", free_port(), extra);
        server._owned_data = Some(data);
        server
    }

    /// What the server printed on standard output so far.
    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(self.data.join(STDOUT_FILE)).unwrap_or_default()
    }

    /// What the server logged on standard error so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.data.join(STDERR_FILE)).unwrap_or_default()
    }

    /// Starts a server on an existing data folder (which the caller keeps) and `port`.
    pub fn start_in(data: &Path, token: &str, port: u16, extra: &[&str]) -> Server {
        Server::start_logging(data, token, port, extra, "warn")
    }

    /// `start_in`, logging at `level` (`WARDEN_LOG`).
    pub fn start_logging(
        data: &Path,
        token: &str,
        port: u16,
        extra: &[&str],
        level: &str,
    ) -> Server {
        Server::start_with(data, token, port, extra, |command| {
            command.env("WARDEN_LOG", level);
        })
    }

    /// Starts a server with `ADMIN` in a fresh data folder, its command adjusted by
    /// `configure` (environment variables) before it starts.
    pub fn start_configured(extra: &[&str], configure: impl FnOnce(&mut Command)) -> Server {
        let data = tempfile::tempdir().expect("temp dir");
        add_user(data.path(), ADMIN, "admin", ADMIN_PASSWORD);
        let token = create_token(data.path(), ADMIN);
        let mut server = Server::start_with(data.path(), &token, free_port(), extra, configure);
        server._owned_data = Some(data);
        server
    }

    /// Starts a server on `data` and `port` with `extra` flags, its command adjusted by
    /// `configure`.
    pub fn start_with(
        data: &Path,
        token: &str,
        port: u16,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Server {
        let addr = format!("127.0.0.1:{port}");
        let models = models_dir();
        let mut command = warden();
        configure(&mut command);
        command
            .args(["serve", "--addr", &addr, "--data"])
            .arg(data)
            .arg("--models")
            .arg(&models)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(data.join(STDOUT_FILE)).expect("stdout file"))
            .stderr(std::fs::File::create(data.join(STDERR_FILE)).expect("stderr file"));
        let child = command.spawn().expect("cannot start warden serve");
        let mut server = Server {
            child,
            base: format!("http://{addr}"),
            token: token.to_owned(),
            data: data.to_path_buf(),
            _owned_data: None,
        };
        server.wait_until_up();
        server
    }

    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL: no shutdown, no flush).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A GET carrying the admin's token.
    pub fn get(&self, path: &str) -> ureq::Request {
        self.authorized(ureq::get(&self.url(path)), &self.token)
    }

    /// A POST carrying the admin's token.
    pub fn post(&self, path: &str) -> ureq::Request {
        self.authorized(ureq::post(&self.url(path)), &self.token)
    }

    /// A DELETE carrying the admin's token.
    pub fn delete(&self, path: &str) -> ureq::Request {
        self.authorized(ureq::delete(&self.url(path)), &self.token)
    }

    /// A JSON POST with the admin's token that returns (status, body) for any status.
    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        into_status_and_json(self.post(path).send_json(body.clone()))
    }

    fn authorized(&self, request: ureq::Request, token: &str) -> ureq::Request {
        request
            .timeout(Duration::from_secs(300))
            .set("Authorization", &format!("Bearer {token}"))
    }

    fn wait_until_up(&mut self) {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "warden serve exited early ({status}): {}",
                    self.stderr_text()
                );
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

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local address").port()
}

/// Adds a user with the CLI (`warden user add … --password-stdin`).
pub fn add_user(data: &Path, name: &str, role: &str, password: &str) {
    use std::io::Write;
    let mut child = warden()
        .args([
            "user",
            "add",
            name,
            "--role",
            role,
            "--password-stdin",
            "--data",
        ])
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run warden user add");
    if let Some(mut stdin) = child.stdin.take() {
        writeln!(stdin, "{password}").expect("write the password");
    }
    let output = child.wait_with_output().expect("warden user add");
    assert!(
        output.status.success(),
        "user add failed: {}",
        stderr(&output)
    );
}

/// Creates an API token with the CLI and returns its secret.
pub fn create_token(data: &Path, user: &str) -> String {
    let output = warden()
        .args(["token", "create", "--user", user, "--data"])
        .arg(data)
        .output()
        .expect("cannot run warden token create");
    assert!(
        output.status.success(),
        "token create failed: {}",
        stderr(&output)
    );
    stdout(&output).trim().to_owned()
}

/// The status and JSON body of a response, whatever its status.
pub fn into_status_and_json(
    result: Result<ureq::Response, ureq::Error>,
) -> (u16, serde_json::Value) {
    let response = match result {
        Ok(response) => response,
        Err(ureq::Error::Status(_, response)) => response,
        Err(err) => panic!("request failed: {err}"),
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
