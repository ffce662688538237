//! Tool calls in a model's output: `<tool_call>{"name":…,"arguments":…}</tool_call>`, one or
//! several. The Lark grammar that lets a model write only such calls (optionally as an
//! alternative to free text), the JSON schema of one call over the offered tools, and
//! reading the calls back out of a finished or cut-off output.

use serde_json::{json, Value};

use super::{bounded_schema, with_compact_options, OutputLimits};
use crate::engine::error::EngineError;
use crate::engine::types::{ToolCall, ToolSpec};

/// The opening and closing markers of a tool call.
pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// Most tool calls one answer may hold.
pub const MAX_TOOL_CALLS: usize = 8;

/// The calls read from an output, in order and without repeats.
#[derive(Default)]
pub(super) struct CallScan {
    pub calls: Vec<ToolCall>,
    /// Some call repeated an earlier one.
    pub repeated: bool,
    /// Why the output is not a clean sequence of calls (after `calls`).
    pub problem: Option<String>,
}

/// `<tool_call>JSON</tool_call>`, repeated, with optional whitespace between calls.
pub(super) fn scan_calls(output: &str) -> CallScan {
    let mut scan = CallScan::default();
    let mut rest = output.trim();
    while !rest.is_empty() {
        match next_call(rest) {
            Ok((value, after)) => {
                let call = tool_call(&value);
                let seen = scan
                    .calls
                    .iter()
                    .any(|c| c.name == call.name && c.arguments == call.arguments);
                if seen {
                    scan.repeated = true;
                } else {
                    scan.calls.push(call);
                }
                rest = after.trim_start();
            }
            Err(reason) => {
                scan.problem = Some(reason);
                return scan;
            }
        }
    }
    if scan.calls.is_empty() {
        scan.problem = Some("no tool call in the output".into());
    }
    scan
}

/// The JSON of the call `text` starts with, and the text after its closing tag.
fn next_call(text: &str) -> std::result::Result<(Value, &str), String> {
    let body = text
        .strip_prefix(TOOL_CALL_OPEN)
        .ok_or_else(|| format!("expected {TOOL_CALL_OPEN}"))?;
    let mut values = serde_json::Deserializer::from_str(body).into_iter::<Value>();
    let value = match values.next() {
        Some(Ok(value)) => value,
        Some(Err(err)) => return Err(err.to_string()),
        None => return Err("no JSON after the opening tag".into()),
    };
    let after = body.get(values.byte_offset()..).unwrap_or_default();
    let rest = after
        .trim_start()
        .strip_prefix(TOOL_CALL_CLOSE)
        .ok_or_else(|| format!("expected {TOOL_CALL_CLOSE}"))?;
    Ok((value, rest))
}

pub(super) fn malformed_call(reason: String) -> EngineError {
    EngineError::Inference(format!("constrained tool call did not parse: {reason}"))
}

fn tool_call(value: &Value) -> ToolCall {
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let arguments = value.get("arguments").cloned().unwrap_or_else(|| json!({}));
    ToolCall {
        id: new_call_id(),
        name,
        arguments: arguments.to_string(),
    }
}

/// The Lark grammar of one or more tool calls, optionally as an alternative to free text
/// (which then may not start with `<`, so that the first character decides).
pub(super) fn tool_calls_lark(
    schema: &Value,
    limits: &OutputLimits,
    max_calls: usize,
    or_text: bool,
) -> String {
    let schema = with_compact_options(bounded_schema(schema, limits));
    let start = if or_text { "TEXT | calls" } else { "calls" };
    let calls = match max_calls {
        0 | 1 => "call".to_string(),
        n => format!("call (SEP? call){{0,{}}}", n - 1),
    };
    format!(
        "start: {start}\ncalls: {calls}\ncall: \"{TOOL_CALL_OPEN}\" call_json \"{TOOL_CALL_CLOSE}\"\ncall_json: %json {schema}\nSEP: /[ \\n]{{1,2}}/\nTEXT: /[^<][\\s\\S]*/\n"
    )
}

/// `{"name": <tool>, "arguments": <its parameters>}` for any of `tools`.
pub(super) fn tool_call_schema(tools: &[&ToolSpec]) -> Value {
    let options: Vec<Value> = tools
        .iter()
        .map(|tool| {
            let mut parameters = if tool.parameters.is_object() {
                tool.parameters.clone()
            } else {
                json!({"type": "object"})
            };
            // Arguments are always a JSON object, even when the schema forgets to say so.
            if let Some(map) = parameters.as_object_mut() {
                map.entry("type").or_insert_with(|| json!("object"));
            }
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
