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
mod tests {
    use llguidance::toktrie::ApproximateTokEnv;

    use super::super::schema_bounds::MAX_PROPERTY_NAME_CHARS;
    use super::*;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type":"object","properties":{"x":{"type":"integer"}},"required":["x"],"additionalProperties":false}),
        }
    }

    fn request(tools: Vec<ToolSpec>, tool_choice: ToolChoice) -> ChatRequest {
        ChatRequest {
            tools,
            tool_choice,
            ..ChatRequest::default()
        }
    }

    fn json_request(format: ResponseFormat) -> ChatRequest {
        ChatRequest {
            response_format: format,
            ..ChatRequest::default()
        }
    }

    /// A factory over a vocabulary of single bytes, so that tests feed text byte by byte.
    fn byte_factory(limits: OutputLimits) -> ConstraintFactory {
        let env = ApproximateTokEnv::single_byte_env();
        let vocab_size = env.tok_trie().vocab_size();
        ConstraintFactory::with_env(&env, vocab_size, limits).expect("the factory builds")
    }

    /// Whether the shape's grammar accepts `text` as a whole output.
    fn accepts(factory: &ConstraintFactory, shape: &OutputShape, text: &str) -> bool {
        let mut constraint = factory
            .constraint(shape)
            .expect("the grammar compiles")
            .expect("the shape is constrained");
        let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
        let matcher = &mut constraint.matcher;
        matcher.validate_tokens(&tokens).ok() == Some(tokens.len())
            && matcher.consume_tokens(&tokens).is_ok()
            && matcher.is_accepting().unwrap_or(false)
    }

    fn json_shape(schema: Value) -> OutputShape {
        OutputShape::Json(schema)
    }

    /// Runs a "model" that writes `x` whenever the grammar lets it (else the first token
    /// allowed) for at most `max_new` tokens after `prefix`; the output.
    fn write_until_spent(schema: Value, prefix: &str, max_new: usize) -> (String, bool) {
        let factory = byte_factory(OutputLimits::default());
        let mut constraint = factory.constraint(&json_shape(schema)).unwrap().unwrap();
        let mut text = prefix.to_owned();
        for byte in prefix.bytes() {
            constraint.advance(u32::from(byte)).unwrap();
        }
        for generated in prefix.len()..max_new {
            if constraint.matcher.is_accepting().unwrap_or(false) {
                break;
            }
            constraint.set_budget(max_new - generated, max_new);
            let allowed = constraint.allowed().unwrap();
            let pick = if allowed.is_allowed(u32::from(b'x')) {
                u32::from(b'x')
            } else {
                (0..256).find(|&id| allowed.is_allowed(id)).unwrap()
            };
            constraint.advance(pick).unwrap();
            text.push(char::from(pick as u8));
        }
        let complete = constraint.matcher.is_accepting().unwrap_or(false);
        (text, complete)
    }

    #[test]
    fn values_close_within_the_token_budget_however_long_the_model_would_write() {
        let schema = json!({"type": "object", "additionalProperties": false,
            "required": ["title", "steps", "count"],
            "properties": {"title": {"type": "string"},
                           "steps": {"type": "array", "items": {"type": "string"}},
                           "count": {"type": "integer"}}});
        // One byte per token here: the worst case for a reserve counted in tokens.
        for max_new in [80, 120] {
            let (text, complete) = write_until_spent(schema.clone(), "{\"title\":\"", max_new);
            assert!(complete, "{max_new}: {text}");
            let value: Value = serde_json::from_str(&text).unwrap();
            assert!(
                value["title"].as_str().unwrap().starts_with("xxx"),
                "{text}"
            );
            assert!(text.len() <= max_new, "{text}");
        }
        // Inside an array of strings, deep in the budget.
        let (text, complete) =
            write_until_spent(schema, "{\"title\":\"a\",\"steps\":[\"b\",\"", 80);
        assert!(complete, "{text}");
        assert!(closing_reserve(10) == 3 && closing_reserve(1000) == 24);
    }

    #[test]
    fn named_tool_must_exist() {
        let err =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Named("b".into())))
                .unwrap_err();
        assert!(err.to_string().contains("`b`"));
    }

    #[test]
    fn tool_choice_decides_the_shape_and_the_number_of_calls() {
        let tools = vec![tool("a"), tool("b")];
        let auto = OutputShape::for_request(&request(tools.clone(), ToolChoice::Auto)).unwrap();
        assert!(matches!(
            auto,
            OutputShape::TextOrToolCalls {
                max_calls: MAX_TOOL_CALLS,
                ..
            }
        ));
        let required =
            OutputShape::for_request(&request(tools.clone(), ToolChoice::Required)).unwrap();
        assert!(matches!(
            required,
            OutputShape::ToolCalls {
                max_calls: MAX_TOOL_CALLS,
                ..
            }
        ));
        let named =
            OutputShape::for_request(&request(tools.clone(), ToolChoice::Named("b".into())))
                .unwrap();
        assert!(matches!(named, OutputShape::ToolCalls { max_calls: 1, .. }));
        let mut single = request(tools, ToolChoice::Auto);
        single.single_tool_call = true;
        let single = OutputShape::for_request(&single).unwrap();
        assert!(matches!(
            single,
            OutputShape::TextOrToolCalls { max_calls: 1, .. }
        ));
    }

    #[test]
    fn several_tool_calls_are_parsed_in_order() {
        let required =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Required)).unwrap();
        let output = "<tool_call>{\"name\":\"a\",\"arguments\":{\"x\":1}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":{\"s\":\"</tool_call>\"}}</tool_call>";
        let calls = required.parse_tool_calls(output).unwrap();
        let found: Vec<(&str, &str)> = calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            found,
            vec![("a", r#"{"x":1}"#), ("b", r#"{"s":"</tool_call>"}"#)]
        );
        assert_ne!(calls[0].id, calls[1].id);
        assert!(required.parse_tool_calls("").is_err());
        assert!(required
            .parse_tool_calls("<tool_call>{\"name\":\"a\"")
            .is_err());
    }

    #[test]
    fn repeated_calls_end_the_answer_and_are_left_out() {
        let required =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Required)).unwrap();
        let first = r#"<tool_call>{"name":"a","arguments":{"x":1}}</tool_call>"#;
        let second = r#"<tool_call>{"name":"a","arguments":{"x":2}}</tool_call>"#;
        assert!(!required.ends_with_repeated_call(first));
        assert!(!required.ends_with_repeated_call(&format!("{first}{second}")));
        let repeated = format!("{first}\n{second}\n{first}");
        assert!(required.ends_with_repeated_call(&repeated));
        assert!(!required.ends_with_repeated_call(&format!("{repeated}\n<tool_call>{{")));
        let calls = required.parse_tool_calls(&repeated).unwrap();
        assert_eq!(calls.len(), 2);
        // Text never holds calls, whatever it looks like.
        let auto = OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Auto)).unwrap();
        assert!(!auto.ends_with_repeated_call(&format!("x{first}{first}")));
    }

    #[test]
    fn a_cut_off_output_keeps_its_complete_calls() {
        let required =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Required)).unwrap();
        let output = r#"<tool_call>{"name":"a","arguments":{"x":1}}</tool_call><tool_call>{"name":"a","argu"#;
        assert!(required.parse_tool_calls(output).is_err());
        let calls = required.complete_tool_calls(output);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, r#"{"x":1}"#);
        assert!(required.complete_tool_calls("<tool_call>{").is_empty());
    }

    #[test]
    fn auto_mode_reads_text_as_text() {
        let auto = OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Auto)).unwrap();
        assert_eq!(auto.parse_tool_calls("plain answer").unwrap(), vec![]);
        // Text may mention the tag; only an output that starts with it holds calls.
        assert_eq!(auto.parse_tool_calls("see <tool_call>").unwrap(), vec![]);
        let calls = auto
            .parse_tool_calls(r#"<tool_call>{"name":"a","arguments":{"x":2}}</tool_call>"#)
            .unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "a");
    }

    #[test]
    fn no_tools_and_text_format_means_free_text() {
        let shape = OutputShape::for_request(&request(vec![], ToolChoice::Auto)).unwrap();
        assert_eq!(shape, OutputShape::FreeText);
        let factory = byte_factory(OutputLimits::default());
        assert!(factory.constraint(&shape).unwrap().is_none());
    }

    #[test]
    fn auto_grammar_takes_text_or_several_valid_calls() {
        let factory = byte_factory(OutputLimits::default());
        let auto = OutputShape::for_request(&request(vec![tool("a"), tool("b")], ToolChoice::Auto))
            .unwrap();
        let one = r#"<tool_call>{"name":"a","arguments":{"x":1}}</tool_call>"#;
        let two =
            format!("{one}\n<tool_call>{{\"name\":\"b\",\"arguments\":{{\"x\":-3}}}}</tool_call>");
        assert!(accepts(&factory, &auto, "It is sunny."));
        assert!(accepts(&factory, &auto, one));
        assert!(accepts(&factory, &auto, &two));
        // Arguments must validate, names must be offered, text cannot start with `<`.
        assert!(!accepts(
            &factory,
            &auto,
            r#"<tool_call>{"name":"a","arguments":{"x":"1"}}</tool_call>"#
        ));
        assert!(!accepts(
            &factory,
            &auto,
            r#"<tool_call>{"name":"c","arguments":{"x":1}}</tool_call>"#
        ));
        assert!(!accepts(&factory, &auto, "<b>bold</b>"));
    }

    #[test]
    fn required_grammar_needs_a_call_and_caps_their_number() {
        let factory = byte_factory(OutputLimits::default());
        let required =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Required)).unwrap();
        let call = r#"<tool_call>{"name":"a","arguments":{"x":1}}</tool_call>"#;
        assert!(!accepts(&factory, &required, "Sure."));
        assert!(accepts(&factory, &required, call));
        assert!(accepts(&factory, &required, &call.repeat(MAX_TOOL_CALLS)));
        assert!(!accepts(
            &factory,
            &required,
            &call.repeat(MAX_TOOL_CALLS + 1)
        ));
        let named =
            OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Named("a".into())))
                .unwrap();
        assert!(accepts(&factory, &named, call));
        assert!(!accepts(&factory, &named, &call.repeat(2)));
    }

    #[test]
    fn numbers_are_bounded_to_what_a_float64_holds() {
        let factory = byte_factory(OutputLimits::default());
        let shape = json_shape(
            json!({"type":"object","properties":{"n":{"type":"number"},"i":{"type":"integer"}},"required":["n","i"],"additionalProperties":false}),
        );
        let accepts_values =
            |n: &str, i: &str| accepts(&factory, &shape, &format!("{{\"n\":{n},\"i\":{i}}}"));
        assert!(accepts_values("0.5", "7"));
        assert!(accepts_values(
            "-123456789012345.123456",
            "-9007199254740991"
        ));
        assert!(accepts_values("0.999999", "9007199254740991"));
        assert!(!accepts_values("0.9999999", "1"), "seven decimals");
        assert!(
            !accepts_values("1234567890123456", "1"),
            "sixteen integer digits"
        );
        assert!(!accepts_values("1e5", "1"), "exponent");
        assert!(!accepts_values("1", "9007199254740992"), "past 2^53 - 1");
    }

    #[test]
    fn strings_without_max_length_get_the_configured_cap() {
        let limits = OutputLimits {
            max_string_chars: 5,
            ..OutputLimits::default()
        };
        let factory = byte_factory(limits.clone());
        let schema = json!({"type":"object","properties":{"s":{"type":"string"},"e":{"type":"string","format":"email"}},"required":["s"],"additionalProperties":false});
        assert_eq!(
            bounded_schema(&schema, &limits)["properties"]["s"],
            json!({"type":"string","maxLength":5})
        );
        let shape = json_shape(schema);
        assert!(accepts(&factory, &shape, r#"{"s":"abcde"}"#));
        assert!(!accepts(&factory, &shape, r#"{"s":"abcdef"}"#));
        assert!(accepts(&factory, &shape, r#"{"s":"","e":"a@b.c"}"#));
        assert!(!accepts(&factory, &shape, r#"{"s":"","e":"ab@cd.ef"}"#));
    }

    #[test]
    fn free_values_are_bounded_all_the_way_down() {
        let limits = OutputLimits {
            max_string_chars: 4,
            max_fraction_digits: 2,
            max_items: 3,
        };
        let factory = byte_factory(limits);
        let object = OutputShape::for_request(&json_request(ResponseFormat::JsonObject)).unwrap();
        assert!(accepts(
            &factory,
            &object,
            r#"{"city":"Lyon","n":[1.25,{"a":null}],"ok":true}"#
        ));
        assert!(
            !accepts(&factory, &object, r#"{"city":"Paris"}"#),
            "long string"
        );
        assert!(
            !accepts(&factory, &object, r#"{"n":[[[0.125]]]}"#),
            "three decimals"
        );
        assert!(
            !accepts(&factory, &object, r#"{"n":[1,2,3,4]}"#),
            "four items"
        );
        assert!(
            !accepts(&factory, &object, r#"{"a":1,"b":2,"c":3,"d":4}"#),
            "four properties"
        );
        let long_name = format!("{{\"{}\":1}}", "k".repeat(MAX_PROPERTY_NAME_CHARS + 1));
        assert!(
            !accepts(&factory, &object, &long_name),
            "long property name"
        );
        // A listed property keeps its own schema beside the free ones.
        let mixed = json_shape(
            json!({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}),
        );
        assert!(accepts(&factory, &mixed, r#"{"id":12345678,"note":"hi"}"#));
        assert!(!accepts(&factory, &mixed, r#"{"id":1,"id2":"toolong"}"#));
        let anything = json_shape(json!({}));
        assert!(accepts(&factory, &anything, "[true,\"abc\"]"));
        assert!(!accepts(&factory, &anything, "\"abcde\""));
    }

    #[test]
    fn schemas_with_combinators_and_references_still_compile() {
        let factory = byte_factory(OutputLimits::default());
        let schema = json!({
            "$defs": {"point": {"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/point"},
                "kind": {"anyOf": [{"type":"string"}, {"type":"null"}]},
                "both": {"allOf": [{"type":"object","properties":{"a":{"type":"integer"}}}, {"required":["a"]}]},
                "tags": {"type":"array","items":{"type":"string"},"minItems":1},
                "extra": true,
            },
            "required": ["at"],
            "additionalProperties": false,
        });
        let shape = json_shape(schema);
        assert!(accepts(
            &factory,
            &shape,
            r#"{"at":{"x":1.5,"y":-2},"kind":null,"both":{"a":3},"tags":["x"],"extra":[1]}"#
        ));
        assert!(!accepts(
            &factory,
            &shape,
            r#"{"at":{"x":0.12345678,"y":0}}"#
        ));
    }

    #[test]
    fn bounding_keeps_valid_outputs_valid() {
        // The bound schema only narrows: a few reference values of each kind still pass.
        let factory = byte_factory(OutputLimits::default());
        for (schema, value) in [
            (json!({"type":["number","null"]}), "null"),
            (json!({"type":["number","null"]}), "3.141593"),
            (
                json!({"type":"array","prefixItems":[{"type":"integer"}]}),
                "[1,\"a\"]",
            ),
            (
                json!({"type":"object","additionalProperties":{"type":"integer"}}),
                r#"{"k":1}"#,
            ),
            (
                json!({"type":"object","minProperties":1,"properties":{"a":{"type":"string"}},"required":["a"]}),
                r#"{"a":"b"}"#,
            ),
        ] {
            assert!(
                accepts(&factory, &json_shape(schema.clone()), value),
                "{schema} {value}"
            );
        }
    }
}
