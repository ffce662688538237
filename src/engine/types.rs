//! Request, response and event types of the inference engine: the whole vocabulary that
//! the HTTP layer and the CLI use to talk to loaded models. No model internals here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a chat conversation, already validated by the caller.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// Tool calls an assistant message made (for multi-turn tool use).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool` messages: which call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A function the model may call, in OpenAI's shape (`parameters` is a JSON schema).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum ToolChoice {
    /// Never call a tool (the default when no tools are given).
    None,
    /// The model decides between answering and calling tools.
    #[default]
    Auto,
    /// The model must call at least one of the tools.
    Required,
    /// The model must call this tool.
    Named(String),
}

/// A tool call produced by the model; `arguments` is a JSON text that parses and validates
/// against the tool's parameter schema.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub enum ResponseFormat {
    #[default]
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON that validates against this schema.
    JsonSchema(Value),
}

/// Sampling settings. `temperature == 0` means greedy decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub repetition_penalty: f32,
    /// Window of recent tokens the repetition penalty looks at.
    pub repetition_window: usize,
    /// Same seed and same request give the same output.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.7,
            top_p: 0.95,
            top_k: 40,
            repetition_penalty: 1.0,
            repetition_window: 64,
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }
}

/// A chat generation request for one model.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub response_format: ResponseFormat,
    pub sampling: SamplingParams,
    /// `None` means "up to the context window".
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens (benchmarks only).
    pub ignore_eos: bool,
    /// The start of the assistant's answer, already written: generation continues it
    /// (a resumed run). Tokenized as plain text after the generation prompt.
    pub assistant_prefix: Option<String>,
    /// At most one tool call (OpenAI's `parallel_tool_calls: false`); otherwise several.
    pub single_tool_call: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// What a finished generation reports, after its last text delta.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GenerationSummary {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV state was reused from the previous request (no prefill).
    pub cached_prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish_reason: FinishReason,
    pub tool_calls: Vec<ToolCall>,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

/// Events a generation streams, in order: zero or more `Delta`, then one `Done`.
/// A `Delta` always holds whole UTF-8 characters.
#[derive(Debug, Clone, PartialEq)]
pub enum GenerationEvent {
    Delta(String),
    Done(GenerationSummary),
}

/// What the engine knows about a loaded model, for `/v1/models` and `warden models list`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelInfo {
    pub id: String,
    pub kind: ModelKind,
    pub architecture: String,
    pub context_length: usize,
    pub path: String,
    /// Embedding width, for embedding models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
    /// The encoder's precision (`f32` or `int8`), for embedding models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Chat,
    Embedding,
}

/// Result of one embedding request.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Vec<Vec<f32>>,
    pub prompt_tokens: usize,
}
