//! Authentication and authorization for every route except login, health and the UI's
//! static files: a browser session cookie or `Authorization: Bearer <API token>` becomes a
//! `Caller`; state-changing requests are refused when they come from another site
//! (`Origin`, `Sec-Fetch-Site`) and, for cookie sessions, when their `X-CSRF-Token` does not
//! match the session's. What each role may do is `crate::policy`'s table, asked through `Caller::require`.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use super::{blocking, AppState};
use crate::policy::{allows, Capability, Channel};
use crate::runs::now_secs;
use crate::store::{secret_matches_hash, Accounts, AuditOutcome, StoreError, User};

/// The HttpOnly cookie holding the session id.
pub const SESSION_COOKIE: &str = "warden_session";
/// The cookie the page reads and echoes in `X-CSRF-Token`.
pub const CSRF_COOKIE: &str = "warden_csrf";
/// The prefix browsers reserve for cookies set `Secure`, with `Path=/` and no `Domain`:
/// such a cookie cannot be planted by a sibling host or over plain HTTP.
pub const HOST_PREFIX: &str = "__Host-";
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Who is calling, and how they proved it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: User,
    pub via: Credential,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A browser session; holds the SHA-256 of its CSRF token.
    Session {
        csrf_hash: String,
    },
    ApiToken,
}

impl Caller {
    /// `Forbidden` unless the caller's role may exercise `capability` over HTTP (the one
    /// table in `crate::policy`; owner scoping is separate and applies to every role).
    pub fn require(&self, capability: Capability) -> Result<(), ApiError> {
        if allows(self.user.role, capability, Channel::Http) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "the {} role may not do this",
                self.user.role
            )))
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Unauthorized)
    }
}

/// Middleware for protected routes: refuses cross-site writes, authenticates, checks the
/// CSRF token of cookie sessions, and hands the `Caller` to the handler.
pub async fn require_caller(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let writes = !is_safe(request.method());
    let target = format!("{} {}", request.method(), request.uri().path());
    if writes {
        if let Err(refused) = refuse_cross_site(request.headers()) {
            // Worth a row when it carries someone's credentials (a forged request riding
            // a signed-in browser); an anonymous one is refused without a write, so
            // strangers cannot fill the audit log.
            if let Ok(caller) = authenticate(&state, request.headers()).await {
                audit_refusal(&state, &caller.user.name, "auth.cross_site", &target).await;
            }
            return Err(refused);
        }
    }
    let caller = authenticate(&state, request.headers()).await?;
    if writes {
        if let Credential::Session { csrf_hash } = &caller.via {
            let presented = header_str(request.headers(), CSRF_HEADER).unwrap_or("");
            if presented.is_empty() || !secret_matches_hash(csrf_hash, presented) {
                audit_refusal(&state, &caller.user.name, "auth.csrf", &target).await;
                return Err(ApiError::Forbidden(
                    "missing or wrong X-CSRF-Token header".to_owned(),
                ));
            }
        }
    }
    let name = caller.user.name.clone();
    request.extensions_mut().insert(caller);
    let response = next.run(request).await;
    let audited = response.extensions().get::<RefusalAudited>().is_some();
    if response.status() == axum::http::StatusCode::FORBIDDEN && !audited {
        audit_refusal(&state, &name, "auth.forbidden", &target).await;
    }
    Ok(response)
}

/// Marks a 403 response whose handler already wrote the refusal's audit row.
#[derive(Debug, Clone, Copy)]
pub struct RefusalAudited;

/// How a decision (an action's confirmation, a recovery's approval) that the store did not
/// carry out is audited: a refusal is `Denied`, anything else a `Failure` naming its code.
pub fn failed_decision_audit(err: &ApiError) -> (AuditOutcome, serde_json::Value) {
    match err {
        ApiError::Store(StoreError::Forbidden(_)) => (
            AuditOutcome::Denied,
            serde_json::json!({ "error": "forbidden" }),
        ),
        other => (
            AuditOutcome::Failure,
            serde_json::json!({ "error": other.code() }),
        ),
    }
}

/// The error response of a failed decision whose audit row is already written, so the
/// refusal is not audited twice.
pub fn audited_error(err: ApiError) -> Response {
    let mut response = axum::response::IntoResponse::into_response(err);
    response.extensions_mut().insert(RefusalAudited);
    response
}

/// Records a refused request (403) in the audit log.
async fn audit_refusal(state: &AppState, actor: &str, action: &str, target: &str) {
    super::session::audit(state, actor, action, Some(target), AuditOutcome::Denied).await;
}

/// The caller behind the request's bearer token or session cookie; `Unauthorized` if
/// neither is valid. A bearer header, when present, is the only credential looked at.
pub async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let store = state.store.clone();
    if let Some(value) = header_str(headers, AUTHORIZATION.as_str()) {
        let secret = value
            .strip_prefix("Bearer ")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or(ApiError::Unauthorized)?
            .to_owned();
        let user = blocking(move || Ok(store.user_by_token(&secret)?)).await?;
        return user
            .map(|user| Caller {
                user,
                via: Credential::ApiToken,
            })
            .ok_or(ApiError::Unauthorized);
    }
    let session_id =
        cookie(headers, &state.sessions.session_cookie()).ok_or(ApiError::Unauthorized)?;
    let found = blocking(move || Ok(store.session_user(&session_id, now_secs())?)).await?;
    let (user, csrf_hash) = found.ok_or(ApiError::Unauthorized)?;
    Ok(Caller {
        user,
        via: Credential::Session { csrf_hash },
    })
}

/// `Forbidden` for a request another site made the browser send: `Sec-Fetch-Site` other
/// than same-origin/none, or an `Origin` whose host is not the one addressed.
pub fn refuse_cross_site(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(site) = header_str(headers, "sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(cross_site());
        }
    }
    if let Some(origin) = header_str(headers, ORIGIN.as_str()) {
        let origin_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .ok_or_else(cross_site)?;
        let host = header_str(headers, HOST.as_str()).ok_or_else(cross_site)?;
        if !origin_host.eq_ignore_ascii_case(host) {
            return Err(cross_site());
        }
    }
    Ok(())
}

fn cross_site() -> ApiError {
    ApiError::Forbidden("cross-site request refused".to_owned())
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The value of cookie `name`, from any `Cookie` header.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn cross_site_writes_are_refused() {
        let same = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert!(refuse_cross_site(&same).is_ok());
        assert!(refuse_cross_site(&headers(&[("host", "a")])).is_ok());
        for bad in [
            headers(&[
                ("host", "127.0.0.1:8080"),
                ("origin", "http://evil.example"),
            ]),
            headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]),
            headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]),
            headers(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "same-site")]),
            headers(&[("origin", "http://127.0.0.1:8080")]),
        ] {
            assert!(
                matches!(refuse_cross_site(&bad), Err(ApiError::Forbidden(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn cookies_are_found_among_others() {
        let map = headers(&[
            ("cookie", "a=1; warden_session=abc ; b=2"),
            ("cookie", "c=3"),
        ]);
        assert_eq!(cookie(&map, SESSION_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&map, "c").as_deref(), Some("3"));
        assert_eq!(cookie(&map, CSRF_COOKIE), None);
        assert_eq!(
            cookie(&headers(&[("cookie", "warden_session=")]), SESSION_COOKIE),
            None
        );
    }
}
