//! Raw command-line flags and environment become one validated configuration here; no
//! other module reads the environment (except the engine's thread setup it is given).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::engine::{EmbedPrecision, EngineConfig, ModelKind, ModelSpec, OutputLimits};
use crate::http::{AlertWebhook, ConnectionLimits, HttpLimits};
use crate::model_files::{resolve, Manifest, ModelFileError};
use crate::retrieval::{RetrievalConfig, RootPolicy};
use crate::upstream::{ApiKey, UpstreamConfig, UpstreamFlags};

/// Largest request body the HTTP server accepts.
const MAX_BODY_BYTES: usize = 4 << 20;
/// Largest `--max-output-tokens`.
const MAX_TOKENS_CAP: usize = 8192;
/// Most inputs in one embeddings request.
const MAX_EMBEDDING_INPUTS: usize = 2048;

/// Flags that choose and size the models, shared by every command that loads them.
#[derive(Debug, Clone, Args)]
pub struct ModelFlags {
    /// Folder holding the model files and manifest.toml.
    #[arg(long, env = "WARDEN_MODELS", default_value = "models")]
    pub models: PathBuf,
    /// Chat model: a GGUF path, a file name in the models folder, or hf://owner/repo/file.
    #[arg(long, env = "WARDEN_CHAT_MODEL")]
    pub chat_model: Option<String>,
    /// Embedding model folder (safetensors + tokenizer.json + config.json), same forms.
    #[arg(long, env = "WARDEN_EMBED_MODEL")]
    pub embed_model: Option<String>,
    /// CPU threads for inference (default: all available).
    #[arg(long, env = "WARDEN_THREADS")]
    pub threads: Option<usize>,
    /// Requests that may wait per model before new ones are refused with 503.
    #[arg(long, env = "WARDEN_QUEUE_DEPTH", default_value_t = 16)]
    pub queue_depth: usize,
    /// Context window cap in tokens (memory bound), whatever the model allows.
    #[arg(long, env = "WARDEN_MAX_CONTEXT", default_value_t = 8192)]
    pub max_context: usize,
    /// Chat requests a model decodes together (continuous batching). Each running request
    /// holds a KV cache of up to --max-context positions; more wait in the queue.
    #[arg(long, env = "WARDEN_MAX_BATCH", default_value_t = 8)]
    pub max_batch: usize,
    /// Embedding encoder: `int8` (Warden's CPU encoder, 8-bit weights and activations),
    /// `f32` (full precision) or `auto` (int8 on a CPU with AVX2 or AVX-512 VNNI, else f32).
    #[arg(long, env = "WARDEN_EMBED_PRECISION", default_value = "auto")]
    pub embed_precision: EmbedPrecision,
    /// Longest string constrained JSON output may hold where its schema sets no maxLength.
    #[arg(long, env = "WARDEN_MAX_OUTPUT_STRING", default_value_t = 512)]
    pub max_output_string: usize,
    /// An OpenAI-compatible server's base URL ending in /v1 (vLLM, TGI, llama.cpp's server,
    /// Ollama, another Warden): its model becomes the default chat model, and the local
    /// chat model is loaded only if --chat-model names one.
    #[arg(long, env = "WARDEN_CHAT_UPSTREAM")]
    pub chat_upstream: Option<String>,
    /// The model's name on --chat-upstream (and the name Warden serves it under).
    #[arg(long, env = "WARDEN_CHAT_UPSTREAM_MODEL")]
    pub chat_upstream_model: Option<String>,
    /// File holding the upstream API key (else WARDEN_UPSTREAM_API_KEY); never on the
    /// command line.
    #[arg(long, env = "WARDEN_UPSTREAM_API_KEY_FILE")]
    pub upstream_api_key_file: Option<PathBuf>,
    /// Upstream models file (TOML): several endpoints per model, timeouts, concurrency,
    /// context length, tokenizer, private CA, client certificate (README: "Using your GPU
    /// servers").
    #[arg(long, env = "WARDEN_MODELS_CONFIG")]
    pub models_config: Option<PathBuf>,
}

/// The environment variable holding the upstream API key.
pub const UPSTREAM_API_KEY_ENV: &str = "WARDEN_UPSTREAM_API_KEY";

/// The upstream API key: the file's content when a file is named, else the environment's.
pub fn upstream_api_key(file: Option<&std::path::Path>) -> Result<Option<ApiKey>, ConfigError> {
    let text = match file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|err| {
            ConfigError::Invalid(format!(
                "cannot read the upstream API key file {}: {err}",
                path.display()
            ))
        })?),
        None => std::env::var(UPSTREAM_API_KEY_ENV).ok(),
    };
    Ok(text.as_deref().and_then(ApiKey::new))
}

