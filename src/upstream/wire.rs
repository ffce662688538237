//! The OpenAI chat-completions wire format as Warden speaks it to upstream engines: a
//! `ChatRequest` becomes a streaming request body (structured output as
//! `response_format: json_schema`, tools as `tools`/`tool_choice`), and each streamed chunk
//! becomes pieces: text, tool-call fragments, the finish reason, token usage, an error.
//! Only fields of the OpenAI API are sent, so strict servers accept them too.

use serde_json::{json, Map, Value};

use crate::engine::{ChatRequest, FinishReason, ResponseFormat, ToolCall, ToolChoice};

/// The request body for `model` (the upstream's name for it).
pub fn request_body(model: &str, request: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = request.messages.iter().map(message).collect();
    if let Some(prefix) = request
        .assistant_prefix
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        // Engines that continue a final assistant message (llama.cpp, vLLM) resume it.
        messages.push(json!({"role": "assistant", "content": prefix}));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("temperature".into(), json!(request.sampling.temperature));
    if request.sampling.temperature > 0.0 {
        body.insert("top_p".into(), json!(request.sampling.top_p));
    }
    if let Some(seed) = request.sampling.seed {
        // Some engines take only signed 64-bit seeds.
        body.insert("seed".into(), json!(seed & (i64::MAX as u64)));
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if !request.stop.is_empty() {
        body.insert("stop".into(), json!(request.stop));
    }
    match &request.response_format {
        ResponseFormat::Text => {}
        ResponseFormat::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ResponseFormat::JsonSchema(schema) => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema",
                       "json_schema": {"name": "output", "schema": schema, "strict": true}}),
            );
        }
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name, "description": tool.description,
                    "parameters": tool.parameters}})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            ToolChoice::None => json!("none"),
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
        };
        body.insert("tool_choice".into(), choice);
        body.insert(
            "parallel_tool_calls".into(),
            json!(!request.single_tool_call),
        );
    }
    Value::Object(body)
}

fn message(message: &crate::engine::ChatMessage) -> Value {
    let mut out = json!({"role": message.role.as_str(), "content": message.content});
    if !message.tool_calls.is_empty() {
        out["tool_calls"] = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}})
            })
            .collect();
    }
    if let Some(id) = &message.tool_call_id {
        out["tool_call_id"] = json!(id);
    }
    out
}

/// One meaningful part of a streamed chunk.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    /// A fragment of the tool call at `index`: its id and name come once, its arguments in
    /// pieces.
    ToolCall {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Finish(FinishReason),
    Usage {
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The upstream reported an error inside the stream.
    Error(String),
}

/// The pieces of one `data:` payload; `Err` when it is not a chat-completion chunk.
pub fn chunk_pieces(payload: &str) -> Result<Vec<Piece>, String> {
    let chunk: Value = serde_json::from_str(payload)
        .map_err(|err| format!("a stream chunk is not JSON: {err}"))?;
    let Some(object) = chunk.as_object() else {
        return Err("a stream chunk is not a JSON object".to_owned());
    };
    let mut pieces = Vec::new();
    if let Some(error) = object.get("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string());
        pieces.push(Piece::Error(message));
        return Ok(pieces);
    }
    let choices = object.get("choices").and_then(Value::as_array);
    if choices.is_none() && object.get("usage").is_none() {
        return Err("a stream chunk has neither `choices` nor `usage`".to_owned());
    }
    for choice in choices.into_iter().flatten() {
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                pieces.push(Piece::Text(text.to_owned()));
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let function = call.get("function").unwrap_or(&Value::Null);
            let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
            pieces.push(Piece::ToolCall {
                index: call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize,
                id: text(call, "id"),
                name: text(function, "name"),
                arguments: text(function, "arguments").unwrap_or_default(),
            });
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            pieces.push(Piece::Finish(match reason {
                "length" => FinishReason::Length,
                "tool_calls" | "function_call" => FinishReason::ToolCalls,
                _ => FinishReason::Stop,
            }));
        }
    }
    if let Some(usage) = object.get("usage").filter(|u| u.is_object()) {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0) as usize;
        pieces.push(Piece::Usage {
            prompt_tokens: count("prompt_tokens"),
            completion_tokens: count("completion_tokens"),
        });
    }
    Ok(pieces)
}

/// Tool calls assembled from their streamed fragments.
#[derive(Debug, Default)]
pub struct ToolCallAssembly {
    calls: Vec<(Option<String>, String, String)>,
}

