//! The diagnostic tools' arguments: one table of parameters drives both the JSON Schema a
//! model sees and the validation of what it sends, so the two cannot drift. Validation is
//! strict (a closed object, typed and bounded values, RFC 3339 times) and its errors say
//! what to change.

use serde_json::{json, Map, Value};

use crate::timefmt::parse_rfc3339;

/// `limit` when the arguments name none.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest `limit`.
pub const MAX_LIMIT: usize = 200;
/// Longest RFC 3339 time accepted.
const MAX_TIME_CHARS: usize = 40;
/// Longest argument name or value echoed back in an error message.
const MAX_ECHO_CHARS: usize = 64;

/// One argument a tool accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameter {
    pub name: &'static str,
    pub description: &'static str,
    pub kind: Kind,
    /// How a record passes this filter.
    pub test: Test,
}

/// The type and bounds of an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A non-empty string of at most `max_chars` characters.
    Text {
        max_chars: usize,
    },
    /// One of a closed list of strings.
    Choice(&'static [&'static str]),
    /// An RFC 3339 time.
    Time,
    Integer {
        min: i64,
        max: i64,
    },
    /// A list of integers, each in `min..=max`, at most `max_items` long.
    IntegerList {
        max_items: usize,
        min: i64,
        max: i64,
    },
}

