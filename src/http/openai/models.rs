//! `GET /v1/models` and `GET /v1/models/{id}`: the loaded models in OpenAI's shape, plus
//! the extension fields `kind`, `architecture`, `context_length` and `dimensions`.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

use crate::engine::{ModelInfo, ModelKind};
use crate::http::error::ApiError;
use crate::http::AppState;

#[derive(Debug, Serialize)]
pub(super) struct ModelList {
    object: &'static str,
    data: Vec<ModelObject>,
}

#[derive(Debug, Serialize, PartialEq)]
pub(super) struct ModelObject {
    id: String,
    object: &'static str,
    /// OpenAI's creation time; local models have none worth reporting.
    created: u64,
    owned_by: &'static str,
    kind: ModelKind,
    architecture: String,
    context_length: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    precision: Option<String>,
}

impl From<ModelInfo> for ModelObject {
    fn from(info: ModelInfo) -> Self {
        ModelObject {
            id: info.id,
            object: "model",
            created: 0,
            owned_by: "warden",
            kind: info.kind,
            architecture: info.architecture,
            context_length: info.context_length,
            dimensions: info.dimensions,
            precision: info.precision,
        }
    }
}

pub(super) async fn list_models(State(state): State<AppState>) -> Json<ModelList> {
    let data = state
        .engine
        .models()
        .into_iter()
        .map(ModelObject::from)
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
}

pub(super) async fn get_model(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<ModelObject>, ApiError> {
    let Path(id) = id.map_err(|rejection| ApiError::invalid("id", rejection.body_text()))?;
    let found = state
        .engine
        .models()
        .into_iter()
        .find(|model| model.id == id);
    match found {
        Some(info) => Ok(Json(info.into())),
        None => Err(ApiError::ModelNotFound {
            message: format!("model `{id}` does not exist or is not loaded"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn model_objects_have_openai_fields_and_extensions() {
        let info = ModelInfo {
            id: "minilm".into(),
            kind: ModelKind::Embedding,
            architecture: "bert".into(),
            context_length: 512,
            path: "/models/minilm".into(),
            dimensions: Some(384),
            precision: Some("int8".into()),
        };
        let value = serde_json::to_value(ModelObject::from(info)).unwrap_or_default();
        let expected = json!({
            "id": "minilm", "object": "model", "created": 0, "owned_by": "warden",
            "kind": "embedding", "architecture": "bert", "context_length": 512, "dimensions": 384,
            "precision": "int8",
        });
        assert_eq!(value, expected);
    }
}
