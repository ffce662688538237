//! `ApiJson`, `ApiPath` and `ApiQuery`: axum's `Json`, `Path` and `Query` extractors, with their rejections
//! turned into `ApiError` so that a bad body or query string gets the same JSON error shape
//! as every other error (axum's own is plain text).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON request body of type `T`. Unknown fields are ignored unless `T` says otherwise.
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(ApiError::from(rejection)),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        // The body limit surfaces as a failure to buffer the body, with status 413.
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::PayloadTooLarge;
        }
        if super::body_deadline::is_body_timeout(&rejection) {
            return ApiError::RequestTimeout(rejection.body_text());
        }
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::BadJson(
                "expected a request body with `Content-Type: application/json`".to_owned(),
            ),
            // The syntax and data errors name the line, column and field path at fault.
            other => ApiError::BadJson(other.body_text()),
        }
    }
}

/// Defines `$name<T>`: axum's `$inner` extractor whose rejection is a 400 in the JSON shape.
macro_rules! json_rejecting_extractor {
    ($(#[$doc:meta])* $name:ident wraps $inner:ident) => {
        $(#[$doc])*
        pub struct $name<T>(pub T);

        impl<T, S> axum::extract::FromRequestParts<S> for $name<T>
        where
            T: DeserializeOwned + Send,
            S: Send + Sync,
        {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut axum::http::request::Parts,
                state: &S,
            ) -> Result<Self, Self::Rejection> {
                match axum::extract::$inner::<T>::from_request_parts(parts, state).await {
                    Ok(axum::extract::$inner(value)) => Ok($name(value)),
                    Err(rejection) => Err(ApiError::InvalidRequest {
                        message: rejection.body_text(),
                        param: None,
                    }),
                }
            }
        }
    };
}

json_rejecting_extractor!(
    /// Path parameters of type `T`; a bad one (not UTF-8, say) is a 400 in the JSON shape.
    ApiPath wraps Path
);
json_rejecting_extractor!(
    /// Query-string parameters of type `T`; a bad query string is a 400 in the JSON shape.
    ApiQuery wraps Query
);

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Probe {
        #[allow(dead_code)]
        name: String,
    }

    async fn extract(content_type: Option<&str>, body: &'static str) -> Result<Probe, ApiError> {
        let mut builder = Request::builder().method("POST").uri("/");
        if let Some(content_type) = content_type {
            builder = builder.header("content-type", content_type);
        }
        let request = builder
            .body(Body::from(body))
            .map_err(|e| ApiError::BadJson(e.to_string()))?;
        ApiJson::<Probe>::from_request(request, &())
            .await
            .map(|ApiJson(probe)| probe)
    }

    fn message_of(result: Result<Probe, ApiError>) -> String {
        match result {
            Err(ApiError::BadJson(message)) => message,
            other => panic!("expected BadJson, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn accepts_valid_json_and_ignores_unknown_fields() {
        let probe = extract(Some("application/json"), r#"{"name":"a","extra":1}"#).await;
        assert!(probe.is_ok(), "{probe:?}");
    }

    #[tokio::test]
    async fn bad_bodies_become_bad_json() {
        let syntax = message_of(extract(Some("application/json"), "{not json").await);
        assert!(syntax.contains("line 1"), "{syntax}");
        let missing = message_of(extract(Some("application/json"), "{}").await);
        assert!(missing.contains("missing field `name`"), "{missing}");
        let content_type = message_of(extract(Some("text/plain"), r#"{"name":"a"}"#).await);
        assert!(content_type.contains("application/json"), "{content_type}");
        let no_content_type = message_of(extract(None, r#"{"name":"a"}"#).await);
        assert!(
            no_content_type.contains("Content-Type"),
            "{no_content_type}"
        );
    }
}
