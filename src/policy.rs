//! Who may do what: the one table of role × capability × channel. The HTTP routes
//! (`Caller::require`), the chat agent's tools (`Catalog::compile`, and the agent's refusal
//! of an action intent), the confirm API (`/api/actions/{id}/confirm`) and the approval
//! queue (`/api/approvals`) all ask
//! `allows`, so a capability cannot be refused on one channel and granted on another.

use crate::store::Role;

/// Something a user may be allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Chat, OpenAI-compatible inference, own conversations, runs and memory.
    Chat,
    /// List, search and read knowledge bases (each knowledge base's readers still apply).
    ReadKnowledge,
    /// Read incidents and one's own diagnostic reports.
    ReadIncidents,
    /// Re-sync a knowledge base from its folder.
    SyncKnowledge,
    /// Add and remove knowledge bases.
    ManageKnowledge,
    /// Read the audit log.
    ReadAudit,
    /// Create, change and disable users, manage groups, see anyone's API tokens.
    ManageUsers,
    /// Start a diagnostic task on an incident (directly, or by confirming one from chat).
    StartDiagnostic,
    /// Ask, from chat, for a recovery to be approved.
    RequestRecovery,
    /// Approve a recovery request (nothing is executed: it records the approval): by
    /// confirming one's own when no second approver is required, or from the approval
    /// queue (`/api/approvals`).
    ApproveRecovery,
    /// See the live diagnostic sources the server is configured with and their health.
    ReadSources,
}

impl Capability {
    pub const ALL: [Capability; 11] = [
        Capability::Chat,
        Capability::ReadKnowledge,
        Capability::ReadIncidents,
        Capability::SyncKnowledge,
        Capability::ManageKnowledge,
        Capability::ReadAudit,
        Capability::ManageUsers,
        Capability::StartDiagnostic,
        Capability::RequestRecovery,
        Capability::ApproveRecovery,
        Capability::ReadSources,
    ];
}

/// Where a capability is exercised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// An HTTP route called directly.
    Http,
    /// A tool the chat agent calls for the user.
    ChatTool,
    /// Confirming a pending action the chat agent proposed.
    Confirm,
}

impl Channel {
    pub const ALL: [Channel; 3] = [Channel::Http, Channel::ChatTool, Channel::Confirm];
}

const EVERYONE: &[Role] = &[Role::Admin, Role::Operator, Role::Viewer];
const OPERATORS: &[Role] = &[Role::Admin, Role::Operator];
const ADMINS: &[Role] = &[Role::Admin];

/// One row: who holds a capability, and on which channels it can be exercised at all.
struct Rule {
    capability: Capability,
    roles: &'static [Role],
    channels: &'static [Channel],
}

const TABLE: &[Rule] = &[
    Rule {
        capability: Capability::ReadSources,
        roles: ADMINS,
        channels: &[Channel::Http],
    },
    Rule {
        capability: Capability::Chat,
        roles: EVERYONE,
        channels: &[Channel::Http, Channel::ChatTool],
    },
    Rule {
        capability: Capability::ReadKnowledge,
        roles: EVERYONE,
        channels: &[Channel::Http, Channel::ChatTool],
    },
    Rule {
        capability: Capability::ReadIncidents,
        roles: EVERYONE,
        channels: &[Channel::Http, Channel::ChatTool],
    },
    Rule {
        capability: Capability::SyncKnowledge,
        roles: OPERATORS,
        channels: &[Channel::Http],
    },
    Rule {
        capability: Capability::ManageKnowledge,
        roles: ADMINS,
        channels: &[Channel::Http],
    },
    Rule {
        capability: Capability::ReadAudit,
        roles: ADMINS,
        channels: &[Channel::Http],
    },
    Rule {
        capability: Capability::ManageUsers,
        roles: ADMINS,
        channels: &[Channel::Http],
    },
    Rule {
        capability: Capability::StartDiagnostic,
        roles: OPERATORS,
        channels: &[Channel::Http, Channel::ChatTool, Channel::Confirm],
    },
    Rule {
        capability: Capability::RequestRecovery,
        roles: EVERYONE,
        channels: &[Channel::ChatTool],
    },
    Rule {
        capability: Capability::ApproveRecovery,
        roles: OPERATORS,
        channels: &[Channel::Http, Channel::Confirm],
    },
];

/// Whether `role` may exercise `capability` through `channel`. Fails closed: a capability
/// or channel the table does not list is refused.
pub fn allows(role: Role, capability: Capability, channel: Channel) -> bool {
    TABLE.iter().any(|rule| {
        rule.capability == capability
            && rule.roles.contains(&role)
            && rule.channels.contains(&channel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_has_exactly_one_rule() {
        for capability in Capability::ALL {
            let rules = TABLE.iter().filter(|r| r.capability == capability).count();
            assert_eq!(rules, 1, "{capability:?}");
        }
    }

    #[test]
    fn roles_map_to_http_capabilities() {
        use Capability::*;
        let allowed = |role| {
            Capability::ALL
                .into_iter()
                .filter(|c| allows(role, *c, Channel::Http))
                .collect::<Vec<_>>()
        };
        assert_eq!(allowed(Role::Viewer), [Chat, ReadKnowledge, ReadIncidents]);
        assert_eq!(
            allowed(Role::Operator),
            [
                Chat,
                ReadKnowledge,
                ReadIncidents,
                SyncKnowledge,
                StartDiagnostic,
                ApproveRecovery
            ]
        );
        assert_eq!(
            allowed(Role::Admin),
            [
                Chat,
                ReadKnowledge,
                ReadIncidents,
                SyncKnowledge,
                ManageKnowledge,
                ReadAudit,
                ManageUsers,
                StartDiagnostic,
                ApproveRecovery,
                ReadSources
            ]
        );
    }

    #[test]
    fn viewers_cannot_start_a_diagnostic_on_any_channel() {
        for channel in Channel::ALL {
            assert!(!allows(Role::Viewer, Capability::StartDiagnostic, channel));
        }
        assert!(allows(
            Role::Operator,
            Capability::StartDiagnostic,
            Channel::ChatTool
        ));
        assert!(allows(
            Role::Operator,
            Capability::StartDiagnostic,
            Channel::Confirm
        ));
        assert!(!allows(
            Role::Viewer,
            Capability::ApproveRecovery,
            Channel::Confirm
        ));
        assert!(allows(
            Role::Viewer,
            Capability::RequestRecovery,
            Channel::ChatTool
        ));
    }
}
