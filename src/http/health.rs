//! `GET /healthz`: whether the server is up, and for signed-in callers which models are
//! loaded; administrators also see which failed to load, with their paths and errors, and
//! each upstream endpoint's circuit, load and last error.
//! Anonymous callers (load balancers, probes) get the status only, so the endpoint tells a
//! stranger nothing about the host. Cheap by design: it reads the engine's model list and
//! never waits on a model thread, so it answers at once even while every model is busy.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use serde::Serialize;

use super::auth::authenticate;
use super::AppState;
use crate::engine::LoadFailure;
use crate::store::Role;
use crate::upstream::EndpointHealth;

#[derive(Debug, Serialize)]
pub(super) struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    models: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_models: Option<Vec<LoadFailure>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upstreams: Option<Vec<UpstreamHealth>>,
}

/// An upstream model's endpoints, as admins see them.
#[derive(Debug, Serialize)]
pub(super) struct UpstreamHealth {
    model: String,
    endpoints: Vec<EndpointHealth>,
}

pub(super) async fn healthz(State(state): State<AppState>, headers: HeaderMap) -> Json<Health> {
    let mut health = Health {
        status: "ok",
        models: None,
        failed_models: None,
        upstreams: None,
    };
    // Only a request that presents credentials costs a look-up.
    let presents_credentials = headers.contains_key(axum::http::header::AUTHORIZATION)
        || headers.contains_key(axum::http::header::COOKIE);
    if !presents_credentials {
        return Json(health);
    }
    let Ok(caller) = authenticate(&state, &headers).await else {
        return Json(health);
    };
    health.models = Some(
        state
            .engine
            .models()
            .into_iter()
            .map(|model| model.id)
            .collect(),
    );
    if caller.user.role == Role::Admin {
        health.failed_models = Some(state.engine.failures().to_vec());
        let upstreams: Vec<UpstreamHealth> = state
            .engine
            .remote_chat_models()
            .map(|model| UpstreamHealth {
                model: model.info().id.clone(),
                endpoints: model.endpoint_health(),
            })
            .collect();
        health.upstreams = (!upstreams.is_empty()).then_some(upstreams);
    }
    Json(health)
}
