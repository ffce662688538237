//! Bounds on constrained output: rewrites a JSON schema so that every value it leaves open
//! (numbers, strings, arrays, free-form objects and "any" values) has a finite size, so a
//! looping model cannot run one value past its token budget. Pure functions of JSON.

use serde_json::{json, Map, Value};

/// Largest integer a float64 holds exactly (2^53 − 1): the bound of `integer` values.
pub(super) const INTEGER_LIMIT: i64 = 9_007_199_254_740_991;
/// Bound of `number` values: 15 integer digits, all of which a float64 holds exactly.
const NUMBER_LIMIT: f64 = 1e15;
/// Most fraction digits [`OutputLimits::max_fraction_digits`] may allow (llguidance's
/// `multipleOf` is exact up to 10^-9).
pub const MAX_FRACTION_DIGITS: u32 = 9;
/// Longest property name of a free-form object, in characters.
pub(super) const MAX_PROPERTY_NAME_CHARS: usize = 64;
/// The `$defs` entry of the bounded "any JSON value" schema.
const BOUNDED_ANY: &str = "warden_bounded_any";

/// What the engine bounds when a schema leaves it open.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputLimits {
    /// Longest string, in characters, where a schema gives no `maxLength`.
    pub max_string_chars: usize,
    /// Digits after the decimal point of a `number` without `multipleOf` (at most
    /// [`MAX_FRACTION_DIGITS`]).
    pub max_fraction_digits: u32,
    /// Most items of an array without `maxItems`, and most properties of a free-form object.
    pub max_items: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_string_chars: 512,
            max_fraction_digits: 6,
            max_items: 64,
        }
    }
}

/// `schema` with every value it leaves unbounded given a bound, so that a constrained
/// output always ends: `integer`s within ±(2^53 − 1), `number`s below 10^15 in magnitude
/// with at most `limits.max_fraction_digits` decimals and no exponent, strings without
/// `maxLength` to `limits.max_string_chars`, arrays without `maxItems` to
/// `limits.max_items`, and values the schema leaves free (`{}`, `true`, missing `items`
/// or `additionalProperties`) to a bounded "any JSON" schema under `$defs`. Bounds the
/// schema already sets are kept when tighter; `enum`, `const` and `$ref` are left alone.
/// Every value that validates against the result validates against `schema`.
pub fn bounded_schema(schema: &Value, limits: &OutputLimits) -> Value {
    let mut bounder = SchemaBounder {
        limits,
        uses_any: false,
    };
    let mut bounded = bounder.bound(schema, false);
    if bounder.uses_any {
        if let Some(root) = bounded.as_object_mut() {
            let defs = root.entry("$defs").or_insert_with(|| json!({}));
            if let Some(defs) = defs.as_object_mut() {
                defs.insert(BOUNDED_ANY.into(), bounded_any(limits));
            }
        }
    }
    bounded
}

/// Keywords that only annotate a schema (or carry definitions): a schema made of these
/// alone accepts any value.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "contentMediaType",
    "contentEncoding",
    "x-guidance",
];

struct SchemaBounder<'a> {
    limits: &'a OutputLimits,
    /// Whether the bounded "any" definition must be added to the root.
    uses_any: bool,
}

