//! The Prometheus metrics every layer reports to, and their text exposition (format 0.0.4)
//! for `GET /metrics`. Events are counted where they happen (requests, generations, runs,
//! syncs, logins); state that the store or the engine already holds (runs by status,
//! documents and chunks per knowledge base, model queue depth) is read when scraped through
//! `Snapshot`, so it can never drift from the truth. Labels are closed sets or names an
//! administrator chose (models, knowledge bases): never user-typed text.

use std::time::Duration;

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// How a login attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginOutcome {
    Succeeded,
    /// Wrong name or password.
    Failed,
    /// Refused by the rate limiter before any check.
    Limited,
    /// Refused because too many password checks were running.
    Busy,
}

impl LoginOutcome {
    fn as_str(self) -> &'static str {
        match self {
            LoginOutcome::Succeeded => "success",
            LoginOutcome::Failed => "failure",
            LoginOutcome::Limited => "limited",
            LoginOutcome::Busy => "busy",
        }
    }
}

/// What one finished generation reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerationReport {
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// From the request reaching the model's queue to its first streamed text.
    pub time_to_first_token: Option<Duration>,
    /// Generated tokens per second of decoding, when any were decoded.
    pub decode_tokens_per_sec: Option<f64>,
}

/// State read at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// `(kind, status, count)` for every kind and status that has runs.
    pub runs: Vec<(String, String, u64)>,
    /// `(knowledge base, documents, chunks)`.
    pub knowledge_bases: Vec<(String, u64, u64)>,
    /// `(model, queued requests)`.
    pub model_queues: Vec<(String, u64)>,
    /// `(quota, per-user limit)`, 0 for none.
    pub owner_limits: Vec<(String, u64)>,
    /// `(measure, the most any one user holds now)`: running runs, queued runs, diagnostics.
    pub busiest_user: Vec<(String, u64)>,
}

pub struct Metrics {
    registry: Registry,
    http_requests: Family<Labels, Counter>,
    http_duration: Histograms,
    model_queue_depth: Family<Labels, Gauge>,
    model_in_flight: Family<Labels, Gauge>,
    prompt_tokens: Family<Labels, Counter>,
    generated_tokens: Family<Labels, Counter>,
    time_to_first_token: Histograms,
    upstream_requests: Family<Labels, Counter>,
    upstream_errors: Family<Labels, Counter>,
    upstream_duration: Histograms,
    upstream_first_token: Histograms,
    decode_rate: Histograms,
    runs: Family<Labels, Gauge>,
    run_duration: Histograms,
    runs_resumed: Counter,
    sse_connections: Gauge,
    http_connections: Gauge,
    http_connections_refused: Counter,
    kb_documents: Family<Labels, Gauge>,
    kb_chunks: Family<Labels, Gauge>,
    kb_sync_duration: Histograms,
    kb_sync_failures: Family<Labels, Counter>,
    logins: Family<Labels, Counter>,
    refusals: Family<Labels, Counter>,
    quota_limits: Family<Labels, Gauge>,
    busiest_user: Family<Labels, Gauge>,
    /// One render at a time: a render refills the snapshot families.
    rendering: std::sync::Mutex<()>,
}

