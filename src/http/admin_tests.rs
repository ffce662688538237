//! Router tests, with `oneshot`, of the administration routes: users (create, role,
//! disable, groups, password reset, and an admin never locking themselves out), groups, API
//! tokens (own ones for everyone, anyone's for admins, secrets shown once) and the audit
//! log's filters and paging. Each test has its own database.

use std::sync::{Arc, OnceLock};

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AppState, HttpLimits, LoginLimiter, SessionConfig, UserSlots};
use crate::engine::{Engine, EngineConfig};
use crate::runs::{EventBus, RunService};
use crate::store::{AccessControl, Accounts, Audit, Role, Store};

const PASSWORD: &str = "correct horse 1";

/// An engine without models: these routes never reach one.
fn engine() -> Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let config = EngineConfig {
                upstream: Default::default(),
                models: Vec::new(),
                threads: 1,
                queue_depth: 1,
                max_batch: 1,
                embed_precision: crate::engine::EmbedPrecision::Auto,
                max_context: 512,
                output_limits: Default::default(),
            };
            Arc::new(Engine::load(&config))
        })
        .clone()
}

/// One database with an admin, an operator and a viewer, each with an API token.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    app: axum::Router,
    admin: String,
    operator: String,
    viewer: String,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(&dir.path().join("w.db")).expect("store opens"));
    let token = |name: &str, role| {
        store.create_user(name, role, PASSWORD, 1).expect("user");
        store.create_token(name, "t", 1).expect("token").secret
    };
    let admin = token("ada", Role::Admin);
    let operator = token("olga", Role::Operator);
    let viewer = token("vic", Role::Viewer);
    let app = router(AppState {
        engine: engine(),
        library: None,
        runs: RunService::new(store.clone(), EventBus::default(), None),
        store: store.clone(),
        sessions: SessionConfig::default(),
        login_limiter: Arc::new(LoginLimiter::default()),
        v1_slots: Arc::new(UserSlots::new(4)),
        limits: HttpLimits {
            max_body_bytes: 1 << 20,
            max_tokens_cap: 256,
            max_embedding_inputs: 4,
            max_v1_requests_per_user: 4,
            heartbeat: crate::config::DEFAULT_HEARTBEAT,
            connections: crate::http::ConnectionLimits::DEFAULT,
        },
        alerts: Default::default(),
        network: Default::default(),
        metrics: Default::default(),
        metrics_token: None,
        refusals: std::sync::Arc::default(),
        anonymous_bodies: std::sync::Arc::new(crate::http::anonymous_bodies::AnonymousBodies::new(
            crate::http::ConnectionLimits::DEFAULT.max_anonymous_bodies,
        )),
        shutdown: tokio::sync::watch::channel(false).1,
        diagnostic_sources: None,
    });
    Fixture {
        _dir: dir,
        store,
        app,
        admin,
        operator,
        viewer,
    }
}

impl Fixture {
    /// Sends one request with `token`; returns the status and the JSON body (`Null` if empty).
    async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"));
        let body = match body {
            Some(value) => {
                request = request.header("content-type", "application/json");
                Body::from(value.to_string())
            }
            None => Body::empty(),
        };
        let response = self
            .app
            .clone()
            .oneshot(request.body(body).expect("request builds"))
            .await
            .expect("the router is infallible");
        let status = response.status();
        let bytes = to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
        };
        (status, value)
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        self.call(token, Method::GET, path, None).await
    }

    /// The actions of every audit row, oldest first, as one text (for `contains`).
    fn audit_text(&self) -> String {
        let rows = self.store.audit_tail(1000, None).expect("audit");
        serde_json::to_string(&rows).expect("json")
    }

    fn audit_actions(&self) -> Vec<String> {
        let mut rows = self.store.audit_tail(1000, None).expect("audit");
        rows.reverse();
        rows.into_iter().map(|row| row.action).collect()
    }
}

