//! Constrained decoding with llguidance: JSON-schema outputs and tool calls that always
//! parse and validate, even from a 135M model. The token trie is built straight from the
//! vocabulary's byte strings (no second tokenizers crate); the parser factory is built once
//! per model and shared by its requests.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use super::error::{EngineError, Result};
use super::tokenizer::TextTokenizer;
use super::types::{ResponseFormat, ToolCall, ToolChoice, ToolSpec};

/// Compact JSON: a small model cannot wander off into endless whitespace.
fn compact_json_options() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"})
}

/// The opening and closing markers of a tool call in free-text ("auto") mode.
pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// What a request's output must look like.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputShape {
    FreeText,
    /// JSON validating against the schema.
    Json(Value),
    /// JSON `{"name":…, "arguments":…}` for one of the tools.
    ToolCallOnly(Value),
    /// Free text, or one tool call wrapped in `<tool_call>…</tool_call>`.
    TextOrToolCall(Value),
}

impl OutputShape {
    /// Derives the shape from a request's response format and tool settings.
    pub fn for_request(
        format: &ResponseFormat,
        tools: &[ToolSpec],
        choice: &ToolChoice,
    ) -> Result<Self> {
        let offered: Vec<&ToolSpec> = match choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
            ToolChoice::Named(name) => {
                let tool = tools.iter().find(|t| &t.name == name).ok_or_else(|| {
                    EngineError::InvalidRequest(format!(
                        "tool_choice names `{name}`, which is not among the tools"
                    ))
                })?;
                vec![tool]
            }
        };
        if !offered.is_empty() {
            let schema = tool_call_schema(&offered);
            return Ok(match choice {
                ToolChoice::Auto => OutputShape::TextOrToolCall(schema),
                _ => OutputShape::ToolCallOnly(schema),
            });
        }
        Ok(match format {
            ResponseFormat::Text => OutputShape::FreeText,
            ResponseFormat::JsonObject => OutputShape::Json(json!({"type": "object"})),
            ResponseFormat::JsonSchema(schema) => OutputShape::Json(schema.clone()),
        })
    }

    fn grammar(&self) -> Option<TopLevelGrammar> {
        match self {
            OutputShape::FreeText => None,
            OutputShape::Json(schema) | OutputShape::ToolCallOnly(schema) => Some(
                TopLevelGrammar::from_json_schema(with_compact_options(schema)),
            ),
            OutputShape::TextOrToolCall(schema) => {
                let schema = with_compact_options(schema);
                let lark = format!(
                    "start: TEXT | \"{TOOL_CALL_OPEN}\" call \"{TOOL_CALL_CLOSE}\"\ncall: %json {schema}\nTEXT: /[^<][\\s\\S]*/\n"
                );
                Some(TopLevelGrammar::from_lark(lark))
            }
        }
    }

    /// Reads the tool calls out of a finished output; `None` when the output is plain text.
    pub fn parse_tool_call(&self, output: &str) -> Result<Option<ToolCall>> {
        let json_text = match self {
            OutputShape::ToolCallOnly(_) => output.trim(),
            OutputShape::TextOrToolCall(_) => match output.trim().strip_prefix(TOOL_CALL_OPEN) {
                Some(rest) => rest.strip_suffix(TOOL_CALL_CLOSE).unwrap_or(rest).trim(),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let value: Value = serde_json::from_str(json_text).map_err(|e| {
            EngineError::Inference(format!("constrained tool call did not parse: {e}"))
        })?;
        let name = value
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let arguments = value.get("arguments").cloned().unwrap_or_else(|| json!({}));
        Ok(Some(ToolCall {
            id: new_call_id(),
            name,
            arguments: arguments.to_string(),
        }))
    }
}

fn with_compact_options(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(object) = schema.as_object_mut() {
        object
            .entry("x-guidance")
            .or_insert_with(compact_json_options);
    }
    schema
}

/// `{"name": <tool>, "arguments": <its parameters>}` for any of `tools`.
fn tool_call_schema(tools: &[&ToolSpec]) -> Value {
    let options: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let parameters = if tool.parameters.is_object() {
                tool.parameters.clone()
            } else {
                json!({"type": "object"})
            };
            json!({
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": false
            })
        })
        .collect();
    if options.len() == 1 {
        options.into_iter().next().unwrap_or_default()
    } else {
        json!({"anyOf": options})
    }
}

