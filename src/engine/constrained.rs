//! Constrained decoding with llguidance: JSON-schema outputs and tool calls that always
//! parse and validate, even from a 135M model. Every schema is first bounded
//! ([`bounded_schema`]): numbers to what a float64 holds, strings, arrays and free-form
//! objects to configured caps, so a looping model cannot run a value past its token budget.
//! Tool calls are `<tool_call>{"name":…,"arguments":…}</tool_call>`, one or several, in a
//! Lark grammar that embeds the calls' JSON schema (`tool_calls`). The token trie is built straight from
//! the vocabulary's byte strings (no second tokenizers crate); the parser factory is built
//! once per model and shared by its requests.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use super::error::{EngineError, Result};
pub use super::schema_bounds::{bounded_schema, OutputLimits, MAX_FRACTION_DIGITS};
use super::tokenizer::TextTokenizer;
use super::types::{ChatRequest, ResponseFormat, ToolCall, ToolChoice, ToolSpec};

mod tool_calls;

use self::tool_calls::{malformed_call, scan_calls, tool_call_schema, tool_calls_lark, CallScan};
pub use self::tool_calls::{MAX_TOOL_CALLS, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};

/// Compact JSON: a small model cannot wander off into endless whitespace.
fn compact_json_options() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ",", "key_separator": ":"})
}

/// What a request's output must look like.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputShape {
    FreeText,
    /// JSON validating against the schema.
    Json(Value),
    /// One to `max_calls` tool calls; `schema` is the schema of one call's JSON
    /// `{"name":…, "arguments":…}`.
    ToolCalls {
        schema: Value,
        max_calls: usize,
    },
    /// Free text, or tool calls as in `ToolCalls`.
    TextOrToolCalls {
        schema: Value,
        max_calls: usize,
    },
}

impl OutputShape {
    /// Derives the shape from a request's response format and tool settings.
    pub fn for_request(request: &ChatRequest) -> Result<Self> {
        let tools = &request.tools;
        let offered: Vec<&ToolSpec> = match &request.tool_choice {
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
            let several =
                !request.single_tool_call && !matches!(request.tool_choice, ToolChoice::Named(_));
            let max_calls = if several { MAX_TOOL_CALLS } else { 1 };
            return Ok(match request.tool_choice {
                ToolChoice::Auto => OutputShape::TextOrToolCalls { schema, max_calls },
                _ => OutputShape::ToolCalls { schema, max_calls },
            });
        }
        Ok(match &request.response_format {
            ResponseFormat::Text => OutputShape::FreeText,
            ResponseFormat::JsonObject => OutputShape::Json(json!({"type": "object"})),
            ResponseFormat::JsonSchema(schema) => OutputShape::Json(schema.clone()),
        })
    }

    /// The grammar of this shape with `limits` applied, or `None` for free text.
    fn grammar(&self, limits: &OutputLimits) -> Option<TopLevelGrammar> {
        match self {
            OutputShape::FreeText => None,
            OutputShape::Json(schema) => Some(TopLevelGrammar::from_json_schema(
                with_compact_options(bounded_schema(schema, limits)),
            )),
            OutputShape::ToolCalls { schema, max_calls } => Some(TopLevelGrammar::from_lark(
                tool_calls_lark(schema, limits, *max_calls, false),
            )),
            OutputShape::TextOrToolCalls { schema, max_calls } => Some(TopLevelGrammar::from_lark(
                tool_calls_lark(schema, limits, *max_calls, true),
            )),
        }
    }

    /// Reads the tool calls out of a finished output: none when the output is plain text
    /// (or the shape has no tools), else every `<tool_call>…</tool_call>` in order, a call
    /// that repeats an earlier one (same name and arguments) left out.
    pub fn parse_tool_calls(&self, output: &str) -> Result<Vec<ToolCall>> {
        let scan = self.scan_calls(output);
        match scan.problem {
            Some(reason) => Err(malformed_call(reason)),
            None => Ok(scan.calls),
        }
    }

