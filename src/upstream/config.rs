//! What the admin configured as upstream engines, validated: the simple flags
//! (`--chat-upstream URL --chat-upstream-model NAME`) and the models file
//! (`--models-config FILE`, TOML) become one list of `UpstreamModel`s. Nothing here
//! connects anywhere; `Endpoint::new` builds the HTTP clients from it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Why the upstream configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{0}")]
    Flags(String),
}

/// How long an upstream request may take, stage by stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To open the TCP (and TLS) connection.
    pub connect: Duration,
    /// From sending the request to the first generated token (prompt processing included).
    pub first_token: Duration,
    /// Between two pieces of the stream once it has begun.
    pub idle: Duration,
    /// The whole request.
    pub total: Duration,
}

impl Timeouts {
    pub const DEFAULT: Timeouts = Timeouts {
        connect: Duration::from_secs(5),
        first_token: Duration::from_secs(60),
        idle: Duration::from_secs(30),
        total: Duration::from_secs(600),
    };
}

/// The circuit breaker of each endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the circuit.
    pub failures_to_open: u32,
    /// How long an open circuit refuses requests before one probe is let through.
    pub open_for: Duration,
}

impl BreakerSettings {
    pub const DEFAULT: BreakerSettings = BreakerSettings {
        failures_to_open: 3,
        open_for: Duration::from_secs(15),
    };
}

/// One server a model is reached at.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// An OpenAI-compatible base URL ending in `/v1`.
    pub url: String,
    /// Lower is tried first; endpoints of equal priority share the load by `weight`.
    pub priority: u32,
    pub weight: u32,
    /// Requests this endpoint works on at once; more wait in the model's queue.
    pub max_concurrent: usize,
}

/// TLS settings for every endpoint of a model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsSettings {
    /// PEM bundle of the private CA(s) to trust instead of the public roots.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain and key to present (mutual TLS).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// Where a model's tokens are counted.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizerSource {
    /// A GGUF file of the model (its vocabulary is read, not its weights).
    Gguf(PathBuf),
    /// A Hugging Face `tokenizer.json`.
    TokenizerJson(PathBuf),
    /// No tokenizer: the conservative estimate (`tokens::estimate`).
    Estimate,
}

/// One model served by upstream engines.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamModel {
    /// The name Warden serves it under (a request's `model`).
    pub name: String,
    /// The name the upstream knows it by (`model` in the upstream request).
    pub upstream_name: String,
    pub endpoints: Vec<EndpointConfig>,
    pub timeouts: Timeouts,
    pub breaker: BreakerSettings,
    /// Requests that may wait for a free endpoint before new ones get 503.
    pub queue_depth: usize,
    /// The context window; `None` asks the upstream's `/v1/models` at start.
    pub context_length: Option<usize>,
    pub tokenizer: TokenizerSource,
    pub tls: TlsSettings,
}

/// Everything upstream: chat models, the first the default. (Embeddings stay local: an
/// upstream embedding model is not supported yet, and a models file naming one is refused.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamConfig {
    pub chat: Vec<UpstreamModel>,
    /// The bearer token sent to every endpoint; never logged.
    pub api_key: Option<ApiKey>,
}

/// A secret that prints as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: &str) -> Option<ApiKey> {
        let key = key.trim();
        (!key.is_empty()).then(|| ApiKey(key.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The simple flags, as the CLI parsed them.
#[derive(Debug, Clone, Default)]
pub struct UpstreamFlags {
    pub chat_upstream: Option<String>,
    pub chat_upstream_model: Option<String>,
    pub api_key: Option<ApiKey>,
    pub models_config: Option<PathBuf>,
}

impl UpstreamConfig {
    /// The flags and the models file, validated; empty when neither names an upstream.
    pub fn from_flags(flags: &UpstreamFlags) -> Result<UpstreamConfig, UpstreamConfigError> {
        let mut config = match &flags.models_config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| UpstreamConfigError::Read {
                        path: path.clone(),
                        source,
                    })?;
                parse_models_file(path, &text)?
            }
            None => UpstreamConfig::default(),
        };
        if let Some(url) = &flags.chat_upstream {
            let name = flags.chat_upstream_model.as_deref().ok_or_else(|| {
                UpstreamConfigError::Flags(
                    "--chat-upstream needs --chat-upstream-model (the model's name on the upstream)"
                        .to_owned(),
                )
            })?;
            let model = simple_model(url, name)?;
            config.chat.retain(|m| m.name != model.name);
            config.chat.insert(0, model);
        } else if flags.chat_upstream_model.is_some() {
            return Err(UpstreamConfigError::Flags(
                "--chat-upstream-model needs --chat-upstream".to_owned(),
            ));
        }
        config.api_key = flags.api_key.clone();
        Ok(config)
    }

    /// `(model, url)` of every configured endpoint, for the start-up log.
    pub fn endpoints(&self) -> Vec<(String, String)> {
        self.chat
            .iter()
            .flat_map(|m| m.endpoints.iter().map(|e| (m.name.clone(), e.url.clone())))
            .collect()
    }
}

