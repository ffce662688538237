//! Unit tests of the constrained decoding.
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
    let (text, complete) = write_until_spent(schema, "{\"title\":\"a\",\"steps\":[\"b\",\"", 80);
    assert!(complete, "{text}");
    assert!(closing_reserve(10) == 3 && closing_reserve(1000) == 24);
}

#[test]
fn named_tool_must_exist() {
    let err = OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Named("b".into())))
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
    let required = OutputShape::for_request(&request(tools.clone(), ToolChoice::Required)).unwrap();
    assert!(matches!(
        required,
        OutputShape::ToolCalls {
            max_calls: MAX_TOOL_CALLS,
            ..
        }
    ));
    let named =
        OutputShape::for_request(&request(tools.clone(), ToolChoice::Named("b".into()))).unwrap();
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
    let output =
        r#"<tool_call>{"name":"a","arguments":{"x":1}}</tool_call><tool_call>{"name":"a","argu"#;
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
    let auto =
        OutputShape::for_request(&request(vec![tool("a"), tool("b")], ToolChoice::Auto)).unwrap();
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
        OutputShape::for_request(&request(vec![tool("a")], ToolChoice::Named("a".into()))).unwrap();
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
