//! Which knowledge bases a caller may read, as the HTTP layer applies it: every knowledge
//! base route resolves the caller's readable set here, names a knowledge base the caller
//! may not read exactly as one that does not exist (404), and shows a knowledge base's
//! folder to admins only.

use serde_json::Value;

use super::auth::Caller;
use super::error::ApiError;
use super::{blocking, AppState};
use crate::store::{AccessControl, KbCatalog, KnowledgeBaseRecord, Role, StoreError};

/// The knowledge bases a caller may read.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Readable {
    /// Admins read every knowledge base.
    All,
    Only(Vec<String>),
}

impl Readable {
    pub(super) async fn of(state: &AppState, caller: &Caller) -> Result<Readable, ApiError> {
        if caller.user.role == Role::Admin {
            return Ok(Readable::All);
        }
        let store = state.store.clone();
        let user_id = caller.user.id;
        blocking(move || {
            let principal = store.principal(user_id)?;
            Ok(Readable::Only(store.readable_kbs(&principal)?))
        })
        .await
    }

    pub(super) fn allows(&self, kb: &str) -> bool {
        match self {
            Readable::All => true,
            Readable::Only(names) => names.iter().any(|n| n == kb),
        }
    }

    /// The knowledge bases a search covers: the requested ones (each must exist and be
    /// readable, else 404 as if missing), or all readable ones (`None`: every one).
    pub(super) fn scope(
        &self,
        requested: Option<Vec<String>>,
        existing: &[KnowledgeBaseRecord],
    ) -> Result<Option<Vec<String>>, ApiError> {
        match requested {
            Some(names) => {
                for name in &names {
                    if !existing.iter().any(|kb| &kb.name == name) || !self.allows(name) {
                        return Err(not_found(name));
                    }
                }
                Ok(Some(names))
            }
            None => Ok(match self {
                Readable::All => None,
                Readable::Only(names) => Some(names.clone()),
            }),
        }
    }
}

pub(super) fn not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("knowledge base `{name}`"))
}

/// The knowledge base as this caller may see it: the folder path for admins only.
pub(super) fn public_kb(record: &KnowledgeBaseRecord, caller: &Caller) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if caller.user.role != Role::Admin {
        if let Some(map) = value.as_object_mut() {
            map.remove("root");
        }
    }
    value
}

/// The named knowledge base if the caller may read it; 404 otherwise.
pub(super) async fn readable_kb(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<KnowledgeBaseRecord, ApiError> {
    let readable = Readable::of(state, caller).await?;
    if !readable.allows(name) {
        return Err(not_found(name));
    }
    let store = state.store.clone();
    let wanted = name.to_owned();
    blocking(move || Ok(store.knowledge_base(&wanted)?))
        .await
        .map_err(|err| match err {
            ApiError::Store(StoreError::NotFound(_)) => not_found(name),
            other => other,
        })
}
