//! The streamed answer of `POST /v1/chat/completions`: server-sent events, each frame
//! `data: <json>\n\n`. Order: a role chunk, one chunk per text delta, one chunk per tool
//! call (each with its `index`, as OpenAI streams them), a chunk with `finish_reason`, a
//! usage chunk when asked for, then `data: [DONE]`.
//! An error mid-stream sends one `data: {"error":…}` frame and ends the stream.
//!
//! The response body owns the `GenerationStream`: when the client disconnects, hyper drops
//! the body, which drops the stream, which cancels the generation.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use serde::Serialize;

use super::chat_response::{finish_reason, CompletionHeader, Usage, WireToolCallOut};
use crate::engine::{EngineError, GenerationEvent, GenerationStream};
use crate::http::error::ApiError;

/// The last frame of a successful stream.
const DONE_FRAME: &[u8] = b"data: [DONE]\n\n";

/// How the stream should present a generation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamOptions {
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
}

/// One generation being turned into SSE frames.
pub(crate) struct ChatStream {
    events: GenerationStream,
    header: CompletionHeader,
    options: StreamOptions,
    pending: VecDeque<Bytes>,
    finished: bool,
}

impl ChatStream {
    /// `first` is the event the handler already read (to turn an early error into a
    /// proper status code before committing to a 200 stream).
    pub(crate) fn new(
        events: GenerationStream,
        header: CompletionHeader,
        options: StreamOptions,
        first: GenerationEvent,
    ) -> Self {
        let mut stream = ChatStream {
            events,
            header,
            options,
            pending: VecDeque::new(),
            finished: false,
        };
        let role = ChunkDelta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..ChunkDelta::default()
        };
        stream.push_chunk(role, None);
        stream.push_event(Some(Ok(first)));
        stream
    }

    /// The response body. Dropping it drops the `GenerationStream`.
    pub(crate) fn into_body(self) -> Body {
        let frames = futures_util::stream::unfold(self, |mut stream| async move {
            let frame = stream.next_frame().await?;
            Some((Ok::<Bytes, Infallible>(frame), stream))
        });
        Body::from_stream(frames)
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame);
            }
            if self.finished {
                return None;
            }
            let event = self.events.next().await;
            self.push_event(event);
        }
    }

    fn push_event(&mut self, event: Option<Result<GenerationEvent, EngineError>>) {
        match event {
            Some(Ok(GenerationEvent::Delta(text))) => {
                // The engine holds back the text of tool calls: every delta is content.
                if !text.is_empty() {
                    self.push_chunk(
                        ChunkDelta {
                            content: Some(text),
                            ..ChunkDelta::default()
                        },
                        None,
                    );
                }
            }
            Some(Ok(GenerationEvent::Done(summary))) => {
                let finish_reason = finish_reason(&summary);
                let usage = Usage::of(&summary);
                for call in summary.tool_calls.into_iter().enumerate() {
                    let delta = ChunkDelta {
                        tool_calls: vec![ChunkToolCall::from(call)],
                        ..ChunkDelta::default()
                    };
                    self.push_chunk(delta, None);
                }
                self.push_chunk(ChunkDelta::default(), Some(finish_reason));
                if self.options.include_usage {
                    self.push_usage(usage);
                }
                self.pending.push_back(Bytes::from_static(DONE_FRAME));
                self.finished = true;
            }
            Some(Err(err)) => self.push_error(ApiError::from(err)),
            // The worker dropped its sender without a `Done`: it died.
            None => self.push_error(ApiError::from(EngineError::WorkerGone(
                self.header.model.clone(),
            ))),
        }
    }

    fn push_chunk(&mut self, delta: ChunkDelta, finish_reason: Option<&'static str>) {
        let choice = ChunkChoice {
            index: 0,
            delta,
            finish_reason,
            logprobs: None,
        };
        let chunk = self.chunk(vec![choice], None);
        self.pending.push_back(sse_frame(&chunk));
    }

    fn push_usage(&mut self, usage: Usage) {
        let chunk = self.chunk(Vec::new(), Some(usage));
        self.pending.push_back(sse_frame(&chunk));
    }

    fn push_error(&mut self, err: ApiError) {
        let (_, body) = err.render();
        self.pending.push_back(sse_frame(&body));
        self.finished = true;
    }

    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> Chunk<'_> {
        let header = &self.header;
        Chunk {
            id: &header.id,
            object: "chat.completion.chunk",
            created: header.created,
            model: &header.model,
            choices,
            usage,
        }
    }
}

