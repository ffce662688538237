//! The execution policy: compiled from a validated route into an immutable value that
//! decides the mode (direct read, confirmation, bounded ReAct, clarification), the tools
//! the model may see and must use, the budgets, one monotonic deadline over the whole
//! run, and the postcondition the result must meet. The numbers come from one validated
//! `PolicyConfig`.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::router::{Intent, Route};

/// How a turn is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    DirectRead,
    ConfirmationRequired,
    BoundedReact,
    Clarification,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::DirectRead => "direct_read",
            Mode::ConfirmationRequired => "confirmation_required",
            Mode::BoundedReact => "bounded_react",
            Mode::Clarification => "clarification",
        }
    }
}

/// What the result must carry for the run to succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Postcondition {
    /// A plain answer.
    Answer,
    /// An answer grounded in retrieved passages (or saying nothing relevant was found).
    CitedAnswer,
    /// An incident (or the list) read from the store.
    IncidentFacts,
    /// A diagnostic report with every safety field.
    DiagnosticResult,
    /// A pending action persisted and announced.
    PendingAction,
    /// A question back to the user.
    Question,
}

/// Budgets of one kind of bounded ReAct run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReactBudget {
    pub max_model_calls: u32,
    pub max_tool_calls: u32,
    pub max_query_rewrites: u32,
    pub deadline: Duration,
}

/// The policy numbers, all configurable.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    pub knowledge: ReactBudget,
    pub chat: ReactBudget,
    /// Deadline of direct reads and confirmations (no model needed).
    pub direct_deadline: Duration,
    /// Classifier confidence below this asks for clarification.
    pub confidence_threshold: f64,
    /// How long a pending action may wait for its confirmation.
    pub action_ttl: Duration,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            knowledge: ReactBudget {
                max_model_calls: 3,
                max_tool_calls: 2,
                max_query_rewrites: 1,
                deadline: Duration::from_secs(120),
            },
            chat: ReactBudget {
                max_model_calls: 2,
                max_tool_calls: 1,
                max_query_rewrites: 0,
                deadline: Duration::from_secs(120),
            },
            direct_deadline: Duration::from_secs(10),
            confidence_threshold: 0.6,
            action_ttl: Duration::from_secs(3600),
        }
    }
}

/// The capability tools that only ever create pending actions.
pub const CONFIRMATION_TOOLS: [&str; 2] = ["create_diagnostic", "request_recovery_approval"];

/// The immutable policy of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionPolicy {
    pub mode: Mode,
    pub allowed_tools: Vec<&'static str>,
    pub required_tools: Vec<&'static str>,
    pub max_model_calls: u32,
    pub max_tool_calls: u32,
    pub max_query_rewrites: u32,
    #[serde(skip)]
    pub deadline: Instant,
    pub postcondition: Postcondition,
}

impl ExecutionPolicy {
    /// Compiles the route. `started` is when the run began: the deadline is measured from
    /// it once and never reset.
    pub fn compile(route: &Route, config: &PolicyConfig, started: Instant) -> Self {
        if route.needs_clarification {
            return Self::fixed(
                Mode::Clarification,
                vec![],
                Postcondition::Question,
                config,
                started,
            );
        }
        match route.intent {
            Intent::IncidentQuery => {
                let tool = if route.incident_id.is_some() {
                    "get_incident"
                } else {
                    "list_incidents"
                };
                Self::fixed(
                    Mode::DirectRead,
                    vec![tool],
                    Postcondition::IncidentFacts,
                    config,
                    started,
                )
            }
            Intent::DiagnosticStatus => Self::fixed(
                Mode::DirectRead,
                vec!["get_diagnostic_report"],
                Postcondition::DiagnosticResult,
                config,
                started,
            ),
            Intent::DiagnosticStart => Self::fixed(
                Mode::ConfirmationRequired,
                vec!["create_diagnostic"],
                Postcondition::PendingAction,
                config,
                started,
            ),
            Intent::RecoveryRequest => Self::fixed(
                Mode::ConfirmationRequired,
                vec!["request_recovery_approval"],
                Postcondition::PendingAction,
                config,
                started,
            ),
            Intent::KnowledgeQuestion => Self::react(
                vec!["knowledge_retrieval", "load_skill", "current_time"],
                vec!["knowledge_retrieval"],
                config.knowledge,
                Postcondition::CitedAnswer,
                started,
            ),
            Intent::Chat => Self::react(
                vec!["current_time", "load_skill"],
                if route.asks_time {
                    vec!["current_time"]
                } else {
                    vec![]
                },
                config.chat,
                Postcondition::Answer,
                started,
            ),
        }
    }

    /// A mode whose tools run in code, with no model call needed.
    fn fixed(
        mode: Mode,
        tools: Vec<&'static str>,
        postcondition: Postcondition,
        config: &PolicyConfig,
        started: Instant,
    ) -> Self {
        Self {
            mode,
            allowed_tools: tools.clone(),
            required_tools: tools.clone(),
            max_model_calls: 1,
            max_tool_calls: tools.len() as u32,
            max_query_rewrites: 0,
            deadline: started + config.direct_deadline,
            postcondition,
        }
    }

    fn react(
        allowed: Vec<&'static str>,
        required: Vec<&'static str>,
        budget: ReactBudget,
        postcondition: Postcondition,
        started: Instant,
    ) -> Self {
        Self {
            mode: Mode::BoundedReact,
            allowed_tools: allowed,
            required_tools: required,
            max_model_calls: budget.max_model_calls,
            max_tool_calls: budget.max_tool_calls,
            max_query_rewrites: budget.max_query_rewrites,
            deadline: started + budget.deadline,
            postcondition,
        }
    }

    /// Whether the ReAct loop may show `tool` to the model.
    pub fn allows(&self, tool: &str) -> bool {
        self.allowed_tools.contains(&tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::router::route_by_rules;

    fn policy(text: &str) -> ExecutionPolicy {
        let route = route_by_rules(text).unwrap();
        ExecutionPolicy::compile(&route, &PolicyConfig::default(), Instant::now())
    }

    #[test]
    fn modes_follow_the_route() {
        assert_eq!(policy("show incident_4").mode, Mode::DirectRead);
        assert_eq!(policy("show incident_4").required_tools, ["get_incident"]);
        assert_eq!(
            policy("diagnostic_4").required_tools,
            ["get_diagnostic_report"]
        );
        assert_eq!(
            policy("diagnose incident_4").mode,
            Mode::ConfirmationRequired
        );
        assert_eq!(
            policy("recover per diagnostic_4").mode,
            Mode::ConfirmationRequired
        );
        assert_eq!(policy("diagnose it").mode, Mode::Clarification);
    }

    #[test]
    fn knowledge_questions_get_the_seed_budgets_and_no_capability_tools() {
        let knowledge = policy("what is a deadlock?");
        assert_eq!(
            (
                knowledge.max_model_calls,
                knowledge.max_tool_calls,
                knowledge.max_query_rewrites
            ),
            (3, 2, 1)
        );
        assert_eq!(knowledge.required_tools, ["knowledge_retrieval"]);
        for tool in CONFIRMATION_TOOLS {
            assert!(!knowledge.allows(tool));
            assert!(!policy("hello").allows(tool));
            assert!(!policy("diagnose it").allows(tool));
        }
    }
}