fn simple_model(url: &str, name: &str) -> Result<UpstreamModel, UpstreamConfigError> {
    let url = check_url(url).map_err(UpstreamConfigError::Flags)?;
    let name = check_name(name).map_err(UpstreamConfigError::Flags)?;
    Ok(UpstreamModel {
        name: name.clone(),
        upstream_name: name,
        endpoints: vec![EndpointConfig {
            url,
            priority: 0,
            weight: 1,
            max_concurrent: DEFAULT_MAX_CONCURRENT,
        }],
        timeouts: Timeouts::DEFAULT,
        breaker: BreakerSettings::DEFAULT,
        queue_depth: DEFAULT_QUEUE_DEPTH,
        context_length: None,
        tokenizer: TokenizerSource::Estimate,
        tls: TlsSettings::default(),
    })
}

/// Requests one endpoint works on at once unless the models file says otherwise.
pub const DEFAULT_MAX_CONCURRENT: usize = 8;
/// Requests waiting for a free endpoint unless the models file says otherwise.
pub const DEFAULT_QUEUE_DEPTH: usize = 32;
/// The most endpoints, waiting requests and concurrent requests the file may ask for.
const MAX_ENDPOINTS: usize = 16;
const MAX_QUEUE_DEPTH: usize = 4096;
const MAX_CONCURRENT: usize = 256;

/// A base URL: `http://` or `https://`, a host, a path ending in `/v1`, no credentials,
/// query or fragment. Returned without a trailing slash.
pub fn check_url(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("upstream URL `{url}` must start with http:// or https://"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(format!(
            "upstream URL `{url}` needs a host and no user or password (use the API key file)"
        ));
    }
    if url.contains(['?', '#', ' ']) || url.chars().any(char::is_control) {
        return Err(format!(
            "upstream URL `{url}` must not hold a query or fragment"
        ));
    }
    if !url.ends_with("/v1") {
        return Err(format!(
            "upstream URL `{url}` must be the OpenAI-compatible base URL ending in /v1"
        ));
    }
    Ok(url.to_owned())
}

fn check_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    let fine = |c: char| c.is_ascii_alphanumeric() || "-_.:/@".contains(c);
    if name.is_empty() || name.len() > 200 || !name.chars().all(fine) {
        return Err(format!(
            "model name `{name}` must be 1-200 characters of letters, digits and - _ . : / @"
        ));
    }
    Ok(name.to_owned())
}

// The models file, as written.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsFile {
    #[serde(default)]
    chat: Vec<ModelEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    name: String,
    /// The upstream's name for it (default: `name`).
    upstream_model: Option<String>,
    endpoints: Vec<EndpointEntry>,
    context_length: Option<usize>,
    queue_depth: Option<usize>,
    connect_timeout_seconds: Option<f64>,
    first_token_timeout_seconds: Option<f64>,
    idle_timeout_seconds: Option<f64>,
    total_timeout_seconds: Option<f64>,
    breaker_failures: Option<u32>,
    breaker_open_seconds: Option<f64>,
    tokenizer: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointEntry {
    url: String,
    #[serde(default)]
    priority: u32,
    #[serde(default = "one")]
    weight: u32,
    max_concurrent: Option<usize>,
}

fn one() -> u32 {
    1
}

