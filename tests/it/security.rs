//! Origin/Host validation, inbound bearer auth, and what never crosses a hop.

use serde_json::json;

use crate::support::*;

const TOKEN: &str = "agent-token-Zq81";

async fn authed_gateway(extra: &str) -> (FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let config = format!(
        "[gateway]\nbearer_token_env = \"GW_TOKEN\"\nallowed_origins = [\"https://app.example.com\"]\n{extra}{}",
        upstream_block("fake", &up.url())
    );
    let gw = TestGateway::start_with_env(&config, &[("GW_TOKEN", TOKEN)]).await;
    (up, gw)
}

fn init_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).to_string()
}

#[tokio::test]
async fn origins_outside_loopback_and_the_allow_list_get_403() {
    let (up, gw) = authed_gateway("").await;
    let client = Legacy::new(&gw.url).with_token(TOKEN);
    for (origin, status) in [
        ("http://evil.example.com", 403),
        ("null", 403),
        ("http://localhost:5173", 200),
        ("http://127.0.0.1", 200),
        ("https://app.example.com", 200),
    ] {
        let reply = client.post_with(init_body(), &[("origin", origin)]).await;
        assert_eq!(reply.status, status, "{origin}: {}", reply.body);
    }
    // A forbidden origin learns nothing, and nothing reaches an upstream.
    let reply = client
        .post_with(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fake__echo"}}).to_string(),
            &[("origin", "http://evil.example.com")],
        )
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(up.hit_count("tools/call"), 0);
}

#[tokio::test]
async fn host_header_must_name_the_loopback_bind() {
    let (_up, gw) = authed_gateway("").await;
    let client = Legacy::new(&gw.url).with_token(TOKEN);
    let port = gw.base.rsplit(':').next().unwrap().to_string();
    let evil = client.post_with(init_body(), &[("host", &format!("evil.example.com:{port}"))]).await;
    assert_eq!(evil.status, 403, "DNS-rebinding defence");
    let fine = client.post_with(init_body(), &[("host", &format!("localhost:{port}"))]).await;
    assert_eq!(fine.status, 200);
}

#[tokio::test]
async fn bearer_token_is_required_on_every_verb() {
    let (up, gw) = authed_gateway("").await;
    let anonymous = Legacy::new(&gw.url);
    let reply = anonymous.post_with(init_body(), &[]).await;
    assert_eq!(reply.status, 401);
    assert!(reply.header("www-authenticate").unwrap().starts_with("Bearer"));
    assert_eq!(reply.json()["error"]["data"]["_meta"]["gatehouse/error"], "unauthenticated");
    let wrong = Legacy::new(&gw.url).with_token("agent-token-Zq82");
    assert_eq!(wrong.post_with(init_body(), &[]).await.status, 401);
    let get = crate::support::http_client().get(&gw.url).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(get.status(), 401);
    let delete = crate::support::http_client().delete(&gw.url).header("mcp-session-id", "x").send().await.unwrap();
    assert_eq!(delete.status(), 401);
    let modern_call = modern(&gw.url, "tools/call", json!({"name": "fake__echo"}), &[]).await;
    assert_eq!(modern_call.status, 401);
    assert_eq!(up.hit_count("tools/call"), 0);

    // /healthz stays open and says nothing secret.
    let health = http_client().get(format!("{}/healthz", gw.base)).send().await.unwrap().text().await.unwrap();
    assert!(!health.contains(TOKEN));

    let mut client = Legacy::new(&gw.url).with_token(TOKEN);
    client.initialize().await;
    assert_eq!(client.call_tool("fake__echo", json!({"message": "ok"})).await["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn sessions_are_bound_to_their_principal() {
    let (_up, gw) = authed_gateway("").await;
    let client = {
        let mut c = Legacy::new(&gw.url).with_token(TOKEN);
        c.initialize().await;
        c
    };
    // Same session id, no credential: authentication fails before the session is even looked up.
    let mut thief = Legacy::new(&gw.url);
    thief.session = client.session.clone();
    assert_eq!(thief.post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await.status, 401);
}

#[tokio::test]
async fn the_agents_token_session_and_protocol_headers_never_reach_upstreams() {
    let (up, gw) = authed_gateway("").await;
    let mut client = Legacy::new(&gw.url).with_token(TOKEN);
    client.version = "2025-06-18".into();
    client.initialize().await;
    client.call_tool("fake__echo", json!({"message": "x"})).await;
    let agent_session = client.session.clone().unwrap();
    for hit in up.hits("tools/call").into_iter().chain(up.hits("initialize")).chain(up.hits("tools/list")) {
        for (name, value) in &hit.headers {
            let value = value.to_str().unwrap_or("");
            assert!(!value.contains(TOKEN), "{name} carries the agent's token");
            assert!(!value.contains(&agent_session), "{name} carries the agent's session");
        }
        if hit.method != "initialize" {
            assert_eq!(
                hit.headers["mcp-protocol-version"], "2025-11-25",
                "the upstream's version, not the agent's 2025-06-18"
            );
        }
    }
}

#[tokio::test]
async fn auth_disabled_refuses_a_public_bind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[gateway]\nhost = \"0.0.0.0\"\nauth_disabled = true\n").unwrap();
    let out = std::process::Command::new(BIN).arg("check").arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gateway.auth_disabled") && stderr.contains("0.0.0.0"), "{stderr}");
}
