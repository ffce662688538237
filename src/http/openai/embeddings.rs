//! `POST /v1/embeddings`: text in, one vector per input out, as floats or as base64 of
//! little-endian `f32`. Token-id inputs are not supported.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{base64, requested_model, select_embed_model};
use crate::engine::Embeddings;
use crate::http::error::ApiError;
use crate::http::json::ApiJson;
use crate::http::{AppState, HttpLimits};

#[derive(Debug, Deserialize)]
pub(crate) struct EmbeddingRequest {
    model: Option<String>,
    /// A string or a list of strings; checked by `embedding_inputs` for clear errors.
    input: Value,
    encoding_format: Option<String>,
    /// OpenAI's output-width option; accepted only when it equals the model's width.
    dimensions: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncodingFormat {
    Float,
    Base64,
}

#[derive(Debug, PartialEq)]
pub(crate) struct ValidEmbeddingRequest {
    model: Option<String>,
    inputs: Vec<String>,
    encoding: EncodingFormat,
    dimensions: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(super) struct EmbeddingResponse {
    object: &'static str,
    data: Vec<EmbeddingObject>,
    model: String,
    usage: EmbeddingUsage,
}

#[derive(Debug, Serialize)]
struct EmbeddingObject {
    object: &'static str,
    index: usize,
    embedding: EmbeddingVector,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Serialize)]
struct EmbeddingUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

pub(super) async fn embeddings(
    State(state): State<AppState>,
    ApiJson(wire): ApiJson<EmbeddingRequest>,
) -> Result<Json<EmbeddingResponse>, ApiError> {
    let valid = validate_embedding_request(wire, &state.limits)?;
    let model = select_embed_model(&state.engine, valid.model.as_deref())?;
    let width = model.info().dimensions;
    if let Some(asked) = valid.dimensions {
        if width.and_then(|width| u64::try_from(width).ok()) != Some(asked) {
            let width = width.map_or_else(|| "an unknown number of".to_owned(), |w| w.to_string());
            let message = format!(
                "model `{}` only produces {width} dimensions",
                model.info().id
            );
            return Err(ApiError::invalid("dimensions", message));
        }
    }
    let embeddings = model.embed(valid.inputs).await?;
    Ok(Json(embedding_response(
        model.info().id.clone(),
        embeddings,
        valid.encoding,
    )))
}

pub(crate) fn validate_embedding_request(
    wire: EmbeddingRequest,
    limits: &HttpLimits,
) -> Result<ValidEmbeddingRequest, ApiError> {
    let encoding = match wire.encoding_format.as_deref() {
        None | Some("float") => EncodingFormat::Float,
        Some("base64") => EncodingFormat::Base64,
        Some(other) => {
            let message = format!("encoding_format must be \"float\" or \"base64\", not {other:?}");
            return Err(ApiError::invalid("encoding_format", message));
        }
    };
    let inputs = embedding_inputs(wire.input, limits.max_embedding_inputs)?;
    let model = requested_model(wire.model);
    Ok(ValidEmbeddingRequest {
        model,
        inputs,
        encoding,
        dimensions: wire.dimensions,
    })
}

/// The texts to embed: one string, or a non-empty list of at most `max` strings, none empty.
fn embedding_inputs(input: Value, max: usize) -> Result<Vec<String>, ApiError> {
    let items = match input {
        Value::String(text) => vec![Value::String(text)],
        Value::Array(items) => items,
        Value::Null => return Err(ApiError::invalid("input", "input is required")),
        _ => {
            return Err(ApiError::invalid(
                "input",
                "input must be a string or an array of strings",
            ))
        }
    };
    if items.is_empty() {
        return Err(ApiError::invalid("input", "input must not be empty"));
    }
    if items.len() > max {
        let message = format!("input has {} items; at most {max} are allowed", items.len());
        return Err(ApiError::invalid("input", message));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| embedding_input(index, item))
        .collect()
}

fn embedding_input(index: usize, item: Value) -> Result<String, ApiError> {
    match item {
        Value::String(text) if text.is_empty() => Err(ApiError::invalid(
            format!("input[{index}]"),
            "inputs must not be empty strings",
        )),
        Value::String(text) => Ok(text),
        Value::Number(_) | Value::Array(_) => Err(ApiError::invalid(
            "input",
            "token arrays not supported; send text",
        )),
        _ => Err(ApiError::invalid(
            format!("input[{index}]"),
            "inputs must be strings",
        )),
    }
}

fn embedding_response(
    model: String,
    embeddings: Embeddings,
    encoding: EncodingFormat,
) -> EmbeddingResponse {
    let data = embeddings
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = match encoding {
                EncodingFormat::Float => EmbeddingVector::Float(vector),
                EncodingFormat::Base64 => EmbeddingVector::Base64(base64::encode_f32_le(&vector)),
            };
            EmbeddingObject {
                object: "embedding",
                index,
                embedding,
            }
        })
        .collect();
    let usage = EmbeddingUsage {
        prompt_tokens: embeddings.prompt_tokens,
        total_tokens: embeddings.prompt_tokens,
    };
    EmbeddingResponse {
        object: "list",
        data,
        model,
        usage,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const LIMITS: HttpLimits = HttpLimits {
        max_body_bytes: 1 << 20,
        max_tokens_cap: 512,
        max_embedding_inputs: 3,
        max_v1_requests_per_user: 4,
        heartbeat: crate::config::DEFAULT_HEARTBEAT,
        connections: crate::http::ConnectionLimits::DEFAULT,
    };

    fn parse(body: Value) -> Result<ValidEmbeddingRequest, ApiError> {
        let wire: EmbeddingRequest = serde_json::from_value(body)
            .map_err(|err| ApiError::BadJson(format!("test body does not parse: {err}")))?;
        validate_embedding_request(wire, &LIMITS)
    }

    fn rejected(body: Value, param: &str, needle: &str) {
        match parse(body.clone()) {
            Err(ApiError::InvalidRequest {
                param: Some(actual),
                message,
            }) => {
                assert_eq!(actual, param, "{body}");
                assert!(message.contains(needle), "{body}: {message}");
            }
            other => panic!("{body} should be rejected on {param}, got {other:?}"),
        }
    }

    #[test]
    fn string_and_list_inputs_are_accepted() {
        let one = parse(json!({"model": "e", "input": "hello"}));
        let expected = ValidEmbeddingRequest {
            model: Some("e".into()),
            inputs: vec!["hello".into()],
            encoding: EncodingFormat::Float,
            dimensions: None,
        };
        assert_eq!(one.ok(), Some(expected));
        let list = parse(json!({"input": ["a", "b"], "encoding_format": "base64"}));
        let list = list.ok();
        assert_eq!(list.as_ref().map(|l| l.inputs.len()), Some(2));
        assert_eq!(
            list.as_ref().map(|l| l.encoding),
            Some(EncodingFormat::Base64)
        );
        assert_eq!(list.and_then(|l| l.model), None);
    }

    #[test]
    fn bad_inputs_are_rejected() {
        rejected(json!({"input": []}), "input", "empty");
        rejected(json!({"input": ""}), "input[0]", "empty");
        rejected(json!({"input": ["a", ""]}), "input[1]", "empty");
        rejected(json!({"input": ["a", "b", "c", "d"]}), "input", "at most 3");
        rejected(
            json!({"input": [1, 2, 3]}),
            "input",
            "token arrays not supported",
        );
        rejected(
            json!({"input": [[1, 2]]}),
            "input",
            "token arrays not supported",
        );
        rejected(json!({"input": null}), "input", "required");
        rejected(json!({"input": {"text": "a"}}), "input", "string");
        rejected(
            json!({"input": "a", "encoding_format": "int8"}),
            "encoding_format",
            "base64",
        );
        assert!(parse(json!({"model": "e"})).is_err(), "input is required");
    }

    #[test]
    fn response_has_openai_shape() {
        let embeddings = Embeddings {
            vectors: vec![vec![0.5, -0.25]],
            prompt_tokens: 4,
        };
        let response = embedding_response("e".into(), embeddings, EncodingFormat::Float);
        let expected = json!({
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
            "model": "e",
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        });
        assert_eq!(serde_json::to_value(response).unwrap_or_default(), expected);
    }

    #[test]
    fn base64_response_encodes_each_vector() {
        let embeddings = Embeddings {
            vectors: vec![vec![1.0]],
            prompt_tokens: 1,
        };
        let response = embedding_response("e".into(), embeddings, EncodingFormat::Base64);
        let value = serde_json::to_value(response).unwrap_or_default();
        assert_eq!(value["data"][0]["embedding"], "AACAPw==");
    }
}
