//! Validation of a chat completion request: turns the wire form into the engine's
//! `ChatRequest`, or into a 400 that names the parameter at fault. Pure functions only.

use serde_json::{json, Value};

use super::chat_wire::{
    ChatCompletionRequest, WireContent, WireMessage, WireResponseFormat, WireRole, WireStop,
    WireTool, WireToolCall, WireToolChoice,
};
use super::requested_model;
use crate::engine::{
    ChatMessage, ChatRequest, ResponseFormat, Role, SamplingParams, ToolCall, ToolChoice, ToolSpec,
};
use crate::http::error::ApiError;
use crate::http::HttpLimits;

/// Most stop sequences one request may give (OpenAI's limit).
const MAX_STOP_SEQUENCES: usize = 4;
/// Most tools one request may offer (OpenAI's limit).
const MAX_TOOLS: usize = 128;
/// Longest tool name (OpenAI's limit).
const MAX_TOOL_NAME_LENGTH: usize = 64;

/// A validated chat completion request.
#[derive(Debug)]
pub(crate) struct ValidChatRequest {
    /// `None` means the default chat model.
    pub model: Option<String>,
    pub request: ChatRequest,
    pub stream: bool,
    /// Send a usage chunk before `[DONE]` (streaming only).
    pub include_usage: bool,
}

pub(crate) fn validate_chat_request(
    wire: ChatCompletionRequest,
    limits: &HttpLimits,
) -> Result<ValidChatRequest, ApiError> {
    if let Some(n) = wire.n {
        if n != 1 {
            return Err(ApiError::invalid("n", "only n=1 is supported"));
        }
    }
    let sampling = sampling_params(&wire)?;
    let max_tokens = max_tokens(&wire, limits.max_tokens_cap)?;
    let stop = stop_sequences(wire.stop)?;
    let messages = messages(wire.messages)?;
    let tools = tools(wire.tools.unwrap_or_default())?;
    let tool_choice = tool_choice(wire.tool_choice, &tools)?;
    let single_tool_call = wire.parallel_tool_calls == Some(false);
    let response_format = response_format(wire.response_format)?;
    let stream = wire.stream.unwrap_or(false);
    let include_usage = stream
        && wire
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
    let request = ChatRequest {
        messages,
        tools,
        tool_choice,
        response_format,
        sampling,
        max_tokens,
        stop,
        single_tool_call,
        ..ChatRequest::default()
    };
    Ok(ValidChatRequest {
        model: requested_model(wire.model),
        request,
        stream,
        include_usage,
    })
}

/// `^[a-zA-Z0-9_-]{1,64}$`, written out.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    let allowed = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-';
    (1..=MAX_TOOL_NAME_LENGTH).contains(&name.len()) && name.bytes().all(allowed)
}

/// The engine defaults, overridden by what the client gave; temperature 0 is greedy.
fn sampling_params(wire: &ChatCompletionRequest) -> Result<SamplingParams, ApiError> {
    let mut params = SamplingParams::default();
    if let Some(temperature) = wire.temperature {
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid(
                "temperature",
                "temperature must be between 0 and 2",
            ));
        }
        params.temperature = temperature as f32;
    }
    if let Some(top_p) = wire.top_p {
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid(
                "top_p",
                "top_p must be greater than 0 and at most 1",
            ));
        }
        params.top_p = top_p as f32;
    }
    if let Some(top_k) = wire.top_k {
        params.top_k = usize::try_from(top_k).unwrap_or(usize::MAX);
    }
    if let Some(penalty) = wire.repetition_penalty {
        if !(penalty > 0.0 && penalty <= 10.0) {
            let message = "repetition_penalty must be greater than 0 and at most 10";
            return Err(ApiError::invalid("repetition_penalty", message));
        }
        params.repetition_penalty = penalty as f32;
    }
    // Negative seeds are valid in OpenAI's API; reinterpret the bits.
    params.seed = wire.seed.map(|seed| seed as u64);
    Ok(params)
}

/// `max_completion_tokens` wins over the older `max_tokens`; neither means the server's
/// answer cap, so that no request (a schema that never lets the model stop, say) holds the
/// model past it.
fn max_tokens(wire: &ChatCompletionRequest, cap: usize) -> Result<Option<usize>, ApiError> {
    let (param, value) = match (wire.max_completion_tokens, wire.max_tokens) {
        (Some(value), _) => ("max_completion_tokens", value),
        (None, Some(value)) => ("max_tokens", value),
        (None, None) => return Ok(Some(cap)),
    };
    let in_range = usize::try_from(value)
        .ok()
        .filter(|value| (1..=cap).contains(value));
    match in_range {
        Some(value) => Ok(Some(value)),
        None => Err(ApiError::invalid(
            param,
            format!("{param} must be between 1 and {cap}"),
        )),
    }
}

