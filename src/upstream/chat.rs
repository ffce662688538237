//! A chat model served by upstream engines. Jobs wait in one bounded queue per model (full:
//! `QueueFull`, which the HTTP layer answers 503 with `Retry-After`); dispatcher threads take
//! them, pick an endpoint with a free slot and a circuit that lets requests through (lowest
//! priority number first, weighted among equals), and stream the answer into the job's
//! event channel like a local model does.
//!
//! Each attempt reads the upstream on a pump thread of its own, so the dispatcher can time
//! every stage (first token, idle gap, total) and notice cancellation while a read blocks;
//! a cancelled or timed-out attempt tells its pump to stop, and the pump closes the
//! connection at its next read (at once while tokens flow). Before the first token a failed
//! attempt moves to the next endpoint; after it nothing is retried, the generation fails
//! with the reason. Structured output (a JSON schema) is buffered, checked in code, and
//! asked for once more if the upstream ignored the schema; a second miss fails closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::config::UpstreamModel;
use super::endpoint::{Endpoint, EndpointHealth, Slot};
use super::error::{ErrorKind, UpstreamError};
use super::sse::{SseError, SseLine, SseReader};
use super::tokens::TokenCounter;
use super::wire::{self, Piece, ToolCallAssembly};
use crate::engine::{
    ChatMessage, ChatRequest, EngineError, FinishReason, GenerationEvent, GenerationSummary,
    RemoteChat, RemoteJob, ResponseFormat, Role,
};
use crate::metrics::{GenerationReport, Metrics};

/// How often a waiting dispatcher looks at cancellation and free slots.
const POLL: Duration = Duration::from_millis(50);
/// Pieces a pump may read ahead of its dispatcher.
const PUMP_BUFFER: usize = 256;
/// The most of an error body read for its message.
const ERROR_BODY_BYTES: u64 = 4096;

/// One upstream chat model.
pub struct UpstreamChat {
    shared: Arc<Shared>,
    queue: flume::Sender<RemoteJob>,
}

struct Shared {
    name: String,
    upstream_name: String,
    timeouts: super::config::Timeouts,
    endpoints: Vec<Arc<Endpoint>>,
    tokens: TokenCounter,
    api_key: Option<super::config::ApiKey>,
    metrics: Arc<Metrics>,
    context_length: usize,
    /// Moves with every job: spreads equal-priority endpoints' load by weight.
    turns: std::sync::atomic::AtomicU64,
}

impl UpstreamChat {
    /// Starts the model's dispatchers. `context_length` is already resolved.
    pub fn start(
        model: &UpstreamModel,
        endpoints: Vec<Arc<Endpoint>>,
        tokens: TokenCounter,
        api_key: Option<super::config::ApiKey>,
        context_length: usize,
        metrics: Arc<Metrics>,
    ) -> Result<UpstreamChat, String> {
        let dispatchers: usize = endpoints.iter().map(|e| e.config.max_concurrent).sum();
        let (queue, jobs) = flume::bounded::<RemoteJob>(model.queue_depth);
        let shared = Arc::new(Shared {
            name: model.name.clone(),
            upstream_name: model.upstream_name.clone(),
            timeouts: model.timeouts,
            endpoints,
            tokens,
            api_key,
            metrics,
            context_length,
            turns: std::sync::atomic::AtomicU64::new(0),
        });
        for n in 0..dispatchers.max(1) {
            let (shared, jobs) = (shared.clone(), jobs.clone());
            std::thread::Builder::new()
                .name(format!("upstream-{n}"))
                .spawn(move || {
                    while let Ok(job) = jobs.recv() {
                        shared.run(job);
                    }
                })
                .map_err(|err| format!("cannot start an upstream thread: {err}"))?;
        }
        Ok(UpstreamChat { shared, queue })
    }

    pub fn health(&self) -> Vec<EndpointHealth> {
        let now = Instant::now();
        self.shared
            .endpoints
            .iter()
            .map(|e| e.health(now))
            .collect()
    }
}