impl ModelFlags {
    /// The upstream engines the flags, the models file and the key name.
    pub fn upstream(&self) -> Result<UpstreamConfig, ConfigError> {
        let api_key = upstream_api_key(self.upstream_api_key_file.as_deref())?;
        let flags = UpstreamFlags {
            chat_upstream: self.chat_upstream.clone(),
            chat_upstream_model: self.chat_upstream_model.clone(),
            api_key,
            models_config: self.models_config.clone(),
        };
        UpstreamConfig::from_flags(&flags).map_err(|err| ConfigError::Invalid(err.to_string()))
    }
}

/// Flags that tune hybrid retrieval, shared by the server and the `kb`/`eval` commands.
#[derive(Debug, Clone, Args)]
pub struct RetrievalFlags {
    /// Reciprocal Rank Fusion constant k (larger flattens the rank weighting).
    #[arg(long, env = "WARDEN_RRF_K", default_value_t = 60.0)]
    pub rrf_k: f64,
    /// Weight of the BM25 list in the fusion.
    #[arg(long, env = "WARDEN_BM25_WEIGHT", default_value_t = 1.0)]
    pub bm25_weight: f64,
    /// Weight of the vector list in the fusion.
    #[arg(long, env = "WARDEN_VECTOR_WEIGHT", default_value_t = 1.0)]
    pub vector_weight: f64,
}

impl RetrievalFlags {
    pub fn config(&self) -> Result<RetrievalConfig, ConfigError> {
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !(valid(self.rrf_k) && valid(self.bm25_weight) && valid(self.vector_weight))
            || self.bm25_weight + self.vector_weight == 0.0
        {
            return Err(ConfigError::Invalid(
                "--rrf-k and the fusion weights must be finite and ≥ 0, with one weight > 0".into(),
            ));
        }
        Ok(RetrievalConfig {
            rrf_k: self.rrf_k,
            bm25_weight: self.bm25_weight,
            vector_weight: self.vector_weight,
            ..RetrievalConfig::default()
        })
    }
}

/// The folders knowledge bases may be added from over HTTP.
#[derive(Debug, Clone, Args)]
pub struct KbRootFlags {
    /// Folders knowledge bases may be added from over HTTP (comma-separated). Without any,
    /// adding a folder over HTTP is refused; `warden kb add` on the host may add any folder.
    #[arg(long, env = "WARDEN_KB_ROOTS", value_delimiter = ',')]
    pub kb_roots: Vec<PathBuf>,
}

impl KbRootFlags {
    /// The root policy: HTTP adds inside the allowed roots, never the models folder (the
    /// library adds its data folder).
    pub fn policy(&self, models: &std::path::Path) -> Result<RootPolicy, ConfigError> {
        let roots: Vec<PathBuf> = self
            .kb_roots
            .iter()
            .filter(|r| !r.as_os_str().is_empty())
            .cloned()
            .collect();
        let mut policy = RootPolicy::with_allowed_roots(&roots)
            .map_err(|e| ConfigError::Invalid(format!("--kb-roots: {e}")))?;
        policy.protect(models, "models folder");
        Ok(policy)
    }
}

/// Shortest alert webhook token accepted.
const MIN_ALERT_TOKEN_CHARS: usize = 16;

/// The Alertmanager webhook's credential (`POST /api/alerts`).
#[derive(Clone, Args)]
pub struct AlertFlags {
    /// Token Alertmanager sends as `Authorization: Bearer …` to `POST /api/alerts` (at least
    /// 16 visible characters; prefer the environment variable). Without it the webhook is off.
    #[arg(long, env = "WARDEN_ALERT_TOKEN", hide_env_values = true)]
    pub alert_token: Option<String>,
}

impl std::fmt::Debug for AlertFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = self.alert_token.as_ref().map(|_| "<set>");
        f.debug_struct("AlertFlags")
            .field("alert_token", &token)
            .finish()
    }
}