    /// The complete calls of an output cut off by the token budget: those before the
    /// unfinished one.
    pub fn complete_tool_calls(&self, output: &str) -> Vec<ToolCall> {
        self.scan_calls(output).calls
    }

    /// True when the output's last call has just closed and repeats an earlier call: a
    /// small model that starts repeating itself has made every call it will make.
    pub fn ends_with_repeated_call(&self, output: &str) -> bool {
        output.trim_end().ends_with(TOOL_CALL_CLOSE) && self.scan_calls(output).repeated
    }

    fn scan_calls(&self, output: &str) -> CallScan {
        match self {
            OutputShape::ToolCalls { .. } => scan_calls(output),
            // The grammar only lets tool calls start at the very first character.
            OutputShape::TextOrToolCalls { .. } if output.starts_with(TOOL_CALL_OPEN) => {
                scan_calls(output)
            }
            _ => CallScan::default(),
        }
    }
}

fn with_compact_options(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object
            .entry("x-guidance")
            .or_insert_with(compact_json_options);
    }
    schema
}

/// The model-wide part: token trie, parser factory and the output limits.
pub struct ConstraintFactory {
    factory: ParserFactory,
    vocab_size: usize,
    limits: OutputLimits,
    closers: Arc<Closers>,
}

/// The tokens that bring a JSON value to its end soonest, in the order they are preferred
/// once a generation runs short of tokens. Inside a string: the closing quote (alone or
/// followed by closing brackets). Outside: closing brackets first, then the shortest values
/// and separators a required part still needs.
#[derive(Debug, Default)]
struct Closers {
    in_string: Vec<u32>,
    outside: Vec<Vec<u32>>,
    /// Each token's bytes, to follow whether the output is inside a string.
    bytes: Vec<Vec<u8>>,
}

impl Closers {
    fn from_trie(trie: &TokTrie) -> Closers {
        let brackets = |bytes: &[u8]| bytes.iter().all(|b| b"}]".contains(b));
        let shortest: [&[u8]; 10] = [
            b",", b":", b"0", b"[", b"{", b"\"", b"\"\"", b"false", b"true", b"null",
        ];
        let mut closers = Closers::default();
        let (mut close, mut short) = (Vec::new(), Vec::new());
        for id in 0..trie.vocab_size() as u32 {
            let bytes = trie.token(id);
            closers.bytes.push(bytes.to_vec());
            if bytes.is_empty() || bytes.len() > 4 {
                continue;
            }
            if bytes[0] == b'"' && brackets(&bytes[1..]) {
                closers.in_string.push(id);
            }
            if brackets(bytes) {
                close.push(id);
            } else if shortest.contains(&bytes) {
                short.push(id);
            }
        }
        closers.outside = vec![close, short];
        closers
    }
}

/// Where a JSON output stands: inside a string (and after a backslash) or not.
#[derive(Debug, Default, Clone, Copy)]
struct JsonLexState {
    in_string: bool,
    escaped: bool,
}

impl JsonLexState {
    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.escaped {
                self.escaped = false;
            } else if self.in_string && byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = !self.in_string;
            }
        }
    }
}

/// Tokens left at which a constrained output starts closing: a third of the budget, at
/// least 2 and at most 24, enough for the closing quotes and brackets of nested values and
/// the shortest values of required fields still missing.
pub fn closing_reserve(max_new: usize) -> usize {
    (max_new / 3).clamp(2, 24)
}

impl ConstraintFactory {
    pub fn new(tokenizer: Arc<TextTokenizer>, limits: OutputLimits) -> Result<Self> {
        let vocab_size = tokenizer.vocab_size();
        let eos = tokenizer.eos_ids.first().copied().unwrap_or(0);
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let trie = TokTrie::from(&info, tokenizer.all_token_bytes());
        let env: TokEnv = Arc::new(VocabularyEnv { trie, tokenizer });
        Self::with_env(&env, vocab_size, limits)
    }

