//! The agent's policy numbers from a TOML file (`warden serve --agent-policy FILE`): every
//! key optional (the default stands), unknown keys refused, every number checked against
//! its bounds, so a typo or an absurd budget stops the server at start with the file and
//! the problem instead of changing behaviour silently.

use std::time::Duration;

use serde::Deserialize;

use super::policy::{PolicyConfig, ReactBudget};

#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    #[error("{0}")]
    Parse(String),
    #[error("`{key}` must be between {min} and {max} (got {got})")]
    OutOfRange {
        key: String,
        min: f64,
        max: f64,
        got: f64,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    confidence_threshold: Option<f64>,
    direct_deadline_seconds: Option<u64>,
    action_ttl_seconds: Option<u64>,
    knowledge: Option<RawBudget>,
    chat: Option<RawBudget>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    max_model_calls: Option<u32>,
    max_tool_calls: Option<u32>,
    max_query_rewrites: Option<u32>,
    deadline_seconds: Option<u64>,
}

fn within(key: &str, got: f64, min: f64, max: f64) -> Result<(), PolicyFileError> {
    if (min..=max).contains(&got) {
        Ok(())
    } else {
        Err(PolicyFileError::OutOfRange {
            key: key.to_owned(),
            min,
            max,
            got,
        })
    }
}

fn budget(
    name: &str,
    raw: Option<RawBudget>,
    default: ReactBudget,
) -> Result<ReactBudget, PolicyFileError> {
    let raw = raw.unwrap_or_default();
    let budget = ReactBudget {
        max_model_calls: raw.max_model_calls.unwrap_or(default.max_model_calls),
        max_tool_calls: raw.max_tool_calls.unwrap_or(default.max_tool_calls),
        max_query_rewrites: raw.max_query_rewrites.unwrap_or(default.max_query_rewrites),
        deadline: raw
            .deadline_seconds
            .map(Duration::from_secs)
            .unwrap_or(default.deadline),
    };
    within(
        &format!("{name}.max_model_calls"),
        budget.max_model_calls.into(),
        1.0,
        10.0,
    )?;
    within(
        &format!("{name}.max_tool_calls"),
        budget.max_tool_calls.into(),
        0.0,
        8.0,
    )?;
    within(
        &format!("{name}.max_query_rewrites"),
        budget.max_query_rewrites.into(),
        0.0,
        3.0,
    )?;
    within(
        &format!("{name}.deadline_seconds"),
        budget.deadline.as_secs() as f64,
        1.0,
        3600.0,
    )?;
    Ok(budget)
}

/// Reads a policy file's text over the defaults.
pub fn parse(text: &str) -> Result<PolicyConfig, PolicyFileError> {
    let raw: RawPolicy = toml::from_str(text).map_err(|e| PolicyFileError::Parse(e.to_string()))?;
    let default = PolicyConfig::default();
    let config = PolicyConfig {
        knowledge: budget("knowledge", raw.knowledge, default.knowledge)?,
        chat: budget("chat", raw.chat, default.chat)?,
        direct_deadline: raw
            .direct_deadline_seconds
            .map(Duration::from_secs)
            .unwrap_or(default.direct_deadline),
        confidence_threshold: raw
            .confidence_threshold
            .unwrap_or(default.confidence_threshold),
        action_ttl: raw
            .action_ttl_seconds
            .map(Duration::from_secs)
            .unwrap_or(default.action_ttl),
    };
    within(
        "confidence_threshold",
        config.confidence_threshold,
        0.0,
        1.0,
    )?;
    within(
        "direct_deadline_seconds",
        config.direct_deadline.as_secs() as f64,
        1.0,
        600.0,
    )?;
    within(
        "action_ttl_seconds",
        config.action_ttl.as_secs() as f64,
        60.0,
        7.0 * 86400.0,
    )?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_default_and_keys_override_it() {
        assert_eq!(parse("").unwrap(), PolicyConfig::default());
        let config = parse(
            "confidence_threshold = 0.7\n[knowledge]\nmax_model_calls = 4\ndeadline_seconds = 60\n",
        )
        .unwrap();
        assert_eq!(config.confidence_threshold, 0.7);
        assert_eq!(config.knowledge.max_model_calls, 4);
        assert_eq!(config.knowledge.deadline, Duration::from_secs(60));
        assert_eq!(config.knowledge.max_tool_calls, 2);
        assert_eq!(config.chat, PolicyConfig::default().chat);
    }

    #[test]
    fn typos_and_absurd_numbers_are_refused_with_the_key() {
        let unknown = parse("[knowledge]\nmax_modle_calls = 4\n").unwrap_err();
        assert!(unknown.to_string().contains("max_modle_calls"), "{unknown}");
        let huge = parse("[chat]\nmax_tool_calls = 500\n").unwrap_err();
        assert!(huge.to_string().contains("chat.max_tool_calls"), "{huge}");
        assert!(parse("confidence_threshold = 1.5").is_err());
        assert!(parse("[knowledge]\nmax_model_calls = 0\n").is_err());
        assert!(parse("action_ttl_seconds = \"soon\"").is_err());
    }
}