impl AlertFlags {
    /// The webhook, off when no token is set; an empty token counts as none.
    pub fn webhook(&self) -> Result<AlertWebhook, ConfigError> {
        let Some(token) = self.alert_token.as_deref().filter(|t| !t.is_empty()) else {
            return Ok(AlertWebhook::default());
        };
        let visible = token.chars().all(|c| c.is_ascii_graphic());
        if token.chars().count() < MIN_ALERT_TOKEN_CHARS || !visible {
            return Err(ConfigError::Invalid(format!(
                "--alert-token must be at least {MIN_ALERT_TOKEN_CHARS} visible ASCII characters"
            )));
        }
        Ok(AlertWebhook::with_token(token))
    }
}

/// Which models a command needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Chat,
    Embedding,
    Both,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    ModelFiles(#[from] ModelFileError),
    #[error("{0}")]
    Invalid(String),
}

/// Per-user allowances and the server's answer cap, so that no one user or request can
/// hold the models.
#[derive(Debug, Clone, Args)]
pub struct QuotaFlags {
    /// Most tokens one `/v1` answer may have; a request without `max_tokens` gets this
    /// many at most, one asking for more is refused.
    #[arg(long, env = "WARDEN_MAX_OUTPUT_TOKENS", default_value_t = 2048)]
    pub max_output_tokens: usize,
    /// Most chat messages one user may have waiting for an answer; more get 429.
    #[arg(long, env = "WARDEN_MAX_QUEUED_RUNS_PER_USER", default_value_t = 8)]
    pub max_queued_runs_per_user: u32,
    /// Most `/v1` requests one user may have in progress at once; more get 429.
    #[arg(long, env = "WARDEN_MAX_V1_REQUESTS_PER_USER", default_value_t = 4)]
    pub max_v1_requests_per_user: usize,
    /// Most runs (chat answers, diagnostics) of one user the workers take up at once; the
    /// user's further runs wait while other users' runs start. Default: half the run
    /// workers, rounded up.
    #[arg(long, env = "WARDEN_MAX_RUNNING_RUNS_PER_USER", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_running_runs_per_user: Option<u32>,
    /// Most diagnostics one user may have in progress; more get 429.
    #[arg(long, env = "WARDEN_MAX_DIAGNOSTICS_PER_USER", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_diagnostics_per_user: u32,
}

/// How many connections `serve` holds and how long a client may take to send a request.
#[derive(Debug, Args)]
pub struct ConnectionFlags {
    /// Open connections served in full; connections beyond it only answer `/healthz`.
    #[arg(long, env = "WARDEN_MAX_CONNECTIONS", default_value_t = ConnectionLimits::DEFAULT.max_connections as u32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_connections: u32,
    /// Connections kept beyond --max-connections for health checks (others are closed).
    #[arg(long, env = "WARDEN_HEALTH_CONNECTIONS", default_value_t = ConnectionLimits::DEFAULT.health_reserve as u32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub health_connections: u32,
    /// Seconds a client has to send a request's headers (and an idle kept-alive
    /// connection stays open).
    #[arg(long, env = "WARDEN_HEADER_TIMEOUT_SECONDS", default_value_t = ConnectionLimits::DEFAULT.header_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    pub header_timeout_seconds: u64,
    /// Seconds a client has to send a request's body once its headers arrived (408 after).
    #[arg(long, env = "WARDEN_BODY_TIMEOUT_SECONDS", default_value_t = ConnectionLimits::DEFAULT.body_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout_seconds: u64,
    /// Sign-in, bootstrap and webhook bodies read at once (more get 503).
    #[arg(long, env = "WARDEN_MAX_ANONYMOUS_BODIES", default_value_t = ConnectionLimits::DEFAULT.max_anonymous_bodies as u32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_anonymous_bodies: u32,
}

impl ConnectionFlags {
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections as usize,
            health_reserve: self.health_connections as usize,
            header_timeout: std::time::Duration::from_secs(self.header_timeout_seconds),
            body_timeout: std::time::Duration::from_secs(self.body_timeout_seconds),
            max_anonymous_bodies: self.max_anonymous_bodies as usize,
        }
    }
}

/// Validated server settings.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub engine: EngineConfig,
    pub http: HttpLimits,
    /// Most queued chat runs per user.
    pub max_queued_runs_per_user: u32,
}