impl SchemaBounder<'_> {
    /// `in_all_of`: the schema is one branch of an `allOf`, where a default filled in for
    /// a missing `items` or `additionalProperties` would constrain the other branches.
    fn bound(&mut self, schema: &Value, in_all_of: bool) -> Value {
        match schema {
            Value::Bool(true) if !in_all_of => self.any_ref(),
            Value::Object(map) => Value::Object(self.bound_object(map, in_all_of)),
            other => other.clone(),
        }
    }

    fn any_ref(&mut self) -> Value {
        self.uses_any = true;
        json!({"$ref": any_reference()})
    }

    fn bound_object(&mut self, map: &Map<String, Value>, in_all_of: bool) -> Map<String, Value> {
        let mut map = map.clone();
        self.bound_children(&mut map, in_all_of);
        if ["enum", "const", "$ref"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            return map;
        }
        let unconstrained = map.keys().all(|k| ANNOTATIONS.contains(&k.as_str()));
        if unconstrained {
            if !in_all_of {
                self.uses_any = true;
                map.insert("$ref".into(), json!(any_reference()));
            }
            return map;
        }
        let types = schema_types(&map);
        // With `anyOf`/`oneOf`/`allOf` the branches carry (and are given) the bounds; here
        // only value bounds that intersect cleanly are added, and only under a `type`.
        let combined = ["anyOf", "oneOf", "allOf"]
            .iter()
            .any(|k| map.contains_key(*k));
        if combined && types.is_none() {
            return map;
        }
        let allows = |t: &str| types.as_ref().is_none_or(|set| set.iter().any(|s| s == t));
        if allows("string") {
            self.bound_string(&mut map);
        }
        if allows("number") {
            self.bound_number(&mut map, false);
        } else if allows("integer") {
            self.bound_number(&mut map, true);
        }
        if allows("array") {
            self.bound_array(&mut map, in_all_of || combined);
        }
        if allows("object") && !in_all_of && !combined {
            self.bound_free_properties(&mut map);
        }
        map
    }

    /// Bounds the subschemas of every applicator keyword.
    fn bound_children(&mut self, map: &mut Map<String, Value>, in_all_of: bool) {
        for (key, value) in map.iter_mut() {
            match key.as_str() {
                "properties" | "patternProperties" | "$defs" | "definitions" => {
                    if let Value::Object(children) = value {
                        for child in children.values_mut() {
                            *child = self.bound(child, false);
                        }
                    }
                }
                "additionalProperties" | "additionalItems" => *value = self.bound(value, false),
                "items" => match value {
                    Value::Array(items) => {
                        for item in items.iter_mut() {
                            *item = self.bound(item, false);
                        }
                    }
                    _ => *value = self.bound(value, false),
                },
                "prefixItems" | "anyOf" | "oneOf" | "allOf" => {
                    let branch_in_all_of = key == "allOf" || in_all_of;
                    if let Value::Array(branches) = value {
                        for branch in branches.iter_mut() {
                            *branch = self.bound(branch, branch_in_all_of && key != "prefixItems");
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn bound_string(&self, map: &mut Map<String, Value>) {
        // A pattern is the schema's own bound (llguidance cannot intersect a pattern with a
        // length limit); enums and consts are bounded already.
        if ["maxLength", "pattern", "enum", "const"]
            .iter()
            .any(|k| map.contains_key(*k))
        {
            return;
        }
        let min = map.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        let cap = (self.limits.max_string_chars as u64).max(min);
        map.insert("maxLength".into(), json!(cap));
    }

    /// Clamps the range to what a float64 holds and, for numbers, limits the decimals.
    fn bound_number(&self, map: &mut Map<String, Value>, integer: bool) {
        let (low, high) = if integer {
            (-(INTEGER_LIMIT as f64), INTEGER_LIMIT as f64)
        } else {
            (-NUMBER_LIMIT, NUMBER_LIMIT)
        };
        let lower = map.get("minimum").or_else(|| map.get("exclusiveMinimum"));
        let upper = map.get("maximum").or_else(|| map.get("exclusiveMaximum"));
        let lower = lower.and_then(Value::as_f64);
        let upper = upper.and_then(Value::as_f64);
        // A range wholly outside the float64 one is the schema's business: leave it.
        if lower.is_some_and(|l| l > high) || upper.is_some_and(|u| u < low) {
            return;
        }
        if lower.is_none_or(|l| l < low) {
            map.insert("minimum".into(), bound_value(low, integer));
        }
        if upper.is_none_or(|u| u > high) {
            map.insert("maximum".into(), bound_value(high, integer));
        }
        if !integer && !map.contains_key("multipleOf") {
            map.insert(
                "multipleOf".into(),
                fraction_step(self.limits.max_fraction_digits),
            );
        }
    }

    fn bound_array(&mut self, map: &mut Map<String, Value>, in_all_of: bool) {
        if !in_all_of {
            if matches!(map.get("items"), Some(Value::Array(_))) {
                if !map.contains_key("additionalItems") {
                    let any = self.any_ref();
                    map.insert("additionalItems".into(), any);
                }
            } else if !map.contains_key("items") {
                let any = self.any_ref();
                map.insert("items".into(), any);
            }
        }
        if !map.contains_key("maxItems") {
            let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let cap = (self.limits.max_items as u64).max(min);
            map.insert("maxItems".into(), json!(cap));
        }
    }

    /// Properties beyond the listed ones get bounded names and bounded values.
    fn bound_free_properties(&mut self, map: &mut Map<String, Value>) {
        // A schema that counts or patterns its properties keeps its own rules for them.
        let counted = map.contains_key("minProperties") || map.contains_key("maxProperties");
        if counted || map.contains_key("patternProperties") {
            if !map.contains_key("additionalProperties") {
                let any = self.any_ref();
                map.insert("additionalProperties".into(), any);
            }
            return;
        }
        let value = match map.get("additionalProperties") {
            None => self.any_ref(),
            Some(Value::Bool(false)) => return,
            Some(schema) => schema.clone(),
        };
        map.insert(
            "patternProperties".into(),
            json!({ property_name_pattern(): value }),
        );
        map.insert("additionalProperties".into(), json!(false));
        // llguidance counts properties only when every listed one is required.
        let listed: Vec<&str> = map
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if listed.iter().all(|name| required.contains(name)) {
            let named = listed.len() + required.iter().filter(|n| !listed.contains(n)).count();
            map.insert("maxProperties".into(), json!(named + self.limits.max_items));
        }
    }
}

/// The schema's `type` as a list, or `None` when it names none.
fn schema_types(map: &Map<String, Value>) -> Option<Vec<String>> {
    match map.get("type")? {
        Value::String(t) => Some(vec![t.clone()]),
        Value::Array(ts) => Some(
            ts.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

fn bound_value(limit: f64, integer: bool) -> Value {
    if integer {
        json!(limit as i64)
    } else {
        json!(limit)
    }
}

/// 10^-digits, parsed from its decimal form so that it is the float nearest to it.
fn fraction_step(digits: u32) -> Value {
    let digits = digits.min(MAX_FRACTION_DIGITS);
    let step: f64 = format!("1e-{digits}").parse().unwrap_or(1.0);
    json!(step)
}

fn any_reference() -> String {
    format!("#/$defs/{BOUNDED_ANY}")
}

fn property_name_pattern() -> String {
    format!("^.{{1,{MAX_PROPERTY_NAME_CHARS}}}$")
}

/// Any JSON value, every part of it bounded.
fn bounded_any(limits: &OutputLimits) -> Value {
    let any = json!({"$ref": any_reference()});
    json!({"anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {
            "type": "number",
            "minimum": -NUMBER_LIMIT,
            "maximum": NUMBER_LIMIT,
            "multipleOf": fraction_step(limits.max_fraction_digits),
        },
        {"type": "string", "maxLength": limits.max_string_chars},
        {"type": "array", "items": any, "maxItems": limits.max_items},
        {
            "type": "object",
            "patternProperties": {property_name_pattern(): any},
            "additionalProperties": false,
            "maxProperties": limits.max_items,
        },
    ]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tighter_schema_bounds_are_kept() {
        let limits = OutputLimits::default();
        let schema = json!({"type":"number","minimum":0,"maximum":1,"multipleOf":0.25});
        let bounded = bounded_schema(&schema, &limits);
        assert_eq!(bounded, schema);
        let integer = json!({"type":"integer","exclusiveMinimum":0});
        let bounded = bounded_schema(&integer, &limits);
        assert_eq!(
            bounded,
            json!({"type":"integer","exclusiveMinimum":0,"maximum":INTEGER_LIMIT})
        );
        let string = json!({"type":"string","maxLength":10000});
        assert_eq!(bounded_schema(&string, &limits), string);
        let long_minimum = json!({"type":"string","minLength":600});
        assert_eq!(
            bounded_schema(&long_minimum, &limits)["maxLength"],
            json!(600)
        );
        let fixed = json!({"enum":["a","b"]});
        assert_eq!(bounded_schema(&fixed, &limits), fixed);
    }

    #[test]
    fn free_values_point_to_one_bounded_definition() {
        let limits = OutputLimits::default();
        let bounded = bounded_schema(&json!({"description": "anything"}), &limits);
        assert_eq!(bounded["$ref"], json!(any_reference()));
        assert_eq!(bounded["description"], "anything");
        assert_eq!(bounded["$defs"][BOUNDED_ANY], bounded_any(&limits));
        let object = bounded_schema(&json!({"type": "object"}), &limits);
        assert_eq!(
            object,
            json!({
                "type": "object",
                "patternProperties": {"^.{1,64}$": {"$ref": any_reference()}},
                "additionalProperties": false,
                "maxProperties": 64,
                "$defs": {BOUNDED_ANY: bounded_any(&limits)},
            })
        );
        // A schema that needs no free value gets no definition.
        let closed = json!({"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":false});
        assert_eq!(bounded_schema(&closed, &limits), closed);
    }

    #[test]
    fn all_of_branches_get_no_defaults_that_would_narrow_the_others() {
        let limits = OutputLimits::default();
        let schema = json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"properties": {"b": {"type": "integer"}}},
        ]});
        let bounded = bounded_schema(&schema, &limits);
        let first = &bounded["allOf"][0];
        assert!(first.get("additionalProperties").is_none(), "{first}");
        assert!(first.get("patternProperties").is_none(), "{first}");
        // Value bounds still apply inside the branches.
        assert_eq!(first["properties"]["a"]["maxLength"], json!(512));
        assert_eq!(
            bounded["allOf"][1]["properties"]["b"]["maximum"],
            json!(INTEGER_LIMIT)
        );
    }

    #[test]
    fn combinators_without_a_type_are_bounded_in_their_branches() {
        let limits = OutputLimits::default();
        let schema = json!({"anyOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": false},
            {"type": "integer"},
        ]});
        let bounded = bounded_schema(&schema, &limits);
        assert_eq!(bounded.as_object().map(Map::len), Some(1), "{bounded}");
        assert_eq!(
            bounded["anyOf"][0]["properties"]["a"]["maxLength"],
            json!(512)
        );
        assert_eq!(bounded["anyOf"][1]["maximum"], json!(INTEGER_LIMIT));
        let typed = bounded_schema(
            &json!({"type": "object", "oneOf": [{"required": ["a"]}]}),
            &limits,
        );
        assert!(typed.get("patternProperties").is_none(), "{typed}");
    }

    #[test]
    fn number_bounds_follow_the_limits() {
        for digits in 0..=MAX_FRACTION_DIGITS {
            let step = fraction_step(digits).as_f64().unwrap_or(0.0);
            assert_eq!(step, 10f64.powi(-(digits as i32)), "{digits}");
        }
        let limits = OutputLimits {
            max_fraction_digits: 2,
            ..OutputLimits::default()
        };
        let bounded = bounded_schema(&json!({"type": ["number", "null"], "minimum": -5}), &limits);
        assert_eq!(
            bounded,
            json!({"type": ["number", "null"], "minimum": -5, "maximum": NUMBER_LIMIT, "multipleOf": 0.01})
        );
        // A range outside what a float64 holds exactly is left to the schema.
        let huge = json!({"type": "integer", "minimum": 1e300});
        assert_eq!(bounded_schema(&huge, &limits), huge);
    }

    #[test]
    fn arrays_get_bounded_items_and_length() {
        let limits = OutputLimits::default();
        let bounded = bounded_schema(&json!({"type": "array", "minItems": 100}), &limits);
        assert_eq!(bounded["maxItems"], json!(100));
        assert_eq!(bounded["items"], json!({"$ref": any_reference()}));
        let tuple = bounded_schema(
            &json!({"type": "array", "items": [{"type": "string"}]}),
            &limits,
        );
        assert_eq!(tuple["items"][0]["maxLength"], json!(512));
        assert_eq!(tuple["additionalItems"], json!({"$ref": any_reference()}));
        assert_eq!(tuple["maxItems"], json!(64));
    }
}