    fn with_env(env: &TokEnv, vocab_size: usize, limits: OutputLimits) -> Result<Self> {
        let factory = ParserFactory::new_simple(env).map_err(|e| {
            EngineError::Inference(format!("cannot build the constraint engine: {e}"))
        })?;
        Ok(Self {
            factory,
            vocab_size,
            limits,
            closers: Arc::new(Closers::from_trie(env.tok_trie())),
        })
    }

    /// A fresh constraint for one request, or `None` for free text.
    pub fn constraint(&self, shape: &OutputShape) -> Result<Option<Constraint>> {
        let Some(grammar) = shape.grammar(&self.limits) else {
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
            ahead: None,
            // Only a pure JSON output closes early: a tool call's wrapper and free text have
            // their own ends.
            closers: matches!(shape, OutputShape::Json(_)).then(|| self.closers.clone()),
            closing: false,
            lex: JsonLexState::default(),
        }))
    }
}

/// One request's parser state.
pub struct Constraint {
    matcher: Matcher,
    vocab_size: usize,
    /// The tokens allowed next, when `forced` computed them ahead of `mask`.
    ahead: Option<SimpleVob>,
    /// For JSON outputs: what ends a value soonest.
    closers: Option<Arc<Closers>>,
    /// The token budget is nearly spent: prefer what ends the value soonest.
    closing: bool,
    lex: JsonLexState,
}

impl Constraint {
    /// Sets every token the grammar forbids now to -inf.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let allowed = self.allowed()?;
        for (id, logit) in logits.iter_mut().enumerate() {
            if id >= self.vocab_size || !allowed.is_allowed(id as u32) {
                *logit = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// The one token the grammar allows next, when it allows exactly one: sampling could
    /// pick nothing else, so the model's logits for it are not needed. What it computed is
    /// kept for `mask`.
    pub fn forced(&mut self) -> Result<Option<u32>> {
        let allowed = self.allowed()?;
        let only = match allowed.num_set() {
            1 => allowed
                .first_bit_set()
                .filter(|&id| id < self.vocab_size)
                .map(|id| id as u32),
            _ => None,
        };
        self.ahead = Some(allowed);
        Ok(only)
    }

    /// Tells the constraint how many tokens the generation has left of `max_new`: within
    /// `closing_reserve(max_new)`, only tokens that close the value (or, where the grammar
    /// allows none, the shortest ones a required part needs) stay allowed, so strings,
    /// arrays and objects close within the budget whatever the model would rather write.
    pub fn set_budget(&mut self, left: usize, max_new: usize) {
        let closing = left <= closing_reserve(max_new);
        if closing != self.closing {
            self.closing = closing;
            self.ahead = None;
        }
    }

    fn allowed(&mut self) -> Result<SimpleVob> {
        if let Some(allowed) = self.ahead.take() {
            return Ok(allowed);
        }
        let mut allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(constraint_error)?;
        let Some(closers) = self.closers.as_ref().filter(|_| self.closing) else {
            return Ok(allowed);
        };
        let classes: &[Vec<u32>] = if self.lex.in_string {
            std::slice::from_ref(&closers.in_string)
        } else {
            &closers.outside
        };
        for class in classes {
            let usable: Vec<u32> = class
                .iter()
                .copied()
                .filter(|&id| allowed.is_allowed(id))
                .collect();
            if !usable.is_empty() {
                allowed.set_all(false);
                for id in usable {
                    allowed.allow_token(id);
                }
                break;
            }
        }
        Ok(allowed)
    }

    pub fn advance(&mut self, token: u32) -> Result<()> {
        self.ahead = None;
        if let Some(bytes) = self
            .closers
            .as_ref()
            .and_then(|c| c.bytes.get(token as usize))
        {
            self.lex.feed(bytes);
        }
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
mod tests;