/// `data: <json>\n\n`.
fn sse_frame(value: &impl Serialize) -> Bytes {
    let json = serde_json::to_vec(value).unwrap_or_else(|err| {
        // Our chunk types always serialise; this only guards against a future mistake.
        let err = EngineError::Inference(format!("cannot serialise a stream chunk: {err}"));
        let (_, body) = ApiError::from(err).render();
        body.to_string().into_bytes()
    });
    let mut frame = Vec::with_capacity(json.len() + 8);
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(&json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

#[derive(Debug, Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Debug, Serialize)]
struct ChunkChoice {
    index: u32,
    delta: ChunkDelta,
    finish_reason: Option<&'static str>,
    logprobs: Option<()>,
}

#[derive(Debug, Default, Serialize)]
struct ChunkDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ChunkToolCall>,
}

/// A tool call in a delta: OpenAI's shape plus the call's position.
#[derive(Debug, Serialize)]
struct ChunkToolCall {
    index: usize,
    #[serde(flatten)]
    call: WireToolCallOut,
}

impl From<(usize, crate::engine::ToolCall)> for ChunkToolCall {
    fn from((index, call): (usize, crate::engine::ToolCall)) -> Self {
        ChunkToolCall {
            index,
            call: call.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use futures_util::StreamExt;
    use serde_json::{json, Value};

    use super::*;
    use crate::engine::{FinishReason, ToolCall};
    use crate::http::openai::chat_response::tests::{header, summary};
    use crate::http::openai::test_support::scripted_generation;

    const TEXT: StreamOptions = StreamOptions {
        include_usage: false,
    };

    /// Streams `first` then `rest` (the sender is dropped after them) and returns the frames.
    async fn frames(
        options: StreamOptions,
        first: GenerationEvent,
        rest: Vec<Result<GenerationEvent, EngineError>>,
    ) -> Vec<String> {
        let (events, sender, _cancel) = scripted_generation();
        for event in rest {
            sender.send(event).expect("the stream is alive");
        }
        drop(sender);
        let body = ChatStream::new(events, header(), options, first).into_body();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .expect("the body reads");
        let text = String::from_utf8(bytes.to_vec()).expect("frames are UTF-8");
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.split_terminator("\n\n").map(str::to_owned).collect()
    }

    fn data(frame: &str) -> Value {
        let json = frame
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data frame: {frame:?}"));
        serde_json::from_str(json).unwrap_or_else(|err| panic!("{err}: {json}"))
    }

    fn delta(text: &str) -> GenerationEvent {
        GenerationEvent::Delta(text.to_owned())
    }

    #[tokio::test]
    async fn text_stream_ends_with_finish_usage_and_done() {
        let done = GenerationEvent::Done(summary(FinishReason::Stop, vec![]));
        let options = StreamOptions {
            include_usage: true,
        };
        let frames = frames(
            options,
            delta("Hel"),
            vec![Ok(delta("")), Ok(delta("lo")), Ok(done)],
        )
        .await;
        assert_eq!(frames.len(), 6, "{frames:#?}");
        assert_eq!(
            data(&frames[0])["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(
            data(&frames[1])["choices"][0]["delta"],
            json!({"content": "Hel"})
        );
        assert_eq!(
            data(&frames[2])["choices"][0]["delta"],
            json!({"content": "lo"})
        );
        let finish = data(&frames[3]);
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        let usage = data(&frames[4]);
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 13);
        assert_eq!(frames[5], "data: [DONE]");
        for frame in &frames[..5] {
            let chunk = data(frame);
            assert_eq!(
                (chunk["object"].as_str(), chunk["id"].as_str()),
                (Some("chat.completion.chunk"), Some("chatcmpl-1"))
            );
        }
    }

    #[tokio::test]
    async fn each_tool_call_streams_in_its_own_delta_with_its_index() {
        let call = |id: &str, name: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        let calls = vec![call("call_1", "f"), call("call_2", "g")];
        let done = GenerationEvent::Done(summary(FinishReason::ToolCalls, calls));
        let frames = frames(TEXT, done, vec![]).await;
        assert_eq!(frames.len(), 5, "{frames:#?}");
        for (frame, (index, id, name)) in frames[1..3]
            .iter()
            .zip([(0, "call_1", "f"), (1, "call_2", "g")])
        {
            let delta = &data(frame)["choices"][0]["delta"];
            let expected = json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}]});
            assert_eq!(delta, &expected);
        }
        assert_eq!(
            data(&frames[3])["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert_eq!(frames[4], "data: [DONE]");
    }

    #[tokio::test]
    async fn errors_end_the_stream_with_an_error_frame() {
        let failure = Err(EngineError::Inference("NaN logits".into()));
        let failed = frames(TEXT, delta("a"), vec![failure, Ok(delta("never sent"))]).await;
        assert_eq!(failed.len(), 3, "{failed:#?}");
        assert_eq!(data(&failed[2])["error"]["code"], "internal_error");
        // A worker that vanishes without `Done` is an error too, not a clean end.
        let vanished = frames(TEXT, delta("a"), vec![]).await;
        assert_eq!(vanished.len(), 3, "{vanished:#?}");
        assert_eq!(data(&vanished[2])["error"]["type"], "server_error");
    }

    #[tokio::test]
    async fn dropping_the_body_cancels_the_generation() {
        let (events, sender, cancel) = scripted_generation();
        let body = ChatStream::new(events, header(), TEXT, delta("a")).into_body();
        let mut data_stream = body.into_data_stream();
        assert!(data_stream.next().await.is_some());
        assert!(!cancel.load(Ordering::Relaxed));
        drop(data_stream);
        assert!(
            cancel.load(Ordering::Relaxed),
            "the client went away: the engine must stop"
        );
        assert!(sender.send(Ok(delta("b"))).is_err(), "the receiver is gone");
    }

    #[test]
    fn frames_are_sse_data_lines() {
        let frame = sse_frame(&json!({"a": 1}));
        assert_eq!(&frame[..], b"data: {\"a\":1}\n\n");
    }

    /// The JSON of a frame, or `None` for `[DONE]`.
    fn parse_frame(frame: &[u8]) -> Option<Value> {
        let text = std::str::from_utf8(frame).ok()?;
        let data = text.strip_prefix("data: ")?.strip_suffix("\n\n")?;
        if data == "[DONE]" {
            return None;
        }
        serde_json::from_str(data).ok()
    }

    #[test]
    fn chunk_shapes_match_openai() {
        let delta = ChunkDelta {
            content: Some("Hi".into()),
            ..ChunkDelta::default()
        };
        let choice = ChunkChoice {
            index: 0,
            delta,
            finish_reason: None,
            logprobs: None,
        };
        let chunk = Chunk {
            id: "c",
            object: "chat.completion.chunk",
            created: 1,
            model: "m",
            choices: vec![choice],
            usage: None,
        };
        let expected = json!({
            "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null, "logprobs": null}],
        });
        assert_eq!(parse_frame(&sse_frame(&chunk)), Some(expected));
    }

    #[test]
    fn tool_call_chunks_carry_an_index() {
        let call = crate::engine::ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{}".into(),
        };
        let value = serde_json::to_value(ChunkToolCall::from((0, call))).unwrap_or(Value::Null);
        let expected = json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}});
        assert_eq!(value, expected);
    }
}
