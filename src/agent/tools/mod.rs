//! Tools: the registry (name, description with purpose/arguments/returns/typical errors,
//! JSON schema, side-effect class, roles, timeout), the run's catalog (policy allowlist ∩
//! registry ∩ caller's role, with a stable hash; a missing required tool fails the run),
//! argument validation, canonical arguments, and the ledger keys. Owner identity comes from
//! the `ToolContext` (the auth context), never from a model-visible argument.

mod actions;
mod incidents;
mod knowledge;
mod misc;
mod validate;

/// Checks a JSON value against a schema (the subset Warden's tools and outputs use).
pub use validate::validate as validate_json;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::skills::Skills;
use crate::knowledge::KnowledgeSearch;
use crate::store::{Role, SideEffect, Store};

pub use knowledge::{passage, Passage, RELEVANT_VECTOR_SCORE, TOOL_NAME as KNOWLEDGE_TOOL};
pub use validate::validate;

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolResult {
    /// `data` is the full result (kept in the ledger and audit); `summary` is public.
    Ok { data: Value, summary: String },
    /// A typed error the model may read and correct (not found, invalid arguments…).
    Err { code: String, message: String },
}

impl ToolResult {
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        ToolResult::Err {
            code: code.to_owned(),
            message: message.into(),
        }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, ToolResult::Ok { .. })
    }
}

/// Who is calling, from the auth context, and what the tools may reach.
pub struct ToolContext<'a> {
    pub owner_id: i64,
    pub owner_role: Role,
    pub run_id: &'a str,
    pub store: &'a Store,
    /// Shared so that a search can run on its own thread and be abandoned at its timeout.
    pub search: Option<Arc<dyn KnowledgeSearch>>,
    pub skills: &'a Skills,
    /// Knowledge bases the caller may read (`None`: all).
    pub readable_kbs: Option<&'a [String]>,
    /// The user's (masked) request, recorded as a pending action's reason.
    pub request_text: &'a str,
    pub now_secs: i64,
    pub action_ttl_secs: i64,
    /// When the current call must have answered: its tool's timeout or the run's deadline,
    /// whichever comes first (set by the runner before each call).
    pub call_deadline: Instant,
}

/// What the registry knows of a tool.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
    pub side_effect: SideEffect,
    /// What the caller must be allowed (`policy::allows`, channel `ChatTool`).
    pub capability: crate::policy::Capability,
    pub timeout: Duration,
}

pub trait Tool: Send + Sync {
    fn info(&self) -> &ToolInfo;
    fn call(&self, context: &ToolContext<'_>, arguments: &Value) -> ToolResult;
}

/// All tools Warden has.
#[derive(Clone)]
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            tools: vec![
                Arc::new(knowledge::KnowledgeRetrieval::new()),
                Arc::new(incidents::GetIncident::new()),
                Arc::new(incidents::ListIncidents::new()),
                Arc::new(incidents::GetDiagnosticReport::new()),
                Arc::new(misc::CurrentTime::new()),
                Arc::new(misc::LoadSkill::new()),
                Arc::new(actions::CreateDiagnostic::new()),
                Arc::new(actions::RequestRecoveryApproval::new()),
            ],
        }
    }
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.info().name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.info().name).collect()
    }
}

/// The tools one run may use: policy allowlist ∩ registry ∩ what the caller's role may do
/// through chat (`crate::policy`).
#[derive(Clone)]
pub struct Catalog {
    tools: Vec<Arc<dyn Tool>>,
    pub hash: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("the required tool `{0}` is not available to this run")]
pub struct MissingTool(pub String);

impl Catalog {
    pub fn compile(
        registry: &Registry,
        allowed: &[&str],
        required: &[&str],
        role: Role,
    ) -> Result<Self, MissingTool> {
        let tools: Vec<Arc<dyn Tool>> = allowed
            .iter()
            .filter_map(|name| registry.get(name))
            .filter(|tool| {
                crate::policy::allows(
                    role,
                    tool.info().capability,
                    crate::policy::Channel::ChatTool,
                )
            })
            .cloned()
            .collect();
        for name in required {
            if !tools.iter().any(|t| t.info().name == *name) {
                return Err(MissingTool((*name).to_owned()));
            }
        }
        let described: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.info().name, "parameters": t.info().parameters}))
            .collect();
        let hash = crate::store::secret_hash(&canonical_json(&Value::Array(described)));
        Ok(Self { tools, hash })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.info().name == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.info().name).collect()
    }

    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The catalog as the model reads it in the system prompt.
    pub fn describe(&self) -> String {
        self.tools
            .iter()
            .map(|t| format!("- {}: {}", t.info().name, t.info().description))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// JSON with object keys sorted and no whitespace: the same arguments always give the
/// same text.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let ordered: BTreeMap<&String, Value> =
                    map.iter().map(|(k, v)| (k, sorted(v))).collect();
                let mut out = serde_json::Map::new();
                for (k, v) in ordered {
                    out.insert(k.clone(), v);
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// `tool_call_key = hash(run, logical step, tool, canonical arguments)`.
pub fn tool_call_key(run_id: &str, step: i64, tool: &str, arguments: &Value) -> String {
    crate::store::secret_hash(&format!(
        "{run_id}\u{1f}{step}\u{1f}{tool}\u{1f}{}",
        canonical_json(arguments)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_the_intersection_and_fails_on_missing_required_tools() {
        let registry = Registry::default();
        let catalog = Catalog::compile(
            &registry,
            &["knowledge_retrieval", "no_such_tool", "current_time"],
            &["knowledge_retrieval"],
            Role::Viewer,
        )
        .unwrap();
        assert_eq!(catalog.names(), ["knowledge_retrieval", "current_time"]);
        let again = Catalog::compile(
            &registry,
            &["knowledge_retrieval", "current_time"],
            &[],
            Role::Viewer,
        )
        .unwrap();
        assert_eq!(catalog.hash, again.hash);
        assert_eq!(
            Catalog::compile(
                &registry,
                &["current_time"],
                &["knowledge_retrieval"],
                Role::Viewer
            )
            .err(),
            Some(MissingTool("knowledge_retrieval".into()))
        );
        // No tool takes an owner argument: identity comes from the auth context.
        for name in registry.names() {
            let tool = registry.get(name).unwrap();
            let properties = tool.info().parameters["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            assert!(
                properties
                    .keys()
                    .all(|k| !k.contains("owner") && !k.contains("user")),
                "{name}"
            );
        }
    }

    #[test]
    fn canonical_arguments_ignore_key_order() {
        let a = json!({"b": 1, "a": {"y": 2, "x": [1, {"d": 0, "c": 1}]}});
        let b = json!({"a": {"x": [1, {"c": 1, "d": 0}], "y": 2}, "b": 1});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            tool_call_key("r", 1, "t", &a),
            tool_call_key("r", 1, "t", &b)
        );
        assert_ne!(
            tool_call_key("r", 2, "t", &a),
            tool_call_key("r", 1, "t", &a)
        );
    }
}