/// How an argument selects records; `field` names the record's field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `start`, `end` and `limit`: handled by the tool itself.
    Range,
    /// The field equals the argument.
    Equals(&'static str),
    /// The field equals the argument, ignoring case.
    EqualsIgnoringCase(&'static str),
    /// The field contains the argument, ignoring case.
    Contains(&'static str),
    /// The field (an integer) is one of the argument's.
    OneOf(&'static str),
    /// The field (a number) is at least the argument.
    AtLeast(&'static str),
    /// The field equals the argument, or it is a URL whose `host:port` equals it.
    Upstream(&'static str),
}

/// A validated argument value.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgValue {
    Text(String),
    Time(i64),
    Integer(i64),
    IntegerList(Vec<i64>),
}

/// The validated arguments of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub limit: usize,
    /// The filters given, each with its test.
    pub filters: Vec<(Test, ArgValue)>,
}

/// `start`, `end` and `limit`, accepted by every tool.
pub const COMMON: [Parameter; 3] = [
    Parameter {
        name: "start",
        description: "Only records at or after this RFC 3339 time, e.g. 2026-03-14T09:00:00Z (absent: no lower bound).",
        kind: Kind::Time,
        test: Test::Range,
    },
    Parameter {
        name: "end",
        description: "Only records at or before this RFC 3339 time (absent: no upper bound).",
        kind: Kind::Time,
        test: Test::Range,
    },
    Parameter {
        name: "limit",
        description: "Most items returned (1 to 200, default 50); when more match, the most recent are kept.",
        kind: Kind::Integer { min: 1, max: MAX_LIMIT as i64 },
        test: Test::Range,
    },
];

/// The JSON Schema of a tool taking `COMMON` and `own` parameters.
pub fn schema(own: &[Parameter]) -> Value {
    let properties: Map<String, Value> = COMMON
        .iter()
        .chain(own)
        .map(|parameter| (parameter.name.to_owned(), property_schema(parameter)))
        .collect();
    json!({"type": "object", "properties": properties, "additionalProperties": false})
}

fn property_schema(parameter: &Parameter) -> Value {
    let description = parameter.description;
    match parameter.kind {
        Kind::Text { max_chars } => json!({
            "type": "string", "minLength": 1, "maxLength": max_chars, "description": description
        }),
        Kind::Choice(options) => json!({
            "type": "string", "enum": options,
            "maxLength": options.iter().map(|o| o.chars().count()).max().unwrap_or(0),
            "description": description
        }),
        Kind::Time => json!({
            "type": "string", "format": "date-time", "maxLength": MAX_TIME_CHARS,
            "description": description
        }),
        Kind::Integer { min, max } if parameter.name == "limit" => json!({
            "type": "integer", "minimum": min, "maximum": max, "default": DEFAULT_LIMIT,
            "description": description
        }),
        Kind::Integer { min, max } => json!({
            "type": "integer", "minimum": min, "maximum": max, "description": description
        }),
        Kind::IntegerList {
            max_items,
            min,
            max,
        } => json!({
            "type": "array", "items": {"type": "integer", "minimum": min, "maximum": max},
            "minItems": 1, "maxItems": max_items, "description": description
        }),
    }
}

/// Checks `args` against `COMMON` and `own`; the first problem, in words a model can act on.
pub fn validate(tool: &str, own: &[Parameter], args: &Value) -> Result<Arguments, String> {
    let object = args
        .as_object()
        .ok_or_else(|| format!("arguments of {tool} must be a JSON object"))?;
    let mut arguments = Arguments {
        start: None,
        end: None,
        limit: DEFAULT_LIMIT,
        filters: Vec::new(),
    };
    for (name, value) in object {
        let parameter = COMMON
            .iter()
            .chain(own)
            .find(|parameter| parameter.name == name)
            .ok_or_else(|| {
                let known: Vec<_> = COMMON.iter().chain(own).map(|p| p.name).collect();
                format!(
                    "unknown argument `{}` for {tool} (it accepts: {})",
                    echo(name),
                    known.join(", ")
                )
            })?;
        let value = check_value(parameter, value)?;
        match (parameter.name, value) {
            ("start", ArgValue::Time(seconds)) => arguments.start = Some(seconds),
            ("end", ArgValue::Time(seconds)) => arguments.end = Some(seconds),
            ("limit", ArgValue::Integer(limit)) => {
                arguments.limit = usize::try_from(limit).unwrap_or(DEFAULT_LIMIT)
            }
            (_, value) => arguments.filters.push((parameter.test, value)),
        }
    }
    if let (Some(start), Some(end)) = (arguments.start, arguments.end) {
        if start > end {
            return Err("`start` is after `end`".to_owned());
        }
    }
    Ok(arguments)
}

fn check_value(parameter: &Parameter, value: &Value) -> Result<ArgValue, String> {
    let name = parameter.name;
    match parameter.kind {
        Kind::Text { max_chars } => {
            let text = value
                .as_str()
                .ok_or_else(|| format!("`{name}` must be a string, not {}", type_name(value)))?;
            if text.is_empty() {
                return Err(format!("`{name}` must not be empty (leave it out instead)"));
            }
            if text.chars().count() > max_chars {
                return Err(format!("`{name}` is longer than {max_chars} characters"));
            }
            Ok(ArgValue::Text(text.to_owned()))
        }
        Kind::Choice(options) => {
            let text = value
                .as_str()
                .ok_or_else(|| format!("`{name}` must be a string, not {}", type_name(value)))?;
            if !options.contains(&text) {
                return Err(format!(
                    "`{name}` must be one of {}, not {:?}",
                    options.join(", "),
                    echo(text)
                ));
            }
            Ok(ArgValue::Text(text.to_owned()))
        }
        Kind::Time => {
            let text = value.as_str().ok_or_else(|| {
                format!(
                    "`{name}` must be an RFC 3339 time string, not {}",
                    type_name(value)
                )
            })?;
            let seconds = (text.chars().count() <= MAX_TIME_CHARS)
                .then(|| parse_rfc3339(text))
                .flatten()
                .ok_or_else(|| {
                    format!(
                        "`{name}` is not an RFC 3339 time (like 2026-03-14T09:00:00Z): {:?}",
                        echo(text)
                    )
                })?;
            Ok(ArgValue::Time(seconds))
        }
        Kind::Integer { min, max } => Ok(ArgValue::Integer(integer(name, value, min, max)?)),
        Kind::IntegerList {
            max_items,
            min,
            max,
        } => {
            let items = value.as_array().ok_or_else(|| {
                format!(
                    "`{name}` must be a list of integers, not {}",
                    type_name(value)
                )
            })?;
            if items.is_empty() || items.len() > max_items {
                return Err(format!("`{name}` must hold 1 to {max_items} integers"));
            }
            let numbers = items
                .iter()
                .map(|item| integer(name, item, min, max))
                .collect::<Result<_, _>>()?;
            Ok(ArgValue::IntegerList(numbers))
        }
    }
}

/// An integer in `min..=max`.
fn integer(name: &str, value: &Value, min: i64, max: i64) -> Result<i64, String> {
    let out_of_range = || format!("`{name}` must be between {min} and {max}, not {value}");
    match value {
        Value::Number(number) if number.is_i64() || number.is_u64() => {
            let n = number.as_i64().ok_or_else(out_of_range)?;
            if (min..=max).contains(&n) {
                Ok(n)
            } else {
                Err(out_of_range())
            }
        }
        other => Err(format!(
            "`{name}` must be an integer, not {}",
            type_name(other)
        )),
    }
}

fn type_name(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Number(number) => format!("the number {number}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Untrusted text cut short enough to quote in an error.
fn echo(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: [Parameter; 3] = [
        Parameter {
            name: "service",
            description: "",
            kind: Kind::Text { max_chars: 8 },
            test: Test::Equals("service"),
        },
        Parameter {
            name: "kind",
            description: "",
            kind: Kind::Choice(&["deploy", "config"]),
            test: Test::Equals("kind"),
        },
        Parameter {
            name: "pids",
            description: "",
            kind: Kind::IntegerList {
                max_items: 2,
                min: 1,
                max: 100,
            },
            test: Test::OneOf("pid"),
        },
    ];

    fn error(args: Value) -> String {
        validate("t", &OWN, &args).unwrap_err()
    }

    #[test]
    fn good_arguments_are_typed() {
        let args = validate(
            "t",
            &OWN,
            &json!({"start": "2026-03-14T09:00:00Z", "end": "2026-03-14T10:00:00.5+01:00",
                    "limit": 200, "service": "orders", "kind": "deploy", "pids": [7, 9]}),
        )
        .unwrap();
        assert_eq!(args.start, parse_rfc3339("2026-03-14T09:00:00Z"));
        assert_eq!(args.end, args.start);
        assert_eq!(args.limit, 200);
        assert_eq!(args.filters.len(), 3);
        assert!(args
            .filters
            .contains(&(Test::OneOf("pid"), ArgValue::IntegerList(vec![7, 9]))));
        let empty = validate("t", &OWN, &json!({})).unwrap();
        assert_eq!(
            (empty.start, empty.end, empty.limit),
            (None, None, DEFAULT_LIMIT)
        );
    }

    #[test]
    fn bad_arguments_say_what_to_change() {
        for (args, expected) in [
            (json!(null), "arguments of t must be a JSON object"),
            (json!([1]), "must be a JSON object"),
            (json!({"owner": 1}), "unknown argument `owner` for t (it accepts: start, end, limit, service, kind, pids)"),
            (json!({"limit": 0}), "`limit` must be between 1 and 200, not 0"),
            (json!({"limit": 201}), "`limit` must be between 1 and 200"),
            (json!({"limit": -5}), "`limit` must be between 1 and 200"),
            (json!({"limit": 18446744073709551615u64}), "`limit` must be between 1 and 200"),
            (json!({"limit": 5.0}), "`limit` must be an integer, not the number 5.0"),
            (json!({"limit": "5"}), "`limit` must be an integer, not a string"),
            (json!({"start": "yesterday"}), "`start` is not an RFC 3339 time"),
            (json!({"start": 1_700_000_000}), "`start` must be an RFC 3339 time string"),
            (json!({"end": "2026-03-14T09:00:00"}), "`end` is not an RFC 3339 time"),
            (json!({"start": "2026-03-14T10:00:00Z", "end": "2026-03-14T09:00:00Z"}), "`start` is after `end`"),
            (json!({"service": 3}), "`service` must be a string, not the number 3"),
            (json!({"service": ""}), "`service` must not be empty"),
            (json!({"service": "服务服务服务服务服"}), "`service` is longer than 8 characters"),
            (json!({"kind": "rollback"}), "`kind` must be one of deploy, config, not \"rollback\""),
            (json!({"pids": 7}), "`pids` must be a list of integers, not the number 7"),
            (json!({"pids": []}), "`pids` must hold 1 to 2 integers"),
            (json!({"pids": [1, 2, 3]}), "`pids` must hold 1 to 2 integers"),
            (json!({"pids": [1, "2"]}), "`pids` must be an integer, not a string"),
            (json!({"pids": [0]}), "`pids` must be between 1 and 100"),
        ] {
            let message = error(args.clone());
            assert!(message.contains(expected), "{args}: {message}");
        }
        let long_name = "x".repeat(500);
        let mut object = Map::new();
        object.insert(long_name, json!(1));
        let message = error(Value::Object(object));
        assert!(message.chars().count() < 200, "{message}");
    }

    #[test]
    fn every_property_of_the_schema_is_bounded() {
        let schema = schema(&OWN);
        assert_eq!(schema["additionalProperties"], false);
        let properties = schema["properties"].as_object().unwrap();
        assert_eq!(properties.len(), 6);
        for (name, property) in properties {
            let bounded = match property["type"].as_str().unwrap() {
                "string" => property["maxLength"].is_u64(),
                "integer" => property["minimum"].is_i64() && property["maximum"].is_i64(),
                "array" => property["maxItems"].is_u64() && property["items"]["maximum"].is_i64(),
                other => panic!("{name}: {other}"),
            };
            assert!(bounded, "{name}: {property}");
        }
        assert_eq!(properties["limit"]["default"], 50);
        assert_eq!(properties["kind"]["maxLength"], 6);
    }
}