fn seconds_buckets() -> Histogram {
    // 5 ms … ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

fn long_seconds_buckets() -> Histogram {
    // 0.1 s … ~55 min.
    Histogram::new(exponential_buckets(0.1, 2.0, 16))
}

fn rate_buckets() -> Histogram {
    // 1 … 2,048 tokens per second.
    Histogram::new(exponential_buckets(1.0, 2.0, 12))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warden");
        let metrics = Self {
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(seconds_buckets),
            model_queue_depth: Family::default(),
            model_in_flight: Family::default(),
            prompt_tokens: Family::default(),
            generated_tokens: Family::default(),
            time_to_first_token: Family::new_with_constructor(seconds_buckets),
            upstream_requests: Family::default(),
            upstream_errors: Family::default(),
            upstream_duration: Family::new_with_constructor(seconds_buckets),
            upstream_first_token: Family::new_with_constructor(seconds_buckets),
            decode_rate: Family::new_with_constructor(rate_buckets),
            runs: Family::default(),
            run_duration: Family::new_with_constructor(long_seconds_buckets),
            runs_resumed: Counter::default(),
            sse_connections: Gauge::default(),
            http_connections: Gauge::default(),
            http_connections_refused: Counter::default(),
            kb_documents: Family::default(),
            kb_chunks: Family::default(),
            kb_sync_duration: Family::new_with_constructor(long_seconds_buckets),
            kb_sync_failures: Family::default(),
            logins: Family::default(),
            refusals: Family::default(),
            quota_limits: Family::default(),
            busiest_user: Family::default(),
            rendering: std::sync::Mutex::new(()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "http_requests",
            "HTTP requests answered, by route, method and status",
            metrics.http_requests.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "Time to the response head, by route and status",
            metrics.http_duration.clone(),
        );
        r.register(
            "model_queue_depth",
            "Requests waiting in a model's queue",
            metrics.model_queue_depth.clone(),
        );
        r.register(
            "model_requests_in_flight",
            "Requests a model is working on",
            metrics.model_in_flight.clone(),
        );
        r.register(
            "model_prompt_tokens",
            "Prompt tokens a chat model read",
            metrics.prompt_tokens.clone(),
        );
        r.register(
            "model_generated_tokens",
            "Tokens a chat model generated",
            metrics.generated_tokens.clone(),
        );
        r.register(
            "model_time_to_first_token_seconds",
            "From reaching a chat model's queue to its first streamed text",
            metrics.time_to_first_token.clone(),
        );
        r.register(
            "model_decode_tokens_per_second",
            "Decode rate of one generation",
            metrics.decode_rate.clone(),
        );
        r.register(
            "upstream_requests",
            "Requests upstream engines answered, by model, endpoint and outcome",
            metrics.upstream_requests.clone(),
        );
        r.register(
            "upstream_errors",
            "Failed upstream attempts, by model, endpoint and kind (connect, timeouts, status, bad_response, stream_cut)",
            metrics.upstream_errors.clone(),
        );
        r.register(
            "upstream_request_duration_seconds",
            "Whole upstream requests that answered, by model and endpoint",
            metrics.upstream_duration.clone(),
        );
        r.register(
            "upstream_time_to_first_token_seconds",
            "From sending an upstream request to its first token, by model and endpoint",
            metrics.upstream_first_token.clone(),
        );
        r.register(
            "runs",
            "Runs in the store, by kind and status",
            metrics.runs.clone(),
        );
        r.register(
            "run_duration_seconds",
            "From a run's claim to its end, by kind and final status",
            metrics.run_duration.clone(),
        );
        r.register(
            "runs_resumed",
            "Runs taken up again after an interrupted attempt",
            metrics.runs_resumed.clone(),
        );
        r.register(
            "sse_connections",
            "Open run event streams",
            metrics.sse_connections.clone(),
        );
        r.register(
            "http_connections",
            "Open TCP connections",
            metrics.http_connections.clone(),
        );
        r.register(
            "http_connections_refused",
            "Connections closed at once because the server and its health-check reserve were full",
            metrics.http_connections_refused.clone(),
        );
        r.register(
            "kb_documents",
            "Documents per knowledge base",
            metrics.kb_documents.clone(),
        );
        r.register(
            "kb_chunks",
            "Chunks per knowledge base",
            metrics.kb_chunks.clone(),
        );
        r.register(
            "kb_sync_duration_seconds",
            "Knowledge-base sync durations, by knowledge base and result",
            metrics.kb_sync_duration.clone(),
        );
        r.register(
            "kb_sync_failures",
            "Knowledge-base syncs that failed",
            metrics.kb_sync_failures.clone(),
        );
        r.register(
            "logins",
            "Login attempts by outcome",
            metrics.logins.clone(),
        );
        r.register(
            "refusals",
            "Requests refused for want of credentials, by audit action (their audit rows are aggregated)",
            metrics.refusals.clone(),
        );
        r.register(
            "quota_limit",
            "Per-user limits: queued and running runs, diagnostics in progress (0: none)",
            metrics.quota_limits.clone(),
        );
        r.register(
            "busiest_user",
            "The most any one user holds now, by measure (running_runs, queued_runs, active_diagnostics)",
            metrics.busiest_user.clone(),
        );
        let build_info: Family<Labels, Gauge> = Family::default();
        build_info
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
                ("commit", crate::build_info::COMMIT.to_owned()),
            ])
            .set(1);
        r.register("build_info", "Version and commit of this build", build_info);
        Self {
            registry,
            ..metrics
        }
    }

    /// One answered HTTP request. `route` is the matched route pattern (never the raw path).
    pub fn http_request(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        let labels = vec![
            ("route", route.to_owned()),
            ("method", method.to_owned()),
            ("status", status.to_string()),
        ];
        self.http_requests.get_or_create(&labels).inc();
        let labels = vec![("route", route.to_owned()), ("status", status.to_string())];
        self.http_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// A model started (`+1`) or finished (`-1`) working on a request.
    pub fn model_busy(&self, model: &str, change: i64) {
        self.model_in_flight
            .get_or_create(&model_labels(model))
            .inc_by(change);
    }

    /// One upstream request that answered.
    pub fn upstream_request(&self, model: &str, endpoint: &str, outcome: &str, elapsed: Duration) {
        let labels = vec![
            ("model", model.to_owned()),
            ("endpoint", endpoint.to_owned()),
        ];
        let mut counted = labels.clone();
        counted.push(("outcome", outcome.to_owned()));
        self.upstream_requests.get_or_create(&counted).inc();
        self.upstream_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// One failed upstream attempt.
    pub fn upstream_error(&self, model: &str, endpoint: &str, kind: &str) {
        let labels = vec![
            ("model", model.to_owned()),
            ("endpoint", endpoint.to_owned()),
            ("kind", kind.to_owned()),
        ];
        self.upstream_errors.get_or_create(&labels).inc();
    }

    /// An upstream request's time to its first token.
    pub fn upstream_time_to_first_token(&self, model: &str, endpoint: &str, elapsed: Duration) {
        let labels = vec![
            ("model", model.to_owned()),
            ("endpoint", endpoint.to_owned()),
        ];
        self.upstream_first_token
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// One finished generation of a chat model.
    pub fn generation(&self, model: &str, report: &GenerationReport) {
        let labels = model_labels(model);
        self.prompt_tokens
            .get_or_create(&labels)
            .inc_by(report.prompt_tokens);
        self.generated_tokens
            .get_or_create(&labels)
            .inc_by(report.generated_tokens);
        if let Some(ttft) = report.time_to_first_token {
            self.time_to_first_token
                .get_or_create(&labels)
                .observe(ttft.as_secs_f64());
        }
        if let Some(rate) = report.decode_tokens_per_sec.filter(|r| r.is_finite()) {
            self.decode_rate.get_or_create(&labels).observe(rate);
        }
    }

    /// A run ended with `status` after `elapsed` since its claim.
    pub fn run_finished(&self, kind: &str, status: &str, elapsed: Duration) {
        let labels = vec![("kind", kind.to_owned()), ("status", status.to_owned())];
        self.run_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// A run was taken up again after an interrupted attempt.
    pub fn run_resumed(&self) {
        self.runs_resumed.inc();
    }

    /// An event stream opened; the guard closes it when dropped.
    pub fn sse_connection(self: &std::sync::Arc<Self>) -> SseConnection {
        self.sse_connections.inc();
        SseConnection(self.clone())
    }

    /// A connection was accepted; the guard counts it closed when dropped.
    pub fn connection_opened(self: &std::sync::Arc<Self>) -> OpenConnection {
        self.http_connections.inc();
        OpenConnection(self.clone())
    }

    /// A connection was closed at once: no slot, not even in the health-check reserve.
    pub fn connection_refused(&self) {
        self.http_connections_refused.inc();
    }

    /// A knowledge-base sync ended (`result`: completed, cancelled or failed).
    pub fn kb_sync(&self, kb: &str, result: &str, elapsed: Duration) {
        let labels = vec![("kb", kb.to_owned()), ("result", result.to_owned())];
        self.kb_sync_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if result == "failed" {
            self.kb_sync_failures
                .get_or_create(&vec![("kb", kb.to_owned())])
                .inc();
        }
    }

    pub fn login(&self, outcome: LoginOutcome) {
        self.logins
            .get_or_create(&vec![("outcome", outcome.as_str().to_owned())])
            .inc();
    }

    /// A request refused for want of credentials (`action`: its audit action).
    pub fn refusal(&self, action: &str) {
        self.refusals
            .get_or_create(&vec![("action", action.to_owned())])
            .inc();
    }

    /// The exposition text, with `snapshot`'s state as of now.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let _one_at_a_time = self
            .rendering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.runs.clear();
        for (kind, status, count) in &snapshot.runs {
            let labels = vec![("kind", kind.clone()), ("status", status.clone())];
            self.runs.get_or_create(&labels).set(to_i64(*count));
        }
        self.kb_documents.clear();
        self.kb_chunks.clear();
        for (kb, documents, chunks) in &snapshot.knowledge_bases {
            let labels = vec![("kb", kb.clone())];
            self.kb_documents
                .get_or_create(&labels)
                .set(to_i64(*documents));
            self.kb_chunks.get_or_create(&labels).set(to_i64(*chunks));
        }
        for (quota, limit) in &snapshot.owner_limits {
            self.quota_limits
                .get_or_create(&vec![("quota", quota.clone())])
                .set(to_i64(*limit));
        }
        for (measure, most) in &snapshot.busiest_user {
            self.busiest_user
                .get_or_create(&vec![("measure", measure.clone())])
                .set(to_i64(*most));
        }
        for (model, queued) in &snapshot.model_queues {
            self.model_queue_depth
                .get_or_create(&model_labels(model))
                .set(to_i64(*queued));
        }
        let mut text = String::new();
        if let Err(err) = prometheus_text::encode(&mut text, &self.registry) {
            tracing::error!("cannot encode the metrics: {err}");
        }
        text
    }
}

/// An open event stream; dropping it closes it in the gauge.
pub struct SseConnection(std::sync::Arc<Metrics>);

impl Drop for SseConnection {
    fn drop(&mut self) {
        self.0.sse_connections.dec();
    }
}

/// An open TCP connection; dropping it closes it in the gauge.
pub struct OpenConnection(std::sync::Arc<Metrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.http_connections.dec();
    }
}

fn model_labels(model: &str) -> Labels {
    vec![("model", model.to_owned())]
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_snapshots_appear_in_the_exposition() {
        let metrics = std::sync::Arc::new(Metrics::new());
        metrics.http_request("/api/runs/{id}", "GET", 200, Duration::from_millis(12));
        metrics.generation(
            "smollm2",
            &GenerationReport {
                prompt_tokens: 40,
                generated_tokens: 8,
                time_to_first_token: Some(Duration::from_millis(300)),
                decode_tokens_per_sec: Some(30.0),
            },
        );
        metrics.login(LoginOutcome::Failed);
        metrics.refusal("alert.receive");
        let stream = metrics.sse_connection();
        let _connection = metrics.connection_opened();
        metrics.connection_refused();
        let snapshot = Snapshot {
            runs: vec![("chat".into(), "completed".into(), 3)],
            knowledge_bases: vec![("sample".into(), 5, 40)],
            model_queues: vec![("smollm2".into(), 2)],
            owner_limits: vec![("active_diagnostics_per_user".into(), 2)],
            busiest_user: vec![("running_runs".into(), 1)],
        };
        let text = metrics.render(&snapshot);
        for expected in [
            "warden_http_requests_total{route=\"/api/runs/{id}\",method=\"GET\",status=\"200\"} 1",
            "warden_model_prompt_tokens_total{model=\"smollm2\"} 40",
            "warden_model_generated_tokens_total{model=\"smollm2\"} 8",
            "warden_model_time_to_first_token_seconds_count{model=\"smollm2\"} 1",
            "warden_logins_total{outcome=\"failure\"} 1",
            "warden_refusals_total{action=\"alert.receive\"} 1",
            "warden_sse_connections 1",
            "warden_http_connections 1",
            "warden_http_connections_refused_total 1",
            "warden_runs{kind=\"chat\",status=\"completed\"} 3",
            "warden_kb_chunks{kb=\"sample\"} 40",
            "warden_model_queue_depth{model=\"smollm2\"} 2",
            "warden_quota_limit{quota=\"active_diagnostics_per_user\"} 2",
            "warden_busiest_user{measure=\"running_runs\"} 1",
            "warden_build_info{version=",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        drop(stream);
        // A run status that no longer has runs disappears.
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains("warden_sse_connections 0"), "{text}");
        assert!(!text.contains("status=\"completed\"} 3"), "{text}");
    }
}
