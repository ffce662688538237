//! What `POST /v1/chat/completions` answers without streaming (`chat.completion`), and the
//! pieces the streamed chunks share with it: the response header, usage and tool calls.

use serde::Serialize;

use super::{new_response_id, unix_now};
use crate::engine::{GenerationSummary, ToolCall};

/// The fields every response and chunk of one completion repeats.
#[derive(Debug, Clone)]
pub(crate) struct CompletionHeader {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl CompletionHeader {
    pub(crate) fn new(model: String) -> Self {
        CompletionHeader {
            id: new_response_id("chatcmpl"),
            created: unix_now(),
            model,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct ChatCompletion {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    choices: Vec<Choice>,
    usage: Usage,
}

#[derive(Debug, Serialize)]
struct Choice {
    index: u32,
    message: AssistantMessage,
    finish_reason: &'static str,
    logprobs: Option<()>,
}

#[derive(Debug, Serialize)]
struct AssistantMessage {
    role: &'static str,
    /// `null` when the model called tools instead of answering.
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCallOut>,
}

/// A tool call as OpenAI returns it.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct WireToolCallOut {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCallOut,
}

#[derive(Debug, Serialize, PartialEq)]
struct WireFunctionCallOut {
    name: String,
    arguments: String,
}

impl From<ToolCall> for WireToolCallOut {
    fn from(call: ToolCall) -> Self {
        let function = WireFunctionCallOut {
            name: call.name,
            arguments: call.arguments,
        };
        WireToolCallOut {
            id: call.id,
            kind: "function",
            function,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Usage {
    prompt_tokens: usize,
    completion_tokens: usize,
    total_tokens: usize,
    prompt_tokens_details: PromptTokensDetails,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
struct PromptTokensDetails {
    cached_tokens: usize,
}

impl Usage {
    pub(crate) fn of(summary: &GenerationSummary) -> Self {
        Usage {
            prompt_tokens: summary.prompt_tokens,
            completion_tokens: summary.completion_tokens,
            total_tokens: summary.prompt_tokens + summary.completion_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: summary.cached_prompt_tokens,
            },
        }
    }
}

/// OpenAI's `finish_reason`: a generation that made tool calls always reports `tool_calls`.
pub(crate) fn finish_reason(summary: &GenerationSummary) -> &'static str {
    if summary.tool_calls.is_empty() {
        summary.finish_reason.as_str()
    } else {
        "tool_calls"
    }
}

/// The whole answer of a finished generation: its text, or its tool calls.
pub(crate) fn chat_completion(
    header: CompletionHeader,
    text: String,
    summary: GenerationSummary,
) -> ChatCompletion {
    let finish_reason = finish_reason(&summary);
    let usage = Usage::of(&summary);
    let tool_calls: Vec<WireToolCallOut> = summary.tool_calls.into_iter().map(Into::into).collect();
    let content = if tool_calls.is_empty() {
        Some(text)
    } else {
        None
    };
    let message = AssistantMessage {
        role: "assistant",
        content,
        tool_calls,
    };
    let choice = Choice {
        index: 0,
        message,
        finish_reason,
        logprobs: None,
    };
    ChatCompletion {
        id: header.id,
        object: "chat.completion",
        created: header.created,
        model: header.model,
        choices: vec![choice],
        usage,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::engine::FinishReason;

    pub(crate) fn summary(
        finish_reason: FinishReason,
        tool_calls: Vec<ToolCall>,
    ) -> GenerationSummary {
        GenerationSummary {
            prompt_tokens: 10,
            cached_prompt_tokens: 4,
            completion_tokens: 3,
            finish_reason,
            tool_calls,
            prefill_ms: 1.0,
            decode_ms: 2.0,
        }
    }

    pub(crate) fn header() -> CompletionHeader {
        CompletionHeader {
            id: "chatcmpl-1".into(),
            created: 1700000000,
            model: "m".into(),
        }
    }

    fn to_json(completion: ChatCompletion) -> Value {
        serde_json::to_value(completion).unwrap_or(Value::Null)
    }

    #[test]
    fn text_answer_has_openai_shape() {
        let body = to_json(chat_completion(
            header(),
            "Hello".into(),
            summary(FinishReason::Length, vec![]),
        ));
        let expected = json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "m",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Hello"},
                "finish_reason": "length",
                "logprobs": null,
            }],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "total_tokens": 13,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn tool_calls_replace_content() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{\"a\":1}".into(),
        };
        // The engine reports `tool_calls`; even if it did not, the calls decide.
        let body = to_json(chat_completion(
            header(),
            "ignored".into(),
            summary(FinishReason::Stop, vec![call]),
        ));
        let choice = &body["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], Value::Null);
        let expected = json!([{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]);
        assert_eq!(choice["message"]["tool_calls"], expected);
    }
}
