//! `current_time` and `load_skill`: the two tools plain chat may use.

use std::time::Duration;

use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolInfo, ToolResult};
use crate::policy::Capability;
use crate::store::SideEffect;

pub struct CurrentTime(ToolInfo);

impl CurrentTime {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "current_time",
            description: "The server's current date and time in UTC. No arguments. Returns \
                {utc, unix}.",
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            side_effect: SideEffect::Read,
            capability: Capability::Chat,
            timeout: Duration::from_secs(1),
        })
    }
}

impl Tool for CurrentTime {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, _arguments: &Value) -> ToolResult {
        let utc = format_utc(context.now_secs);
        ToolResult::Ok {
            data: json!({"utc": utc, "unix": context.now_secs}),
            summary: utc,
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (civil-from-days, proleptic
/// Gregorian).
pub fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

pub struct LoadSkill(ToolInfo);

impl LoadSkill {
    pub fn new() -> Self {
        Self(ToolInfo {
            name: "load_skill",
            description: "Load the full procedure of a skill listed in the system prompt. \
                Arguments: name (the skill's name). Returns its body. Errors: unknown_skill.",
            parameters: json!({
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 80}},
                "required": ["name"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Read,
            capability: Capability::Chat,
            timeout: Duration::from_secs(1),
        })
    }
}

impl Tool for LoadSkill {
    fn info(&self) -> &ToolInfo {
        &self.0
    }

    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult {
        let name = arguments["name"].as_str().unwrap_or_default();
        match context.skills.get(name) {
            Some(skill) => ToolResult::Ok {
                data: json!({"name": skill.name, "body": skill.body}),
                summary: format!("skill {}", skill.name),
            },
            None => ToolResult::error("unknown_skill", format!("no skill is named `{name}`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_matches_known_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_796_083_200 + 3661), "2026-12-01T01:01:01Z");
    }
}