impl RemoteChat for UpstreamChat {
    fn submit(&self, job: RemoteJob) -> Result<(), EngineError> {
        self.queue.try_send(job).map_err(|err| match err {
            flume::TrySendError::Full(_) => EngineError::QueueFull(self.shared.name.clone()),
            flume::TrySendError::Disconnected(_) => {
                EngineError::WorkerGone(self.shared.name.clone())
            }
        })
    }

    fn queued(&self) -> u64 {
        self.queue.len() as u64
    }

    fn count_tokens(&self, text: &str) -> usize {
        self.shared.tokens.count(text)
    }

    fn context_length(&self) -> usize {
        self.shared.context_length
    }

    fn endpoint_health(&self) -> Vec<EndpointHealth> {
        self.health()
    }
}

/// How an attempt ended.
enum Attempt {
    Done(GenerationSummary, String),
    /// Failed before anything reached the caller: another endpoint may be tried.
    FailedEarly(UpstreamError),
    /// Failed after text reached the caller (or for a reason never retried).
    Failed(UpstreamError),
    Cancelled,
}

/// What a pump sends its dispatcher.
enum Pumped {
    Pieces(Vec<Piece>),
    Failed(ErrorKind, String),
    /// The stream ended; whether it said `[DONE]`.
    End {
        done: bool,
    },
}

impl Shared {
    fn run(&self, job: RemoteJob) {
        if job.cancel.load(Ordering::Relaxed) {
            return;
        }
        self.metrics.model_busy(&self.name, 1);
        let outcome = self.generate(&job);
        self.metrics.model_busy(&self.name, -1);
        match outcome {
            Ok(summary) => {
                let _ = job.events.send(Ok(GenerationEvent::Done(summary)));
            }
            Err(err) => {
                let _ = job.events.send(Err(err));
            }
        }
    }

    fn generate(&self, job: &RemoteJob) -> Result<GenerationSummary, EngineError> {
        let structured = !matches!(job.request.response_format, ResponseFormat::Text);
        let deadline = job.submitted + self.timeouts.total;
        let (summary, text) = self.with_failover(job, &job.request, structured, deadline)?;
        if !structured || summary.finish_reason == FinishReason::Cancelled {
            return Ok(summary);
        }
        let checked = match check_structured(&job.request.response_format, &text) {
            Ok(()) => Ok((summary, text)),
            Err(problem) => {
                tracing::warn!(model = %self.name, "upstream output broke its schema ({problem}); asking once more");
                let repair = repair_request(&job.request, &text, &problem);
                let (summary, text) = self.with_failover(job, &repair, true, deadline)?;
                check_structured(&job.request.response_format, &text)
                    .map(|()| (summary, text))
                    .map_err(|problem| EngineError::Upstream {
                        model: self.name.clone(),
                        message: format!("the output broke its JSON schema twice: {problem}"),
                    })
            }
        };
        let (summary, text) = checked?;
        if !text.is_empty() {
            let _ = job.events.send(Ok(GenerationEvent::Delta(text)));
        }
        Ok(summary)
    }