/// Parses a models file; relative paths in it are taken from the file's folder.
pub fn parse_models_file(path: &Path, text: &str) -> Result<UpstreamConfig, UpstreamConfigError> {
    let invalid = |message: String| UpstreamConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    let file: ModelsFile = toml::from_str(text).map_err(|err| invalid(err.to_string()))?;
    let folder = path.parent().unwrap_or(Path::new("."));
    let mut chat = Vec::new();
    for entry in file.chat {
        let model = model_from_entry(entry, folder).map_err(invalid)?;
        if chat.iter().any(|m: &UpstreamModel| m.name == model.name) {
            return Err(invalid(format!(
                "two chat models are named `{}`",
                model.name
            )));
        }
        chat.push(model);
    }
    Ok(UpstreamConfig {
        chat,
        api_key: None,
    })
}

fn model_from_entry(entry: ModelEntry, folder: &Path) -> Result<UpstreamModel, String> {
    let name = check_name(&entry.name)?;
    let at = |message: String| format!("model `{name}`: {message}");
    if entry.endpoints.is_empty() || entry.endpoints.len() > MAX_ENDPOINTS {
        return Err(at(format!("needs 1 to {MAX_ENDPOINTS} endpoints")));
    }
    let mut endpoints = Vec::new();
    for endpoint in entry.endpoints {
        let max_concurrent = endpoint.max_concurrent.unwrap_or(DEFAULT_MAX_CONCURRENT);
        if max_concurrent == 0 || max_concurrent > MAX_CONCURRENT || endpoint.weight == 0 {
            return Err(at(format!(
                "max_concurrent must be 1..={MAX_CONCURRENT} and weight ≥ 1"
            )));
        }
        endpoints.push(EndpointConfig {
            url: check_url(&endpoint.url).map_err(at)?,
            priority: endpoint.priority,
            weight: endpoint.weight,
            max_concurrent,
        });
    }
    let seconds = |value: Option<f64>, default: Duration, what: &str| match value {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Some(_) => Err(at(format!("{what} must be between 0 and 86400 seconds"))),
    };
    let defaults = Timeouts::DEFAULT;
    let timeouts = Timeouts {
        connect: seconds(
            entry.connect_timeout_seconds,
            defaults.connect,
            "connect_timeout_seconds",
        )?,
        first_token: seconds(
            entry.first_token_timeout_seconds,
            defaults.first_token,
            "first_token_timeout_seconds",
        )?,
        idle: seconds(
            entry.idle_timeout_seconds,
            defaults.idle,
            "idle_timeout_seconds",
        )?,
        total: seconds(
            entry.total_timeout_seconds,
            defaults.total,
            "total_timeout_seconds",
        )?,
    };
    let breaker = BreakerSettings {
        failures_to_open: entry
            .breaker_failures
            .unwrap_or(BreakerSettings::DEFAULT.failures_to_open)
            .max(1),
        open_for: seconds(
            entry.breaker_open_seconds,
            BreakerSettings::DEFAULT.open_for,
            "breaker_open_seconds",
        )?,
    };
    let queue_depth = entry.queue_depth.unwrap_or(DEFAULT_QUEUE_DEPTH);
    if queue_depth == 0 || queue_depth > MAX_QUEUE_DEPTH {
        return Err(at(format!("queue_depth must be 1..={MAX_QUEUE_DEPTH}")));
    }
    if entry.context_length.is_some_and(|n| n < 256) {
        return Err(at("context_length must be at least 256".to_owned()));
    }
    let file = |path: Option<PathBuf>| path.map(|p| folder.join(p));
    let tokenizer = match file(entry.tokenizer) {
        None => TokenizerSource::Estimate,
        Some(path)
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf")) =>
        {
            TokenizerSource::Gguf(path)
        }
        Some(path) => TokenizerSource::TokenizerJson(path),
    };
    let tls = TlsSettings {
        ca_file: file(entry.ca_file),
        client_cert: file(entry.client_cert),
        client_key: file(entry.client_key),
    };
    if tls.client_cert.is_some() != tls.client_key.is_some() {
        return Err(at("client_cert and client_key go together".to_owned()));
    }
    Ok(UpstreamModel {
        upstream_name: match entry.upstream_model {
            Some(upstream) => check_name(&upstream).map_err(at)?,
            None => name.clone(),
        },
        name,
        endpoints,
        timeouts,
        breaker,
        queue_depth,
        context_length: entry.context_length,
        tokenizer,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_must_be_plain_v1_urls() {
        assert_eq!(
            check_url("http://gpu1:8000/v1/").unwrap(),
            "http://gpu1:8000/v1"
        );
        assert!(check_url("https://llm.corp.internal/openai/v1").is_ok());
        for bad in [
            "gpu1:8000/v1",
            "ftp://gpu1/v1",
            "http://user:pw@gpu1/v1",
            "http://gpu1:8000",
            "http://gpu1/v1?key=x",
            "http:///v1",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_simple_flags_make_one_default_model() {
        let flags = UpstreamFlags {
            chat_upstream: Some("http://10.0.0.5:8000/v1".into()),
            chat_upstream_model: Some("Qwen/Qwen2.5-72B-Instruct".into()),
            api_key: ApiKey::new(" sk-local "),
            ..UpstreamFlags::default()
        };
        let config = UpstreamConfig::from_flags(&flags).unwrap();
        assert_eq!(config.chat.len(), 1);
        assert_eq!(config.chat[0].name, "Qwen/Qwen2.5-72B-Instruct");
        assert_eq!(config.chat[0].endpoints[0].url, "http://10.0.0.5:8000/v1");
        assert_eq!(format!("{config:?}").matches("sk-local").count(), 0);
        assert_eq!(
            config.api_key.as_ref().map(ApiKey::expose),
            Some("sk-local")
        );
        let missing = UpstreamFlags {
            chat_upstream: Some("http://10.0.0.5:8000/v1".into()),
            ..UpstreamFlags::default()
        };
        assert!(UpstreamConfig::from_flags(&missing).is_err());
    }

    #[test]
    fn a_models_file_names_endpoints_timeouts_and_tls() {
        let text = r#"
            [[chat]]
            name = "big"
            upstream_model = "meta-llama/Llama-3.3-70B-Instruct"
            context_length = 32768
            first_token_timeout_seconds = 20
            tokenizer = "tok/tokenizer.json"
            ca_file = "ca.pem"
            [[chat.endpoints]]
            url = "https://gpu1.corp/v1"
            priority = 0
            max_concurrent = 4
            [[chat.endpoints]]
            url = "https://gpu2.corp/v1"
            priority = 1
        "#;
        let config = parse_models_file(Path::new("/etc/warden/models.toml"), text).unwrap();
        let big = &config.chat[0];
        assert_eq!(big.upstream_name, "meta-llama/Llama-3.3-70B-Instruct");
        assert_eq!(big.endpoints.len(), 2);
        assert_eq!(big.endpoints[0].max_concurrent, 4);
        assert_eq!(big.endpoints[1].max_concurrent, DEFAULT_MAX_CONCURRENT);
        assert_eq!(big.timeouts.first_token, Duration::from_secs(20));
        assert_eq!(big.timeouts.idle, Timeouts::DEFAULT.idle);
        assert_eq!(
            big.tokenizer,
            TokenizerSource::TokenizerJson(PathBuf::from("/etc/warden/tok/tokenizer.json"))
        );
        assert_eq!(big.tls.ca_file, Some(PathBuf::from("/etc/warden/ca.pem")));

        for bad in [
            // Embeddings through an upstream are not supported yet: refused, not ignored.
            "[embed]\nname = \"bge-m3\"\n[[embed.endpoints]]\nurl = \"http://e/v1\"\n",
            "[[chat]]\nname = \"x\"\nendpoints = []\n",
            "[[chat]]\nname = \"x\"\nsurprise = 1\n[[chat.endpoints]]\nurl = \"http://a/v1\"\n",
            "[[chat]]\nname = \"x\"\nclient_cert = \"c.pem\"\n[[chat.endpoints]]\nurl = \"http://a/v1\"\n",
            "[[chat]]\nname = \"x\"\nidle_timeout_seconds = -1\n[[chat.endpoints]]\nurl = \"http://a/v1\"\n",
        ] {
            assert!(parse_models_file(Path::new("m.toml"), bad).is_err(), "{bad}");
        }
    }
}