impl ServeConfig {
    pub fn new(
        addr: SocketAddr,
        data_dir: PathBuf,
        models: &ModelFlags,
        quotas: &QuotaFlags,
    ) -> Result<Self, ConfigError> {
        let engine = engine_config(models, Needs::Both)?;
        if !(1..=MAX_TOKENS_CAP).contains(&quotas.max_output_tokens) {
            return Err(ConfigError::Invalid(format!(
                "--max-output-tokens must be between 1 and {MAX_TOKENS_CAP}"
            )));
        }
        if quotas.max_queued_runs_per_user == 0 || quotas.max_v1_requests_per_user == 0 {
            return Err(ConfigError::Invalid(
                "--max-queued-runs-per-user and --max-v1-requests-per-user must be ≥ 1".into(),
            ));
        }
        let http = HttpLimits {
            max_body_bytes: MAX_BODY_BYTES,
            max_tokens_cap: quotas.max_output_tokens.min(engine.max_context),
            max_embedding_inputs: MAX_EMBEDDING_INPUTS,
            max_v1_requests_per_user: quotas.max_v1_requests_per_user,
            heartbeat: DEFAULT_HEARTBEAT,
            connections: crate::http::ConnectionLimits::DEFAULT,
        };
        Ok(Self {
            addr,
            data_dir,
            engine,
            http,
            max_queued_runs_per_user: quotas.max_queued_runs_per_user,
        })
    }
}

/// Heartbeat interval of a run's idle event stream unless the server sets another.
pub const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// The largest --max-batch: each running request holds its own KV cache.
const MAX_BATCH: usize = 64;

/// The engine settings for the models a command needs.
pub fn engine_config(flags: &ModelFlags, needs: Needs) -> Result<EngineConfig, ConfigError> {
    if flags.queue_depth == 0
        || flags.max_batch == 0
        || flags.max_batch > MAX_BATCH
        || flags.max_context < 64
        || flags.max_output_string == 0
    {
        return Err(ConfigError::Invalid(format!(
            "--queue-depth and --max-output-string must be ≥ 1, --max-batch 1..={MAX_BATCH} and --max-context ≥ 64"
        )));
    }
    let threads = match flags.threads {
        Some(0) => return Err(ConfigError::Invalid("--threads must be ≥ 1".into())),
        Some(n) => n,
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    let upstream = flags.upstream()?;
    let mut models = Vec::new();
    // With an upstream chat model, a local one is loaded only when named.
    let local_chat = upstream.chat.is_empty() || flags.chat_model.is_some();
    if matches!(needs, Needs::Chat | Needs::Both) && local_chat {
        models.push(model_spec(
            flags,
            ModelKind::Chat,
            flags.chat_model.as_deref(),
        )?);
    }
    if matches!(needs, Needs::Embedding | Needs::Both) {
        models.push(model_spec(
            flags,
            ModelKind::Embedding,
            flags.embed_model.as_deref(),
        )?);
    }
    Ok(EngineConfig {
        models,
        upstream: match needs {
            Needs::Embedding => UpstreamConfig::default(),
            Needs::Chat | Needs::Both => upstream,
        },
        threads,
        queue_depth: flags.queue_depth,
        max_context: flags.max_context,
        max_batch: flags.max_batch,
        embed_precision: flags.embed_precision,
        output_limits: OutputLimits {
            max_string_chars: flags.max_output_string,
            ..OutputLimits::default()
        },
    })
}

/// A model chosen by flag, else the manifest's default of that kind.
fn model_spec(
    flags: &ModelFlags,
    kind: ModelKind,
    reference: Option<&str>,
) -> Result<ModelSpec, ConfigError> {
    // A manifest model's name picks that model (`--chat-model smollm2-135m-instruct`).
    let named = reference.and_then(|name| {
        let manifest = Manifest::load(&flags.models).ok()?;
        manifest
            .models
            .iter()
            .find(|m| m.kind == kind && m.name == name)
            .map(|m| ModelSpec {
                id: m.name.clone(),
                kind,
                path: flags.models.join(&m.path),
            })
    });
    if let Some(spec) = named {
        return Ok(spec);
    }
    match reference {
        Some(reference) => {
            let path = resolve(reference, &flags.models)?;
            Ok(ModelSpec {
                id: model_id_from_path(&path),
                kind,
                path,
            })
        }
        None => {
            let manifest = Manifest::load(&flags.models)?;
            let model = manifest
                .default_model(kind)
                .ok_or_else(|| ConfigError::Invalid(format!("manifest lists no {kind:?} model")))?;
            Ok(ModelSpec {
                id: model.name.clone(),
                kind,
                path: flags.models.join(&model.path),
            })
        }
    }
}

/// `models/Qwen2.5-0.5B-Instruct-Q4_K_M.gguf` → `qwen2.5-0.5b-instruct-q4_k_m`.
fn model_id_from_path(path: &std::path::Path) -> String {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "model".into());
    name.to_lowercase()
}