fn stop_sequences(stop: Option<WireStop>) -> Result<Vec<String>, ApiError> {
    let stop = match stop {
        None => Vec::new(),
        Some(WireStop::One(sequence)) => vec![sequence],
        Some(WireStop::Many(sequences)) => sequences,
    };
    if stop.len() > MAX_STOP_SEQUENCES {
        let message = format!("at most {MAX_STOP_SEQUENCES} stop sequences are allowed");
        return Err(ApiError::invalid("stop", message));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "stop sequences must not be empty",
        ));
    }
    Ok(stop)
}

fn messages(wire: Vec<WireMessage>) -> Result<Vec<ChatMessage>, ApiError> {
    if wire.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    wire.into_iter()
        .enumerate()
        .map(|(index, message)| chat_message(index, message))
        .collect()
}

fn chat_message(index: usize, wire: WireMessage) -> Result<ChatMessage, ApiError> {
    let role = match wire.role {
        WireRole::System | WireRole::Developer => Role::System,
        WireRole::User => Role::User,
        WireRole::Assistant => Role::Assistant,
        WireRole::Tool => Role::Tool,
    };
    let tool_calls = match wire.tool_calls {
        Some(calls) if !calls.is_empty() && role != Role::Assistant => {
            let message = "only assistant messages may carry tool_calls";
            return Err(ApiError::invalid(
                format!("messages[{index}].tool_calls"),
                message,
            ));
        }
        Some(calls) => history_tool_calls(index, calls)?,
        None => Vec::new(),
    };
    let content = match wire.content {
        Some(content) => content_text(index, content)?,
        // An assistant turn that only called tools has no content.
        None if role == Role::Assistant => String::new(),
        None => {
            let message = format!("content is required for {} messages", role.as_str());
            return Err(ApiError::invalid(
                format!("messages[{index}].content"),
                message,
            ));
        }
    };
    let tool_call_id = if role == Role::Tool {
        wire.tool_call_id
    } else {
        None
    };
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

/// The text of a message; text parts are joined with newlines.
fn content_text(index: usize, content: WireContent) -> Result<String, ApiError> {
    let parts = match content {
        WireContent::Text(text) => return Ok(text),
        WireContent::Parts(parts) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (part_index, part) in parts.into_iter().enumerate() {
        let param = format!("messages[{index}].content[{part_index}]");
        if part.kind != "text" {
            let message = format!(
                "content parts of type `{}` are not supported; send text",
                part.kind
            );
            return Err(ApiError::invalid(param, message));
        }
        match part.text {
            Some(text) => texts.push(text),
            None => {
                return Err(ApiError::invalid(
                    param,
                    "a text part needs a `text` string",
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Tool calls of an earlier assistant turn, replayed to the model as history.
fn history_tool_calls(index: usize, calls: Vec<WireToolCall>) -> Result<Vec<ToolCall>, ApiError> {
    let mut converted = Vec::with_capacity(calls.len());
    for (call_index, call) in calls.into_iter().enumerate() {
        if call.kind.as_deref().is_some_and(|kind| kind != "function") {
            let param = format!("messages[{index}].tool_calls[{call_index}].type");
            return Err(ApiError::invalid(
                param,
                "only `function` tool calls are supported",
            ));
        }
        let arguments = match call.function.arguments {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(Value::String(text)) => text,
            Some(other) => other.to_string(),
        };
        let id = call
            .id
            .unwrap_or_else(|| format!("call_{index}_{call_index}"));
        converted.push(ToolCall {
            id,
            name: call.function.name,
            arguments,
        });
    }
    Ok(converted)
}

fn tools(wire: Vec<WireTool>) -> Result<Vec<ToolSpec>, ApiError> {
    if wire.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            "tools",
            format!("at most {MAX_TOOLS} tools are allowed"),
        ));
    }
    let mut tools: Vec<ToolSpec> = Vec::with_capacity(wire.len());
    for (index, tool) in wire.into_iter().enumerate() {
        let spec = tool_spec(index, tool)?;
        if tools.iter().any(|earlier| earlier.name == spec.name) {
            let message = format!("tool name `{}` is used twice", spec.name);
            return Err(ApiError::invalid(
                format!("tools[{index}].function.name"),
                message,
            ));
        }
        tools.push(spec);
    }
    Ok(tools)
}

fn tool_spec(index: usize, tool: WireTool) -> Result<ToolSpec, ApiError> {
    if tool.kind != "function" {
        return Err(ApiError::invalid(
            format!("tools[{index}].type"),
            "only `function` tools are supported",
        ));
    }
    let function = tool.function;
    if !is_valid_tool_name(&function.name) {
        let message = "tool names must be 1 to 64 characters from a-z, A-Z, 0-9, `_` and `-`";
        return Err(ApiError::invalid(
            format!("tools[{index}].function.name"),
            message,
        ));
    }
    let parameters = match function.parameters {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(schema @ Value::Object(_)) => schema,
        Some(_) => {
            let param = format!("tools[{index}].function.parameters");
            return Err(ApiError::invalid(
                param,
                "parameters must be a JSON schema object",
            ));
        }
    };
    let description = function.description.unwrap_or_default();
    Ok(ToolSpec {
        name: function.name,
        description,
        parameters,
    })
}

/// Without `tool_choice`, the model may call a tool when there are tools, else never.
fn tool_choice(wire: Option<WireToolChoice>, tools: &[ToolSpec]) -> Result<ToolChoice, ApiError> {
    let choice = match wire {
        None => ToolChoice::Auto,
        Some(WireToolChoice::Mode(mode)) => match mode.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                let expected = "\"none\", \"auto\", \"required\" or a named function";
                let message = format!("tool_choice must be {expected}, not {other:?}");
                return Err(ApiError::invalid("tool_choice", message));
            }
        },
        Some(WireToolChoice::Named(named)) => {
            if named.kind.as_deref().is_some_and(|kind| kind != "function") {
                return Err(ApiError::invalid(
                    "tool_choice.type",
                    "tool_choice type must be `function`",
                ));
            }
            ToolChoice::Named(named.function.name)
        }
    };
    match choice {
        ToolChoice::Auto if tools.is_empty() => Ok(ToolChoice::None),
        ToolChoice::Required if tools.is_empty() => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice \"required\" needs at least one tool",
        )),
        ToolChoice::Named(name) if !tools.iter().any(|tool| tool.name == name) => {
            let message = format!("tool_choice names `{name}`, which is not in tools");
            Err(ApiError::invalid("tool_choice", message))
        }
        choice => Ok(choice),
    }
}

fn response_format(wire: Option<WireResponseFormat>) -> Result<ResponseFormat, ApiError> {
    match wire {
        None | Some(WireResponseFormat::Text) => Ok(ResponseFormat::Text),
        Some(WireResponseFormat::JsonObject) => Ok(ResponseFormat::JsonObject),
        Some(WireResponseFormat::JsonSchema { json_schema }) => match json_schema.schema {
            Some(schema @ Value::Object(_)) => Ok(ResponseFormat::JsonSchema(schema)),
            _ => {
                let message = "response_format.json_schema.schema must be a JSON schema object";
                Err(ApiError::invalid(
                    "response_format.json_schema.schema",
                    message,
                ))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HttpLimits = HttpLimits {
        max_body_bytes: 1 << 20,
        max_tokens_cap: 512,
        max_embedding_inputs: 8,
        max_v1_requests_per_user: 4,
        heartbeat: crate::config::DEFAULT_HEARTBEAT,
        connections: crate::http::ConnectionLimits::DEFAULT,
    };

    fn parse(body: Value) -> Result<ValidChatRequest, ApiError> {
        let wire: ChatCompletionRequest = serde_json::from_value(body)
            .map_err(|err| ApiError::BadJson(format!("test body does not parse: {err}")))?;
        validate_chat_request(wire, &LIMITS)
    }

    fn with(extra: Value) -> Value {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        body
    }

    fn valid(extra: Value) -> ValidChatRequest {
        match parse(with(extra.clone())) {
            Ok(request) => request,
            Err(err) => panic!("{extra} should be valid, got {err:?}"),
        }
    }

    /// Asserts that the request is rejected with a 400 naming `param`.
    fn rejected(extra: Value, param: &str) {
        match parse(with(extra.clone())) {
            Err(ApiError::InvalidRequest {
                param: Some(actual),
                ..
            }) => {
                assert_eq!(actual, param, "{extra}")
            }
            other => panic!("{extra} should be rejected on {param}, got {other:?}"),
        }
    }

    #[test]
    fn minimal_request_gets_defaults() {
        let request = valid(json!({}));
        assert_eq!(request.model.as_deref(), Some("m"));
        assert!(!request.stream && !request.include_usage);
        let chat = request.request;
        assert_eq!(chat.messages, vec![ChatMessage::new(Role::User, "hi")]);
        assert_eq!(chat.sampling, SamplingParams::default());
        assert_eq!(chat.max_tokens, Some(LIMITS.max_tokens_cap));
        assert_eq!(chat.tool_choice, ToolChoice::None);
        assert_eq!(chat.response_format, ResponseFormat::Text);
        assert!(chat.stop.is_empty() && chat.tools.is_empty());
    }

    #[test]
    fn missing_or_empty_model_means_default() {
        let missing = parse(json!({"messages": [{"role": "user", "content": "hi"}]}));
        assert!(matches!(missing, Ok(ValidChatRequest { model: None, .. })));
        assert_eq!(valid(json!({"model": ""})).model, None);
    }

    #[test]
    fn sampling_parameters_are_applied() {
        let body = json!({"temperature": 0.8, "top_p": 0.5, "top_k": 7, "repetition_penalty": 1.3, "seed": 42});
        let sampling = valid(body).request.sampling;
        assert_eq!(sampling.temperature, 0.8);
        assert_eq!(sampling.top_p, 0.5);
        assert_eq!(sampling.top_k, 7);
        assert_eq!(sampling.repetition_penalty, 1.3);
        assert_eq!(sampling.seed, Some(42));
        assert_eq!(
            valid(json!({"temperature": 0}))
                .request
                .sampling
                .temperature,
            0.0
        );
        assert_eq!(
            valid(json!({"seed": -1})).request.sampling.seed,
            Some(u64::MAX)
        );
    }

    #[test]
    fn sampling_parameters_are_range_checked() {
        rejected(json!({"temperature": 2.5}), "temperature");
        rejected(json!({"temperature": -0.1}), "temperature");
        valid(json!({"temperature": 2}));
        rejected(json!({"top_p": 0}), "top_p");
        rejected(json!({"top_p": 1.01}), "top_p");
        valid(json!({"top_p": 1}));
        rejected(json!({"repetition_penalty": 0}), "repetition_penalty");
    }

    #[test]
    fn max_tokens_is_bounded_by_the_cap() {
        assert_eq!(
            valid(json!({"max_tokens": 512})).request.max_tokens,
            Some(512)
        );
        rejected(json!({"max_tokens": 513}), "max_tokens");
        rejected(json!({"max_tokens": 0}), "max_tokens");
        rejected(json!({"max_tokens": -5}), "max_tokens");
        rejected(
            json!({"max_completion_tokens": 100000}),
            "max_completion_tokens",
        );
        let both = json!({"max_tokens": 500, "max_completion_tokens": 20});
        assert_eq!(valid(both).request.max_tokens, Some(20));
    }

    #[test]
    fn only_one_choice_is_supported() {
        valid(json!({"n": 1}));
        valid(json!({"n": null}));
        rejected(json!({"n": 2}), "n");
        rejected(json!({"n": 0}), "n");
    }

    #[test]
    fn stop_accepts_a_string_or_a_list() {
        assert_eq!(valid(json!({"stop": "END"})).request.stop, vec!["END"]);
        assert_eq!(
            valid(json!({"stop": ["a", "b"]})).request.stop,
            vec!["a", "b"]
        );
        rejected(json!({"stop": ["a", "b", "c", "d", "e"]}), "stop");
        rejected(json!({"stop": [""]}), "stop");
    }

    #[test]
    fn stream_options_apply_only_when_streaming() {
        let streaming = valid(json!({"stream": true, "stream_options": {"include_usage": true}}));
        assert!(streaming.stream && streaming.include_usage);
        let not_streaming =
            valid(json!({"stream": false, "stream_options": {"include_usage": true}}));
        assert!(!not_streaming.include_usage);
    }

    #[test]
    fn messages_must_not_be_empty() {
        rejected(json!({"messages": []}), "messages");
    }

    #[test]
    fn content_parts_are_joined_and_non_text_parts_rejected() {
        let parts = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]});
        assert_eq!(valid(parts).request.messages[0].content, "one\ntwo");
        let image = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "x"}}]}]});
        rejected(image, "messages[0].content[0]");
        let no_text = json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]});
        rejected(no_text, "messages[0].content[0]");
    }

    #[test]
    fn roles_map_to_engine_roles() {
        let body = json!({"messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "weather?", "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
        ]});
        let messages = valid(body).request.messages;
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::Tool]
        );
        assert_eq!(messages[2].content, "");
        let call = ToolCall {
            id: "call_1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Oslo"}"#.into(),
        };
        assert_eq!(messages[2].tool_calls, vec![call]);
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn bad_messages_are_rejected() {
        rejected(
            json!({"messages": [{"role": "user"}]}),
            "messages[0].content",
        );
        let user_tool_calls = json!({"messages": [{"role": "user", "content": "x", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
        rejected(user_tool_calls, "messages[0].tool_calls");
        let unknown_role = with(json!({"messages": [{"role": "wizard", "content": "x"}]}));
        assert!(matches!(parse(unknown_role), Err(ApiError::BadJson(_))));
    }

    fn weather_tool(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name, "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    #[test]
    fn tools_and_tool_choice_are_converted() {
        let tools = json!([weather_tool("get_weather"), weather_tool("get-time_2")]);
        let auto = valid(json!({"tools": tools}));
        assert_eq!(auto.request.tool_choice, ToolChoice::Auto);
        assert_eq!(auto.request.tools.len(), 2);
        assert_eq!(auto.request.tools[0].description, "Weather");
        let required = valid(json!({"tools": tools, "tool_choice": "required"}));
        assert_eq!(required.request.tool_choice, ToolChoice::Required);
        let named = json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "get-time_2"}}});
        assert_eq!(
            valid(named).request.tool_choice,
            ToolChoice::Named("get-time_2".into())
        );
        let none = valid(json!({"tools": tools, "tool_choice": "none"}));
        assert_eq!(none.request.tool_choice, ToolChoice::None);
        assert!(!auto.request.single_tool_call, "several calls by default");
        let single = valid(json!({"tools": tools, "parallel_tool_calls": false}));
        assert!(single.request.single_tool_call);
        let parallel = valid(json!({"tools": tools, "parallel_tool_calls": true}));
        assert!(!parallel.request.single_tool_call);
    }

    #[test]
    fn tool_without_parameters_gets_an_empty_object_schema() {
        let tool = json!({"type": "function", "function": {"name": "now"}});
        let spec = &valid(json!({"tools": [tool]})).request.tools[0];
        assert_eq!(spec.parameters, json!({"type": "object", "properties": {}}));
    }

    #[test]
    fn bad_tools_are_rejected() {
        rejected(
            json!({"tools": [weather_tool("bad name")]}),
            "tools[0].function.name",
        );
        rejected(
            json!({"tools": [weather_tool(&"x".repeat(65))]}),
            "tools[0].function.name",
        );
        rejected(
            json!({"tools": [weather_tool("a"), weather_tool("a")]}),
            "tools[1].function.name",
        );
        let not_function = json!({"type": "retrieval", "function": {"name": "a"}});
        rejected(json!({"tools": [not_function]}), "tools[0].type");
        let bad_schema = json!({"type": "function", "function": {"name": "a", "parameters": "x"}});
        rejected(
            json!({"tools": [bad_schema]}),
            "tools[0].function.parameters",
        );
    }

    #[test]
    fn tool_choice_must_match_the_tools() {
        let named = json!({"type": "function", "function": {"name": "missing"}});
        rejected(
            json!({"tools": [weather_tool("get_weather")], "tool_choice": named}),
            "tool_choice",
        );
        rejected(json!({"tool_choice": "required"}), "tool_choice");
        rejected(
            json!({"tools": [weather_tool("a")], "tool_choice": "sometimes"}),
            "tool_choice",
        );
        assert_eq!(
            valid(json!({"tool_choice": "auto"})).request.tool_choice,
            ToolChoice::None
        );
    }

    #[test]
    fn tool_names_follow_openai_rules() {
        for name in ["a", "get_weather", "A-9_z", &"x".repeat(64)] {
            assert!(is_valid_tool_name(name), "{name}");
        }
        for name in ["", "has space", "dot.name", "ünïcode", &"x".repeat(65)] {
            assert!(!is_valid_tool_name(name), "{name}");
        }
    }

    #[test]
    fn response_formats_are_converted() {
        let text = json!({"response_format": {"type": "text"}});
        assert_eq!(valid(text).request.response_format, ResponseFormat::Text);
        let object = json!({"response_format": {"type": "json_object"}});
        assert_eq!(
            valid(object).request.response_format,
            ResponseFormat::JsonObject
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let body = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": schema}}});
        assert_eq!(
            valid(body).request.response_format,
            ResponseFormat::JsonSchema(schema)
        );
        let no_schema =
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "s"}}});
        rejected(no_schema, "response_format.json_schema.schema");
        let unknown = with(json!({"response_format": {"type": "yaml"}}));
        assert!(matches!(parse(unknown), Err(ApiError::BadJson(_))));
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let extras = json!({"frequency_penalty": 0, "presence_penalty": 0, "user": "u", "logit_bias": {}, "parallel_tool_calls": true});
        valid(extras);
    }
}
