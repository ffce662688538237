//! Browser sign-in: `POST /api/login` (rate-limited), `POST /api/logout`, `GET /api/me`,
//! and `POST /api/bootstrap` (the one-time link that creates the first administrator).
//! A login always creates a fresh session (ids are never reused or fixed by the client)
//! and ends the one the browser presented; cookies are HttpOnly (session) and
//! SameSite=Strict (both).

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::SET_COOKIE;
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::auth::{self, Caller, CSRF_COOKIE, HOST_PREFIX, SESSION_COOKIE};
use super::error::ApiError;
use super::json::ApiJson;
use super::login_limiter::LoginKey;
use super::{blocking, AppState};
use crate::metrics::LoginOutcome;
use crate::runs::now_secs;
use crate::store::{
    Accounts, Audit, AuditEntry, AuditOutcome, NewSession, User, MAX_PASSWORD_CHARS,
    MAX_USER_NAME_CHARS,
};

/// The audit actor of a login whose name no account can have.
const INVALID_NAME: &str = "(invalid name)";

/// Routes reachable without a session.
/// Largest sign-in or bootstrap body: a name and a password, with room to spare. Checked
/// before a caller is known, so it is small.
pub const MAX_LOGIN_BODY_BYTES: usize = 8 * 1024;

pub(super) fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/api/login", post(login))
        .route("/api/bootstrap", post(bootstrap))
        .layer(DefaultBodyLimit::max(MAX_LOGIN_BODY_BYTES))
}

/// Routes that need a caller.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/me", get(me))
        .route("/api/logout", post(logout))
}

/// How long browser sessions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    pub idle_secs: i64,
    pub absolute_secs: i64,
    /// Add `Secure` to cookies (when Warden is reached over HTTPS through a proxy).
    pub secure_cookies: bool,
}

impl SessionConfig {
    /// The session cookie's name: `__Host-` prefixed when cookies are secure.
    pub fn session_cookie(&self) -> String {
        self.cookie_name(SESSION_COOKIE)
    }

    /// The CSRF cookie's name: `__Host-` prefixed when cookies are secure.
    pub fn csrf_cookie(&self) -> String {
        self.cookie_name(CSRF_COOKIE)
    }