fn message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn admins_create_and_change_users_with_groups() {
    let f = fixture();
    f.store.create_group("ops", 1).expect("group");
    f.store.create_group("hr", 1).expect("group");
    let (status, body) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/users",
            Some(json!({"name": "nina", "role": "viewer", "password": "nina-password-1", "groups": ["ops"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let user = &body["user"];
    assert_eq!(
        (
            &user["name"],
            &user["role"],
            &user["disabled"],
            &user["groups"]
        ),
        (
            &json!("nina"),
            &json!("viewer"),
            &json!(false),
            &json!(["ops"])
        )
    );
    assert!(user["id"].is_i64() && user["created_at"].is_i64(), "{body}");

    let (status, body) = f.get(&f.admin, "/api/users").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = body["users"]
        .as_array()
        .expect("users")
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(names, ["ada", "nina", "olga", "vic"]);
    assert!(!body.to_string().contains("argon2"), "{body}");
    assert!(!body.to_string().contains("password"), "{body}");

    let patch = json!({"role": "operator", "groups": ["hr", "ops"]});
    let (status, body) = f
        .call(&f.admin, Method::PATCH, "/api/users/nina", Some(patch))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"]["role"], "operator");
    assert_eq!(body["user"]["groups"], json!(["hr", "ops"]));

    let (status, body) = f
        .call(
            &f.admin,
            Method::PATCH,
            "/api/users/nina",
            Some(json!({"disabled": true})),
        )
        .await;
    assert_eq!(
        (status, &body["user"]["disabled"]),
        (StatusCode::OK, &json!(true))
    );
    assert!(f
        .store
        .verify_password("nina", "nina-password-1")
        .expect("verify")
        .is_none());
    let (status, _) = f
        .call(
            &f.admin,
            Method::PATCH,
            "/api/users/nina",
            Some(json!({"disabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(f
        .store
        .verify_password("nina", "nina-password-1")
        .expect("verify")
        .is_some());

    // Refusals: a taken name, a short password, an unknown group (no user is created), an
    // unknown role, an unknown field, an unknown user.
    for (body, want) in [
        (
            json!({"name": "nina", "role": "viewer", "password": "long enough 1"}),
            409,
        ),
        (
            json!({"name": "ned", "role": "viewer", "password": "short"}),
            400,
        ),
        (
            json!({"name": "ned", "role": "viewer", "password": "long enough 1", "groups": ["nope"]}),
            404,
        ),
        (
            json!({"name": "ned", "role": "root", "password": "long enough 1"}),
            400,
        ),
        (
            json!({"name": "ned", "role": "viewer", "password": "long enough 1", "admin": true}),
            400,
        ),
    ] {
        let (status, response) = f
            .call(&f.admin, Method::POST, "/api/users", Some(body.clone()))
            .await;
        assert_eq!(status.as_u16(), want, "{body} → {response}");
        assert!(!message(&response).is_empty(), "{response}");
    }
    assert!(
        f.store.user_by_name("ned").is_err(),
        "no user after a refused create"
    );
    let (status, _) = f
        .call(
            &f.admin,
            Method::PATCH,
            "/api/users/nobody",
            Some(json!({"role": "viewer"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = f
        .call(
            &f.admin,
            Method::PATCH,
            "/api/users/nina",
            Some(json!({"groups": ["nope"]})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        f.store.user_by_name("nina").expect("nina").role,
        Role::Operator
    );

    let actions = f.audit_actions();
    for action in [
        "user.create",
        "user.role",
        "user.groups",
        "user.disable",
        "user.enable",
    ] {
        assert!(
            actions.iter().any(|a| a == action),
            "{action} in {actions:?}"
        );
    }
    assert!(!f.audit_text().contains("nina-password-1"));
}

#[tokio::test]
async fn an_admin_cannot_demote_or_disable_themselves_and_others_cannot_administer() {
    let f = fixture();
    for patch in [json!({"role": "operator"}), json!({"disabled": true})] {
        let (status, body) = f
            .call(&f.admin, Method::PATCH, "/api/users/ada", Some(patch))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(message(&body).contains("another admin"), "{body}");
    }
    let ada = f.store.user_by_name("ada").expect("ada");
    assert_eq!((ada.role, ada.disabled), (Role::Admin, false));
    // Changing one's own groups, or keeping one's own role, is fine.
    let (status, _) = f
        .call(
            &f.admin,
            Method::PATCH,
            "/api/users/ada",
            Some(json!({"role": "admin", "groups": []})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    for token in [&f.operator, &f.viewer] {
        for (method, path, body) in [
            (Method::GET, "/api/users", None),
            (
                Method::POST,
                "/api/users",
                Some(json!({"name": "x", "role": "admin", "password": "long enough 1"})),
            ),
            (
                Method::PATCH,
                "/api/users/vic",
                Some(json!({"role": "admin"})),
            ),
            (
                Method::POST,
                "/api/users/vic/password",
                Some(json!({"password": "long enough 1"})),
            ),
            (Method::GET, "/api/groups", None),
            (Method::POST, "/api/groups", Some(json!({"name": "g"}))),
            (Method::DELETE, "/api/groups/g", None),
            (Method::GET, "/api/audit", None),
        ] {
            let (status, body) = f.call(token, method.clone(), path, body).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        }
    }
    assert_eq!(f.store.user_by_name("vic").expect("vic").role, Role::Viewer);
}

#[tokio::test]
async fn a_password_reset_ends_the_users_sessions() {
    let f = fixture();
    let vic = f.store.user_by_name("vic").expect("vic");
    let session = f
        .store
        .create_session(vic.id, crate::runs::now_secs(), 600, 3600)
        .expect("session");
    let (status, body) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/users/vic/password",
            Some(json!({"password": "short"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("8"), "{body}");
    let (status, body) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/users/vic/password",
            Some(json!({"password": "a brand new password"})),
        )
        .await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let now = crate::runs::now_secs();
    assert!(f
        .store
        .session_user(&session.id, now)
        .expect("lookup")
        .is_none());
    assert!(f
        .store
        .verify_password("vic", "a brand new password")
        .expect("verify")
        .is_some());
    let (status, _) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/users/nobody/password",
            Some(json!({"password": "a brand new password"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(f.audit_actions().iter().any(|a| a == "user.password_reset"));
    assert!(!f.audit_text().contains("a brand new password"));
}

#[tokio::test]
async fn admins_manage_groups() {
    let f = fixture();
    let (status, body) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/groups",
            Some(json!({"name": "ops"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["group"]["name"], "ops");
    for (name, want) in [("ops", 409), ("bad name", 400), ("", 400)] {
        let (status, body) = f
            .call(
                &f.admin,
                Method::POST,
                "/api/groups",
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(status.as_u16(), want, "{name:?}: {body}");
    }
    f.store.add_to_group("vic", "ops").expect("member");
    let (status, body) = f.get(&f.admin, "/api/groups").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["groups"][0]["name"], "ops");
    assert_eq!(body["groups"][0]["members"], json!(["vic"]));
    let (_, users) = f.get(&f.admin, "/api/users").await;
    let vic = users["users"]
        .as_array()
        .and_then(|users| users.iter().find(|u| u["name"] == "vic"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(vic["groups"], json!(["ops"]));
    let (status, _) = f
        .call(&f.admin, Method::DELETE, "/api/groups/ops", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = f
        .call(&f.admin, Method::DELETE, "/api/groups/ops", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let actions = f.audit_actions();
    assert!(
        actions.contains(&"group.create".to_owned())
            && actions.contains(&"group.remove".to_owned())
    );
}

#[tokio::test]
async fn everyone_manages_their_own_tokens_and_admins_anyones() {
    let f = fixture();
    let (status, created) = f
        .call(
            &f.viewer,
            Method::POST,
            "/api/tokens",
            Some(json!({"label": "laptop"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().expect("secret").to_owned();
    let id = created["id"].as_str().expect("id").to_owned();
    assert!(secret.starts_with("wdn_"), "{created}");
    assert_eq!(
        (&created["label"], &created["user"]),
        (&json!("laptop"), &json!("vic"))
    );
    // The new token works, and the list shows metadata only.
    let (status, listed) = f.get(&secret, "/api/tokens").await;
    assert_eq!(status, StatusCode::OK);
    let tokens = listed["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 2, "{listed}");
    assert_eq!(tokens[0]["id"], json!(id));
    assert_eq!(tokens[0]["revoked_at"], Value::Null);
    assert!(!listed.to_string().contains(&secret) && !listed.to_string().contains("secret"));

    // A viewer can neither see nor make nor revoke someone else's tokens.
    let (status, _) = f.get(&f.viewer, "/api/tokens?user=olga").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = f
        .call(
            &f.viewer,
            Method::POST,
            "/api/tokens",
            Some(json!({"label": "x", "user": "olga"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, olgas) = f.get(&f.operator, "/api/tokens").await;
    let olgas_id = olgas["tokens"][0]["id"]
        .as_str()
        .expect("olga's token")
        .to_owned();
    let (status, body) = f
        .call(
            &f.viewer,
            Method::DELETE,
            &format!("/api/tokens/{olgas_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(!message(&body).contains("olga"), "{body}");
    let (status, _) = f
        .call(&f.viewer, Method::DELETE, "/api/tokens/tok_none", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Revoking one's own token: it stops working at once.
    let (status, _) = f
        .call(
            &f.viewer,
            Method::DELETE,
            &format!("/api/tokens/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = f.get(&secret, "/api/tokens").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // An admin lists, creates for and revokes anyone's.
    let (status, listed) = f.get(&f.admin, "/api/tokens?user=vic").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["tokens"].as_array().map(Vec::len), Some(2));
    let (status, made) = f
        .call(
            &f.admin,
            Method::POST,
            "/api/tokens",
            Some(json!({"label": "ci", "user": "olga"})),
        )
        .await;
    assert_eq!(
        (status, &made["user"]),
        (StatusCode::CREATED, &json!("olga"))
    );
    let (status, _) = f
        .call(
            &f.admin,
            Method::DELETE,
            &format!("/api/tokens/{olgas_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = f.get(&f.operator, "/api/me").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = f.get(&f.admin, "/api/tokens?user=nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for label in ["", "a\u{7}b"] {
        let (status, _) = f
            .call(
                &f.viewer,
                Method::POST,
                "/api/tokens",
                Some(json!({"label": label})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{label:?}");
    }
    let audit = f.audit_text();
    assert!(audit.contains("token.create") && audit.contains("token.revoke"));
    assert!(!audit.contains(&secret));
}

#[tokio::test]
async fn the_audit_log_filters_by_actor_action_and_time_and_pages() {
    let f = fixture();
    for name in ["g1", "g2", "g3"] {
        let (status, _) = f
            .call(
                &f.admin,
                Method::POST,
                "/api/groups",
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, _) = f
        .call(
            &f.viewer,
            Method::POST,
            "/api/tokens",
            Some(json!({"label": "mine"})),
        )
        .await;

    let (status, page) = f
        .get(&f.admin, "/api/audit?actor=ada&action=group&limit=2")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let targets: Vec<&str> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|row| row["target"].as_str())
        .collect();
    assert_eq!(targets, ["g3", "g2"]);
    let before = page["next_before"].as_i64().expect("an older page");
    let (_, older) = f
        .get(
            &f.admin,
            &format!("/api/audit?actor=ada&action=group&limit=2&before={before}"),
        )
        .await;
    assert_eq!(older["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(older["entries"][0]["target"], "g1");
    assert_eq!(older["next_before"], Value::Null);

    let (_, vics) = f.get(&f.admin, "/api/audit?actor=vic").await;
    assert_eq!(vics["entries"][0]["action"], "token.create");
    let (_, none) = f.get(&f.admin, "/api/audit?since=1&until=2").await;
    assert_eq!(none["entries"], json!([]));
    let (_, recent) = f.get(&f.admin, "/api/audit?since=1000").await;
    assert_eq!(recent["entries"].as_array().map(Vec::len), Some(4));
    for bad in [
        "/api/audit?since=10&until=5",
        "/api/audit?limit=0",
        "/api/audit?since=yesterday",
        "/api/audit?who=ada",
    ] {
        let (status, body) = f.get(&f.admin, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let long = "x".repeat(201);
    let (status, _) = f.get(&f.admin, &format!("/api/audit?actor={long}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
