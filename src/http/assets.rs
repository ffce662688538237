//! The browser UI: the files of `web/`, embedded at build time (no CDN, works offline),
//! served at `/` and `/assets/{file}`, and the security headers every response carries
//! (a Content-Security-Policy without `unsafe-inline`, no sniffing, no framing).

use axum::extract::Request;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::json::ApiPath;
use super::AppState;

include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));

/// The page's Content-Security-Policy: only this origin's scripts, styles and connections.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*file}", get(asset))
}

async fn index() -> Result<Response, ApiError> {
    serve("index.html")
}

async fn asset(ApiPath(file): ApiPath<String>) -> Result<Response, ApiError> {
    serve(&file)
}

fn serve(name: &str) -> Result<Response, ApiError> {
    let bytes = WEB_ASSETS
        .iter()
        .find(|(asset, _)| *asset == name)
        .map(|(_, bytes)| *bytes)
        .ok_or_else(|| ApiError::NotFound(format!("asset `{name}`")))?;
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(mime_type(name)));
    // Small files, and a new binary brings new ones: always revalidate.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

fn mime_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// Adds the security headers to every response.
pub(super) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed = [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
    ];
    for (name, value) in fixed {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ui_is_embedded_with_its_types() {
        assert!(WEB_ASSETS.iter().any(|(name, _)| *name == "index.html"));
        assert_eq!(mime_type("app.js"), "text/javascript; charset=utf-8");
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(serve("../Cargo.toml").is_err());
    }
}
