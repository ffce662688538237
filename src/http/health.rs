//! `GET /healthz`: which models are loaded and which failed to load. Cheap by design: it
//! reads the engine's model list and never waits on a model thread, so it answers at once
//! even while every model is busy.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::AppState;
use crate::engine::LoadFailure;

#[derive(Debug, Serialize)]
pub(super) struct Health {
    status: &'static str,
    models: Vec<String>,
    failed_models: Vec<LoadFailure>,
}

pub(super) async fn healthz(State(state): State<AppState>) -> Json<Health> {
    let models = state
        .engine
        .models()
        .into_iter()
        .map(|model| model.id)
        .collect();
    let failed_models = state.engine.failures().to_vec();
    Json(Health {
        status: "ok",
        models,
        failed_models,
    })
}
