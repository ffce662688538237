//! Validates tool arguments against the tool's JSON schema (the subset Warden's tools use:
//! object properties, required, additionalProperties, type, enum, string length and
//! pattern-free formats, number ranges). Unknown fields are errors only where the schema
//! says `additionalProperties: false`.

use serde_json::Value;

/// Checks `value` against `schema`; the first problem, in words the model can act on.
pub fn validate(value: &Value, schema: &Value) -> Result<(), String> {
    check(value, schema, "arguments")
}

fn check(value: &Value, schema: &Value, at: &str) -> Result<(), String> {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            return Err(format!(
                "{at} must be one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let Some(kind) = schema.get("type").and_then(Value::as_str) {
        check_type(value, kind, at)?;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        return Err(format!("{at}.{name} is required"));
                    }
                }
            }
            let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
            for (name, field) in map {
                match properties.and_then(|p| p.get(name)) {
                    Some(field_schema) => check(field, field_schema, &format!("{at}.{name}"))?,
                    None if closed => return Err(format!("{at}.{name} is not a known field")),
                    None => {}
                }
            }
        }
        Value::String(text) => {
            let chars = text.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                if chars > max {
                    return Err(format!("{at} is longer than {max} characters"));
                }
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                if chars < min {
                    return Err(format!("{at} is shorter than {min} characters"));
                }
            }
        }
        Value::Number(number) => {
            let n = number.as_f64().unwrap_or(f64::NAN);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                if n < min {
                    return Err(format!("{at} must be at least {min}"));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                if n > max {
                    return Err(format!("{at} must be at most {max}"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_type(value: &Value, kind: &str, at: &str) -> Result<(), String> {
    let ok = match kind {
        "object" => value.is_object(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{at} must be of type {kind}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_types_required_ranges_and_closed_objects() {
        let schema = json!({"type": "object", "properties": {
            "query": {"type": "string", "maxLength": 5},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5},
            "mode": {"enum": ["a", "b"]}
        }, "required": ["query"], "additionalProperties": false});
        assert!(validate(&json!({"query": "abc", "limit": 2, "mode": "a"}), &schema).is_ok());
        for bad in [
            json!({}),
            json!({"query": 1}),
            json!({"query": "toolong"}),
            json!({"query": "a", "limit": 9}),
            json!({"query": "a", "limit": 1.5}),
            json!({"query": "a", "mode": "c"}),
            json!({"query": "a", "owner_id": 1}),
        ] {
            assert!(validate(&bad, &schema).is_err(), "{bad}");
        }
        let open = json!({"type": "object", "properties": {}});
        assert!(validate(&json!({"extra": true}), &open).is_ok());
    }
}