/// The most tool calls one answer may carry, and the longest arguments of one.
const MAX_TOOL_CALLS: usize = 64;
const MAX_ARGUMENT_BYTES: usize = 1 << 20;

impl ToolCallAssembly {
    pub fn add(
        &mut self,
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: &str,
    ) -> Result<(), String> {
        if index >= MAX_TOOL_CALLS {
            return Err(format!("more than {MAX_TOOL_CALLS} tool calls"));
        }
        while self.calls.len() <= index {
            self.calls.push((None, String::new(), String::new()));
        }
        let call = &mut self.calls[index];
        if id.is_some() {
            call.0 = id;
        }
        if let Some(name) = name {
            call.1.push_str(&name);
        }
        if call.2.len() + arguments.len() > MAX_ARGUMENT_BYTES {
            return Err("a tool call's arguments are too long".to_owned());
        }
        call.2.push_str(arguments);
        Ok(())
    }

    /// The calls; each gets an id if the upstream sent none.
    pub fn finish(self) -> Vec<ToolCall> {
        self.calls
            .into_iter()
            .enumerate()
            .filter(|(_, (_, name, _))| !name.is_empty())
            .map(|(i, (id, name, arguments))| ToolCall {
                id: id.unwrap_or_else(|| format!("call_{i}")),
                name,
                arguments: if arguments.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    arguments
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{ChatMessage, Role, SamplingParams, ToolSpec};

    #[test]
    fn a_structured_request_asks_for_json_schema_and_passes_tools() {
        let schema = json!({"type": "object", "properties": {"route": {"type": "string"}}});
        let request = ChatRequest {
            messages: vec![
                ChatMessage::new(Role::System, "Classify."),
                ChatMessage::new(Role::User, "disk full"),
            ],
            response_format: ResponseFormat::JsonSchema(schema.clone()),
            sampling: SamplingParams {
                seed: Some(u64::MAX),
                ..SamplingParams::greedy()
            },
            max_tokens: Some(64),
            tools: vec![ToolSpec {
                name: "search".into(),
                description: "Search".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Named("search".into()),
            single_tool_call: true,
            ..ChatRequest::default()
        };
        let body = request_body("qwen-72b", &request);
        assert_eq!(body["model"], "qwen-72b");
        assert_eq!(body["stream"], true);
        assert_eq!(body["messages"][1]["content"], "disk full");
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["seed"], i64::MAX);
        assert!(body.get("top_p").is_none(), "greedy sends no top_p");
        assert_eq!(body["tool_choice"]["function"]["name"], "search");
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["tools"][0]["function"]["name"], "search");
    }

    #[test]
    fn chunks_become_text_tool_calls_finish_and_usage() {
        let text = chunk_pieces(
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}"#,
        )
        .unwrap();
        assert_eq!(text, vec![Piece::Text("Hel".into())]);
        let call = chunk_pieces(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"search","arguments":"{\"q\":"}}]},"finish_reason":"tool_calls"}]}"#,
        )
        .unwrap();
        assert_eq!(call.len(), 2);
        assert_eq!(call[1], Piece::Finish(FinishReason::ToolCalls));
        let usage =
            chunk_pieces(r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#)
                .unwrap();
        assert_eq!(
            usage,
            vec![Piece::Usage {
                prompt_tokens: 12,
                completion_tokens: 3
            }]
        );
        assert_eq!(
            chunk_pieces(r#"{"error":{"message":"context too long"}}"#).unwrap(),
            vec![Piece::Error("context too long".into())]
        );
        assert!(chunk_pieces("<html>").is_err());
        assert!(chunk_pieces("{\"hello\":1}").is_err());
    }

    #[test]
    fn tool_call_fragments_are_assembled() {
        let mut calls = ToolCallAssembly::default();
        calls
            .add(0, Some("c1".into()), Some("search".into()), "{\"q\":")
            .unwrap();
        calls.add(0, None, None, "\"disk\"}").unwrap();
        calls.add(1, None, Some("list".into()), "").unwrap();
        let calls = calls.finish();
        assert_eq!(calls[0].arguments, "{\"q\":\"disk\"}");
        assert_eq!(calls[0].id, "c1");
        assert_eq!(calls[1].id, "call_1");
        assert_eq!(calls[1].arguments, "{}");
        assert!(ToolCallAssembly::default()
            .add(999, None, None, "")
            .is_err());
    }
}