    /// Tries endpoints in order until one answers, while nothing has reached the caller.
    fn with_failover(
        &self,
        job: &RemoteJob,
        request: &ChatRequest,
        buffered: bool,
        deadline: Instant,
    ) -> Result<(GenerationSummary, String), EngineError> {
        let mut tried: Vec<usize> = Vec::new();
        let mut last: Option<UpstreamError> = None;
        loop {
            let Some((index, slot)) = self.wait_for_slot(job, &tried, deadline)? else {
                return Err(match last {
                    Some(err) => self.failure(err),
                    None => EngineError::UpstreamUnavailable(self.name.clone()),
                });
            };
            tried.push(index);
            let endpoint = slot.endpoint().clone();
            let started = Instant::now();
            let outcome = self.attempt(job, request, slot, buffered, deadline);
            let now = Instant::now();
            match outcome {
                Attempt::Done(summary, text) => {
                    endpoint.succeeded();
                    self.record(&endpoint, "ok", started, &summary);
                    return Ok((summary, text));
                }
                Attempt::Cancelled => {
                    endpoint.probe_abandoned(now);
                    return Ok((cancelled_summary(), String::new()));
                }
                Attempt::FailedEarly(err) | Attempt::Failed(err)
                    if !err.kind.counts_against_endpoint() =>
                {
                    self.error_metric(&endpoint, err.kind);
                    endpoint.probe_abandoned(now);
                    if !err.kind.retryable() {
                        return Err(self.failure(err));
                    }
                    last = Some(err);
                }
                Attempt::FailedEarly(err) => {
                    self.error_metric(&endpoint, err.kind);
                    endpoint.failed(err.kind, now);
                    tracing::warn!(model = %self.name, endpoint = %err.endpoint, kind = err.kind.as_str(), "upstream attempt failed: {}", err.message);
                    last = Some(err);
                }
                Attempt::Failed(err) => {
                    self.error_metric(&endpoint, err.kind);
                    endpoint.failed(err.kind, now);
                    tracing::warn!(model = %self.name, endpoint = %err.endpoint, kind = err.kind.as_str(), "upstream stream failed after its first token: {}", err.message);
                    return Err(self.failure(err));
                }
            }
        }
    }

    /// The error the caller (and so, possibly, a user) sees: the kind and the detail, with
    /// the endpoint's address left out (it is in the log).
    fn failure(&self, err: UpstreamError) -> EngineError {
        let detail = err.message.replace(&err.endpoint, "upstream");
        EngineError::Upstream {
            model: self.name.clone(),
            message: format!("{} ({})", err.kind.as_str(), short(&detail)),
        }
    }

    /// A slot on the best endpoint not yet tried; `None` when every endpoint was tried or
    /// has an open circuit. Waits (bounded by the first-token timeout) while slots are busy.
    fn wait_for_slot(
        &self,
        job: &RemoteJob,
        tried: &[usize],
        deadline: Instant,
    ) -> Result<Option<(usize, Slot)>, EngineError> {
        let give_up = (Instant::now() + self.timeouts.first_token).min(deadline);
        let turn = self.turns.fetch_add(1, Ordering::Relaxed);
        loop {
            if job.cancel.load(Ordering::Relaxed) {
                // Nobody reads the answer any more; no endpoint was asked.
                return Ok(None);
            }
            let now = Instant::now();
            let mut candidates: Vec<usize> = (0..self.endpoints.len())
                .filter(|i| !tried.contains(i))
                .collect();
            if candidates.is_empty() {
                return Ok(None);
            }
            order_candidates(&self.endpoints, &mut candidates, turn);
            for &i in &candidates {
                if let Some(slot) = self.endpoints[i].try_slot(now) {
                    return Ok(Some((i, slot)));
                }
            }
            let all_open = candidates.iter().all(|&i| {
                self.endpoints[i].circuit_state(now) == super::endpoint::CircuitState::Open
            });
            if all_open {
                return Ok(None);
            }
            if now >= give_up {
                return Err(EngineError::QueueFull(self.name.clone()));
            }
            std::thread::sleep(POLL);
        }
    }

