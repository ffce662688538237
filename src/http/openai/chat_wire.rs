//! What clients send to `POST /v1/chat/completions`, as OpenAI documents it plus a few
//! common extensions (`top_k`, `repetition_penalty`). Unknown fields are ignored, since
//! OpenAI clients send many we do not use; every field that may be `null` is an `Option`.
//! Nothing is validated here: `chat_request` does that.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub(crate) struct ChatCompletionRequest {
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Extension: sample from the `top_k` most likely tokens.
    pub top_k: Option<u64>,
    /// Extension: penalty for tokens seen recently.
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    /// Deprecated by OpenAI in favour of `max_completion_tokens`; still what most send.
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub stop: Option<WireStop>,
    pub stream: Option<bool>,
    pub stream_options: Option<WireStreamOptions>,
    pub response_format: Option<WireResponseFormat>,
    pub tools: Option<Vec<WireTool>>,
    pub tool_choice: Option<WireToolChoice>,
    /// `false` allows at most one tool call per answer (default: several).
    pub parallel_tool_calls: Option<bool>,
    pub n: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireMessage {
    pub role: WireRole,
    pub content: Option<WireContent>,
    pub tool_calls: Option<Vec<WireToolCall>>,
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WireRole {
    System,
    /// OpenAI's newer name for system instructions.
    Developer,
    User,
    Assistant,
    Tool,
}

/// Message content: a plain string or a list of typed parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireContent {
    Text(String),
    Parts(Vec<WireContentPart>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// A tool call in an earlier assistant message of the conversation.
#[derive(Debug, Deserialize)]
pub(crate) struct WireToolCall {
    pub id: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: WireFunctionCall,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunctionCall {
    pub name: String,
    /// A JSON text in OpenAI's API; some clients send the object itself.
    pub arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireStop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireStreamOptions {
    pub include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum WireResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema },
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireJsonSchema {
    pub schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireTool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: WireFunction,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunction {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema for the arguments; absent means "no arguments".
    pub parameters: Option<Value>,
}

/// `"none" | "auto" | "required"` or `{"type":"function","function":{"name":…}}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum WireToolChoice {
    Mode(String),
    Named(WireNamedToolChoice),
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireNamedToolChoice {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub function: WireFunctionName,
}

#[derive(Debug, Deserialize)]
pub(crate) struct WireFunctionName {
    pub name: String,
}
