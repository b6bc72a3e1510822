//! The admin API's door (docs/admin.md, "Tokens"), against `rankflow run`
//! with a real broker and Redis:
//!
//! - without `[admin] tokens`, `/v1/admin/...` is a JSON 404, as an
//!   unknown route;
//! - with tokens (one from the file, one from `RANKFLOW_ADMIN_TOKENS_<NAME>`),
//!   no `Authorization`, another scheme, a wrong token, a token's prefix
//!   or a longer one are each a JSON 401 with `WWW-Authenticate: Bearer`;
//!   either configured token passes the door;
//! - neither token appears in the log, `/healthz`, `/metrics`, an error
//!   body or `rankflow check`.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const BOARDS: &str = r#"
[[board]]
name = "points"
event = "score"
member = "user_id"
score = "points"
periods = ["all"]
"#;

const FILE_TOKEN: &str = "ops-token-0123456789abcdef";
const ENV_TOKEN: &str = "support-token-fedcba9876543210";

/// Status, `WWW-Authenticate` and JSON body of a request to `url` with
/// `authorization` as that header, if any.
async fn admin_get(url: &str, authorization: Option<&str>) -> (u16, Option<String>, Value) {
    let client = reqwest::Client::new();
    let mut req = client.get(url);
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    let resp = req.send().await.expect("HTTP request");
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, challenge, body)
}

async fn started(
    broker: &Broker,
    redis: &Redis,
    extra: &str,
    env: &[(&str, &str)],
) -> (Process, Setup) {
    let mut setup = Setup::new(broker, redis, BOARDS);
    setup.extra = extra.to_string();
    broker.create_topic(&setup.topic, 1).await;
    let app = Process::start_env(&setup, env);
    wait_for(
        Duration::from_secs(60),
        "rankflow serving /healthz",
        || async { (status_of(&app.url("/healthz")).await == 200).then_some(()) },
    )
    .await;
    (app, setup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_a_configured_bearer_token_and_never_show_one() {
    let broker = Broker::start();
    let redis = Redis::start();

    // No tokens: the admin API does not exist.
    let (off, _) = started(&broker, &redis, "", &[]).await;
    let (status, _, body) = admin_get(
        &off.url("/v1/admin/members/u1"),
        Some(&format!("Bearer {FILE_TOKEN}")),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("admin API is off")),
        "{body}"
    );
    drop(off);

    let extra = format!(
        "[admin]\ntokens = {{ ops = \"{FILE_TOKEN}\", support = \"overridden-by-env-000000\" }}\n"
    );
    let (app, setup) = started(
        &broker,
        &redis,
        &extra,
        &[("RANKFLOW_ADMIN_TOKENS_SUPPORT", ENV_TOKEN)],
    )
    .await;
    let url = app.url("/v1/admin/members/u1");
    let refused = [
        None,
        Some(format!("Basic {FILE_TOKEN}")),
        Some("Bearer".to_string()),
        Some("Bearer wrong-token-0123456789abcdef".to_string()),
        Some(format!("Bearer {}", &FILE_TOKEN[..FILE_TOKEN.len() - 1])),
        Some(format!("Bearer {FILE_TOKEN}0")),
        // The file's token for `support` was replaced by the environment's.
        Some("Bearer overridden-by-env-000000".to_string()),
    ];
    for auth in &refused {
        let (status, challenge, body) = admin_get(&url, auth.as_deref()).await;
        assert_eq!(status, 401, "{auth:?}: {body}");
        assert!(
            challenge
                .as_deref()
                .is_some_and(|c| c.starts_with("Bearer")),
            "{auth:?}: {challenge:?}"
        );
        assert!(body["error"].is_string(), "{auth:?}: {body}");
    }
    // Either configured token passes the door (to an action that does not
    // exist yet at this path, or the one that does).
    for token in [FILE_TOKEN, ENV_TOKEN] {
        let (status, challenge, body) = admin_get(
            &app.url("/v1/admin/nothing-here"),
            Some(&format!("bearer {token}")),
        )
        .await;
        assert_eq!((status, challenge), (404, None), "{body}");
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("no admin action")),
            "{body}"
        );
    }

    // Nowhere to be seen.
    let mut seen = String::new();
    for path in ["/healthz", "/metrics", "/v1/boards"] {
        seen.push_str(&get_text(&app.url(path)).await.unwrap_or_default());
    }
    let check = CliConfig::new(&format!("{extra}{BOARDS}"), &redis.url(), &setup.prefix);
    let checked = check.stdout("check", &[("RANKFLOW_ADMIN_TOKENS_SUPPORT", ENV_TOKEN)]);
    assert!(
        checked.contains("admin API on /v1/admin for tokens ops, support"),
        "{checked}"
    );
    seen.push_str(&checked);
    seen.push_str(&app.log());
    assert!(
        app.log()
            .contains("token that is not configured was refused"),
        "the refusals are logged"
    );
    for token in [FILE_TOKEN, ENV_TOKEN, &FILE_TOKEN[..12], &ENV_TOKEN[..14]] {
        assert!(
            !seen.contains(token),
            "{token} shows in the log, check or a page"
        );
    }
    println!(
        "verified: no tokens → 404; {} refused forms → 401 with a Bearer challenge; file and environment tokens pass; no token in {} bytes of log, check and pages",
        refused.len(),
        seen.len()
    );
}