    fn attempt(
        &self,
        job: &RemoteJob,
        request: &ChatRequest,
        slot: Slot,
        buffered: bool,
        deadline: Instant,
    ) -> Attempt {
        let endpoint = slot.endpoint().config.url.clone();
        let fail = |kind: ErrorKind, message: String| UpstreamError {
            kind,
            endpoint: endpoint.clone(),
            message,
        };
        let body = wire::request_body(&self.upstream_name, request);
        let stop = Arc::new(AtomicBool::new(false));
        let (pumped, items) = flume::bounded::<Pumped>(PUMP_BUFFER);
        let api_key = self.api_key.clone();
        let pump_stop = stop.clone();
        let total = deadline.saturating_duration_since(Instant::now());
        let spawned = std::thread::Builder::new()
            .name("upstream-pump".into())
            .spawn(move || pump(slot, api_key, body, total, pump_stop, pumped));
        if let Err(err) = spawned {
            return Attempt::FailedEarly(fail(ErrorKind::Connect, err.to_string()));
        }
        let _stop_pump = StopOnDrop(stop);
        let started = Instant::now();
        let mut first_token: Option<Instant> = None;
        let mut last_piece = started;
        let mut text = String::new();
        let mut calls = ToolCallAssembly::default();
        let mut finish: Option<FinishReason> = None;
        let mut usage: Option<(usize, usize)> = None;
        loop {
            if job.cancel.load(Ordering::Relaxed) {
                return Attempt::Cancelled;
            }
            let now = Instant::now();
            let (limit, kind) = match first_token {
                None => (
                    started + self.timeouts.first_token,
                    ErrorKind::FirstTokenTimeout,
                ),
                Some(_) => (last_piece + self.timeouts.idle, ErrorKind::IdleTimeout),
            };
            let (limit, kind) = if deadline < limit {
                (deadline, ErrorKind::TotalTimeout)
            } else {
                (limit, kind)
            };
            if now >= limit {
                let err = fail(
                    kind,
                    format!("no answer within {:?}", limit - started.min(limit)),
                );
                return early_or_late(first_token.is_some() && !buffered, err);
            }
            let item = match items.recv_timeout(POLL.min(limit - now)) {
                Ok(item) => item,
                Err(flume::RecvTimeoutError::Timeout) => continue,
                Err(flume::RecvTimeoutError::Disconnected) => Pumped::End { done: false },
            };
            match item {
                Pumped::Pieces(pieces) => {
                    last_piece = Instant::now();
                    for piece in pieces {
                        match piece {
                            Piece::Text(piece) => {
                                first_token.get_or_insert(last_piece);
                                if buffered {
                                    text.push_str(&piece);
                                } else if job
                                    .events
                                    .send(Ok(GenerationEvent::Delta(piece)))
                                    .is_err()
                                {
                                    return Attempt::Cancelled;
                                }
                            }
                            Piece::ToolCall {
                                index,
                                id,
                                name,
                                arguments,
                            } => {
                                first_token.get_or_insert(last_piece);
                                if let Err(message) = calls.add(index, id, name, &arguments) {
                                    let err = fail(ErrorKind::BadResponse, message);
                                    return early_or_late(!buffered, err);
                                }
                            }
                            Piece::Finish(reason) => finish = Some(reason),
                            Piece::Usage {
                                prompt_tokens,
                                completion_tokens,
                            } => {
                                usage = Some((prompt_tokens, completion_tokens));
                            }
                            Piece::Error(message) => {
                                let err = fail(ErrorKind::BadResponse, message);
                                return early_or_late(first_token.is_some() && !buffered, err);
                            }
                        }
                    }
                }
                Pumped::Failed(kind, message) => {
                    return early_or_late(first_token.is_some() && !buffered, fail(kind, message));
                }
                Pumped::End { done } => {
                    if !done && finish.is_none() {
                        let err = fail(
                            ErrorKind::StreamCut,
                            "the stream ended before its last event".into(),
                        );
                        return early_or_late(first_token.is_some() && !buffered, err);
                    }
                    let tool_calls = calls.finish();
                    let finish_reason = match finish {
                        _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
                        Some(reason) => reason,
                        None => FinishReason::Stop,
                    };
                    let (prompt_tokens, completion_tokens) = usage.unwrap_or_else(|| {
                        let prompt: usize = request
                            .messages
                            .iter()
                            .map(|m| self.tokens.count(&m.content))
                            .sum();
                        (prompt, self.tokens.count(&text))
                    });
                    let prefill = first_token.unwrap_or(last_piece) - started;
                    let summary = GenerationSummary {
                        prompt_tokens,
                        cached_prompt_tokens: 0,
                        completion_tokens,
                        finish_reason,
                        tool_calls,
                        prefill_ms: prefill.as_secs_f64() * 1000.0,
                        decode_ms: (last_piece - started - prefill).as_secs_f64() * 1000.0,
                    };
                    return Attempt::Done(summary, text);
                }
            }
        }
    }