fn new_call_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    format!("call_{:016x}", rng.random::<u64>())
}

/// The model-wide part: token trie and parser factory.
pub struct ConstraintFactory {
    factory: ParserFactory,
    vocab_size: usize,
}

impl ConstraintFactory {
    pub fn new(tokenizer: Arc<TextTokenizer>) -> Result<Self> {
        let vocab_size = tokenizer.vocab_size();
        let eos = tokenizer.eos_ids.first().copied().unwrap_or(0);
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let trie = TokTrie::from(&info, tokenizer.all_token_bytes());
        let env: TokEnv = Arc::new(VocabularyEnv { trie, tokenizer });
        let factory = ParserFactory::new_simple(&env).map_err(|e| {
            EngineError::Inference(format!("cannot build the constraint engine: {e}"))
        })?;
        Ok(Self {
            factory,
            vocab_size,
        })
    }

    /// A fresh constraint for one request, or `None` for free text.
    pub fn constraint(&self, shape: &OutputShape) -> Result<Option<Constraint>> {
        let Some(grammar) = shape.grammar() else {
            return Ok(None);
        };
        let matcher = Matcher::new(self.factory.create_parser(grammar));
        if let Some(err) = matcher.get_error() {
            return Err(EngineError::InvalidRequest(format!(
                "the schema cannot be used for constrained output: {err}"
            )));
        }
        Ok(Some(Constraint {
            matcher,
            vocab_size: self.vocab_size,
        }))
    }
}

/// One request's parser state.
pub struct Constraint {
    matcher: Matcher,
    vocab_size: usize,
}

impl Constraint {
    /// Sets every token the grammar forbids now to -inf.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(constraint_error)?;
        for (id, logit) in logits.iter_mut().enumerate() {
            if id >= self.vocab_size || !allowed.is_allowed(id as u32) {
                *logit = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    pub fn advance(&mut self, token: u32) -> Result<()> {
        self.matcher.consume_token(token).map_err(constraint_error)
    }

    /// True when the grammar is complete and nothing more may be generated.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}

fn constraint_error(err: impl std::fmt::Display) -> EngineError {
    EngineError::Inference(format!("constrained decoding failed: {err}"))
}

/// llguidance's view of the vocabulary.
struct VocabularyEnv {
    trie: TokTrie,
    tokenizer: Arc<TextTokenizer>,
}

impl TokenizerEnv for VocabularyEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        let text = String::from_utf8_lossy(bytes);
        self.tokenizer
            .encode(&text, false)
            .unwrap_or_else(|_| self.trie.greedy_tokenize(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type":"object","properties":{"x":{"type":"integer"}}}),
        }
    }

    #[test]
    fn named_tool_must_exist() {
        let err = OutputShape::for_request(
            &ResponseFormat::Text,
            &[tool("a")],
            &ToolChoice::Named("b".into()),
        )
        .unwrap_err();
        assert!(err.to_string().contains("`b`"));
    }

    #[test]
    fn tool_calls_are_parsed_in_both_modes() {
        let only =
            OutputShape::for_request(&ResponseFormat::Text, &[tool("a")], &ToolChoice::Required)
                .unwrap();
        let call = only
            .parse_tool_call(r#"{"name":"a","arguments":{"x":1}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (call.name.as_str(), call.arguments.as_str()),
            ("a", r#"{"x":1}"#)
        );
        let auto = OutputShape::for_request(&ResponseFormat::Text, &[tool("a")], &ToolChoice::Auto)
            .unwrap();
        assert_eq!(auto.parse_tool_call("plain answer").unwrap(), None);
        let call = auto
            .parse_tool_call(r#"<tool_call>{"name":"a","arguments":{}}</tool_call>"#)
            .unwrap()
            .unwrap();
        assert_eq!(call.name, "a");
    }

    #[test]
    fn no_tools_and_text_format_means_free_text() {
        let shape =
            OutputShape::for_request(&ResponseFormat::Text, &[], &ToolChoice::Auto).unwrap();
        assert_eq!(shape, OutputShape::FreeText);
    }
}