    fn cookie_name(&self, name: &str) -> String {
        if self.secure_cookies {
            format!("{HOST_PREFIX}{name}")
        } else {
            name.to_owned()
        }
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            idle_secs: 30 * 60,
            absolute_secs: 12 * 60 * 60,
            secure_cookies: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginRequest {
    name: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BootstrapRequest {
    token: String,
    name: String,
    password: String,
}

async fn me(caller: Caller) -> Json<serde_json::Value> {
    Json(json!({ "user": public_user(&caller.user) }))
}

async fn login(
    State(state): State<AppState>,
    extensions: Extensions,
    headers: HeaderMap,
    ApiJson(request): ApiJson<LoginRequest>,
) -> Result<Response, ApiError> {
    auth::refuse_cross_site(&headers)?;
    // A name no account can have is never looked up, kept or audited as typed.
    let plausible = !request.name.is_empty()
        && request.name.chars().count() <= MAX_USER_NAME_CHARS
        && request.password.chars().count() <= MAX_PASSWORD_CHARS;
    let name = if plausible {
        request.name.clone()
    } else {
        INVALID_NAME.to_owned()
    };
    let address = state.network.client_address(&extensions, &headers);
    let key = LoginKey::new(&name, address);
    let limiter = &state.login_limiter;
    let lane = match limiter.attempt(&key, Instant::now()) {
        Ok(lane) => lane,
        Err(retry_after_secs) => {
            state.metrics.login(LoginOutcome::Limited);
            return Err(ApiError::TooManyRequests { retry_after_secs });
        }
    };
    let Some(_permit) = limiter.password_check(lane).await else {
        // Busy, not wrong: the attempt does not count against anyone.
        limiter.not_checked(&key);
        state.metrics.login(LoginOutcome::Busy);
        return Err(ApiError::TooManyRequests {
            retry_after_secs: 1,
        });
    };
    let user = if plausible {
        let store = state.store.clone();
        let lookup = name.clone();
        blocking(move || Ok(store.verify_password(&lookup, &request.password)?)).await?
    } else {
        None
    };
    let Some(user) = user else {
        limiter.failed(&key);
        state.metrics.login(LoginOutcome::Failed);
        let detail = json!({ "reason": "wrong name or password" });
        super::refusal_audit::audit_anonymous_refusal(&state, &name, "auth.login", detail).await;
        return Err(ApiError::InvalidCredentials);
    };
    limiter.succeeded(&key);
    state.metrics.login(LoginOutcome::Succeeded);
    audit(
        &state,
        &user.name,
        "auth.login",
        None,
        AuditOutcome::Success,
    )
    .await;
    start_session(&state, &headers, user).await
}

async fn bootstrap(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<BootstrapRequest>,
) -> Result<Response, ApiError> {
    auth::refuse_cross_site(&headers)?;
    let store = state.store.clone();
    let BootstrapRequest {
        token,
        name,
        password,
    } = request;
    let user =
        blocking(move || Ok(store.consume_bootstrap(&token, &name, &password, now_secs())?))
            .await?;
    audit(
        &state,
        &user.name,
        "user.bootstrap",
        Some(&user.name),
        AuditOutcome::Success,
    )
    .await;
    start_session(&state, &headers, user).await
}

async fn logout(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(session_id) = auth::cookie(&headers, &state.sessions.session_cookie()) {
        let store = state.store.clone();
        blocking(move || Ok(store.delete_session(&session_id)?)).await?;
    }
    audit(
        &state,
        &caller.user.name,
        "auth.logout",
        None,
        AuditOutcome::Success,
    )
    .await;
    let mut response = StatusCode::NO_CONTENT.into_response();
    set_cookies(&mut response, &state, None);
    Ok(response)
}

/// Ends the session the browser presented (if any), creates a fresh one, sets cookies.
async fn start_session(
    state: &AppState,
    headers: &HeaderMap,
    user: User,
) -> Result<Response, ApiError> {
    let previous = auth::cookie(headers, &state.sessions.session_cookie());
    let store = state.store.clone();
    let config = state.sessions;
    let user_id = user.id;
    let session = blocking(move || {
        if let Some(previous) = previous {
            store.delete_session(&previous)?;
        }
        Ok(store.create_session(user_id, now_secs(), config.idle_secs, config.absolute_secs)?)
    })
    .await?;
    let mut response = Json(json!({ "user": public_user(&user) })).into_response();
    set_cookies(&mut response, state, Some(&session));
    Ok(response)
}

/// Sets (or, with `None`, clears) the session and CSRF cookies.
fn set_cookies(response: &mut Response, state: &AppState, session: Option<&NewSession>) {
    let secure = if state.sessions.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    let (session_value, csrf_value, max_age) = match session {
        Some(s) => (
            s.id.as_str(),
            s.csrf_token.as_str(),
            (s.expires_at - now_secs()).max(0),
        ),
        None => ("", "", 0),
    };
    let (session_name, csrf_name) = (
        state.sessions.session_cookie(),
        state.sessions.csrf_cookie(),
    );
    let cookies = [
        format!("{session_name}={session_value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"),
        format!("{csrf_name}={csrf_value}; Path=/; SameSite=Strict; Max-Age={max_age}{secure}"),
    ];
    // Switched to secure cookies: the browser may still hold the old, unprefixed ones,
    // which would shadow the new CSRF cookie. They are expired.
    let stale: &[String] = if state.sessions.secure_cookies {
        &[
            format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
            format!("{CSRF_COOKIE}=; Path=/; SameSite=Strict; Max-Age=0"),
        ]
    } else {
        &[]
    };
    for cookie in cookies.iter().chain(stale) {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
}

/// The user as the API shows it.
pub(super) fn public_user(user: &User) -> serde_json::Value {
    json!({ "id": user.id, "name": user.name, "role": user.role })
}

/// Records an audit row; a failure to record is logged, never shown to the client.
pub(super) async fn audit(
    state: &AppState,
    actor: &str,
    action: &str,
    target: Option<&str>,
    outcome: AuditOutcome,
) {
    audit_with_detail(state, actor, action, target, outcome, None).await;
}

/// `audit` with a JSON `detail` (which must hold no secrets).
pub(super) async fn audit_with_detail(
    state: &AppState,
    actor: &str,
    action: &str,
    target: Option<&str>,
    outcome: AuditOutcome,
    detail: Option<serde_json::Value>,
) {
    let store = state.store.clone();
    let actor = actor.to_owned();
    let action = action.to_owned();
    let target = target.map(str::to_owned);
    let recorded = blocking(move || {
        let entry = AuditEntry {
            actor: &actor,
            action: &action,
            target: target.as_deref(),
            outcome,
            detail: detail.as_ref(),
        };
        Ok(store.record(&entry, now_secs())?)
    })
    .await;
    if let Err(err) = recorded {
        tracing::error!("cannot write an audit row: {err:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_cookies_take_the_host_prefix() {
        let plain = SessionConfig::default();
        assert_eq!(plain.session_cookie(), "warden_session");
        assert_eq!(plain.csrf_cookie(), "warden_csrf");
        let secure = SessionConfig {
            secure_cookies: true,
            ..SessionConfig::default()
        };
        assert_eq!(secure.session_cookie(), "__Host-warden_session");
        assert_eq!(secure.csrf_cookie(), "__Host-warden_csrf");
    }
}