    fn record(
        &self,
        endpoint: &Endpoint,
        outcome: &str,
        started: Instant,
        summary: &GenerationSummary,
    ) {
        let elapsed = started.elapsed();
        self.metrics
            .upstream_request(&self.name, &endpoint.config.url, outcome, elapsed);
        let decode = summary.decode_ms / 1000.0;
        self.metrics.generation(
            &self.name,
            &GenerationReport {
                prompt_tokens: summary.prompt_tokens as u64,
                generated_tokens: summary.completion_tokens as u64,
                time_to_first_token: Some(Duration::from_secs_f64(summary.prefill_ms / 1000.0)),
                decode_tokens_per_sec: (decode > 0.0 && summary.completion_tokens > 1)
                    .then(|| summary.completion_tokens as f64 / decode),
            },
        );
        self.metrics.upstream_time_to_first_token(
            &self.name,
            &endpoint.config.url,
            Duration::from_secs_f64(summary.prefill_ms / 1000.0),
        );
    }

    fn error_metric(&self, endpoint: &Endpoint, kind: ErrorKind) {
        self.metrics
            .upstream_error(&self.name, &endpoint.config.url, kind.as_str());
    }
}

fn early_or_late(reached_caller: bool, err: UpstreamError) -> Attempt {
    if reached_caller {
        Attempt::Failed(err)
    } else {
        Attempt::FailedEarly(err)
    }
}

fn cancelled_summary() -> GenerationSummary {
    GenerationSummary {
        prompt_tokens: 0,
        cached_prompt_tokens: 0,
        completion_tokens: 0,
        finish_reason: FinishReason::Cancelled,
        tool_calls: Vec::new(),
        prefill_ms: 0.0,
        decode_ms: 0.0,
    }
}

/// Lowest priority number first; among endpoints of equal priority, the one whose share of
/// this job's `turn` (a counter that moves with every job) is largest, so that over many
/// jobs each gets a share of the load in proportion to its weight.
fn order_candidates(endpoints: &[Arc<Endpoint>], candidates: &mut [usize], turn: u64) {
    candidates.sort_by_key(|&i| {
        let config = &endpoints[i].config;
        // A different pseudo-random draw per endpoint and turn (SplitMix64).
        let mut x = turn.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let draw = (x ^ (x >> 31)) % 1024;
        (
            config.priority,
            u64::MAX - draw * u64::from(config.weight.max(1)),
            i,
        )
    });
}

/// Whether `text` is what `format` asked for, checked in code.
fn check_structured(format: &ResponseFormat, text: &str) -> Result<(), String> {
    let value: Value =
        serde_json::from_str(text.trim()).map_err(|err| format!("not JSON: {err}"))?;
    match format {
        ResponseFormat::Text => Ok(()),
        ResponseFormat::JsonObject => value
            .is_object()
            .then_some(())
            .ok_or_else(|| "not a JSON object".to_owned()),
        ResponseFormat::JsonSchema(schema) => crate::agent::tools::validate_json(&value, schema),
    }
}

/// The request asked once more, showing the upstream what it got wrong.
fn repair_request(request: &ChatRequest, bad: &str, problem: &str) -> ChatRequest {
    let mut repair = request.clone();
    let shown: String = bad.chars().take(2000).collect();
    repair
        .messages
        .push(ChatMessage::new(Role::Assistant, shown));
    repair.messages.push(ChatMessage::new(
        Role::User,
        format!(
            "That reply is not valid for the required JSON schema ({problem}). Reply again \
             with only the JSON value the schema describes."
        ),
    ));
    repair
}

fn short(message: &str) -> String {
    let mut text: String = message
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    if message.chars().count() > 200 {
        text.push('…');
    }
    text
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Sends the request and reads its stream into `out`, holding the endpoint's slot until the
/// connection is closed. Stops at the next read once `stop` is set.
fn pump(
    slot: Slot,
    api_key: Option<super::config::ApiKey>,
    body: Value,
    total: Duration,
    stop: Arc<AtomicBool>,
    out: flume::Sender<Pumped>,
) {
    let endpoint = slot.endpoint();
    let url = format!("{}/chat/completions", endpoint.config.url);
    let mut request = endpoint
        .agent
        .post(&url)
        .timeout(total.max(Duration::from_millis(1)))
        .set("Accept", "text/event-stream");
    if let Some(key) = &api_key {
        request = request.set("Authorization", &format!("Bearer {}", key.expose()));
    }
    let response = match request.send_json(body) {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let kind = match status {
                429 => ErrorKind::Overloaded,
                400..=499 => ErrorKind::Status4xx,
                _ => ErrorKind::Status5xx,
            };
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(
                &mut std::io::Read::take(response.into_reader(), ERROR_BODY_BYTES),
                &mut text,
            );
            let message = error_message(&text);
            let _ = out.send(Pumped::Failed(kind, format!("HTTP {status}: {message}")));
            return;
        }
        Err(ureq::Error::Transport(transport)) => {
            let kind = match transport.kind() {
                ureq::ErrorKind::Io if is_timeout(&transport) => ErrorKind::TotalTimeout,
                ureq::ErrorKind::Io | ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader => {
                    ErrorKind::BadResponse
                }
                _ => ErrorKind::Connect,
            };
            let _ = out.send(Pumped::Failed(kind, transport.to_string()));
            return;
        }
    };
    let content_type = response.content_type().to_ascii_lowercase();
    if !content_type.contains("event-stream") {
        let message = format!("answered `{content_type}`, not an event stream");
        let _ = out.send(Pumped::Failed(ErrorKind::BadResponse, message));
        return;
    }
    let mut reader = SseReader::new(response.into_reader());
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let item = match reader.next_data() {
            Ok(SseLine::End) => Pumped::End { done: false },
            Ok(SseLine::Data(data)) if data.trim() == "[DONE]" => Pumped::End { done: true },
            Ok(SseLine::Data(data)) => match wire::chunk_pieces(&data) {
                Ok(pieces) if pieces.is_empty() => continue,
                Ok(pieces) => Pumped::Pieces(pieces),
                Err(message) => Pumped::Failed(ErrorKind::BadResponse, message),
            },
            Err(SseError::LineTooLong) => Pumped::Failed(
                ErrorKind::BadResponse,
                "a stream line exceeded 1 MiB".to_owned(),
            ),
            Err(SseError::Io(err)) => {
                let kind = if matches!(
                    err.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) {
                    ErrorKind::IdleTimeout
                } else {
                    ErrorKind::StreamCut
                };
                Pumped::Failed(kind, err.to_string())
            }
        };
        let last = !matches!(item, Pumped::Pieces(_));
        if out.send(item).is_err() || last {
            return;
        }
    }
}

fn is_timeout(transport: &ureq::Transport) -> bool {
    let mut source = std::error::Error::source(transport);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            );
        }
        source = err.source();
    }
    false
}

/// The `error.message` of an OpenAI-style error body, else its first line.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error")
                .and_then(|e| e.get("message").or(Some(e)))
                .map(|m| {
                    m.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| m.to_string())
                })
        })
        .unwrap_or_else(|| body.lines().next().unwrap_or_default().to_owned())
}

#[cfg(test)]
mod tests;
