//! The Streamable HTTP upstream client: era probe, sessions and their recovery, SSE bodies,
//! credentials and per-hop headers.

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn legacy_upstreams_are_initialized_once_and_get_their_session_back() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    client.call_tool("fake__echo", json!({})).await;
    client.call_tool("fake__echo", json!({})).await;
    assert_eq!(up.hit_count("server/discover"), 1, "probed once");
    assert_eq!(up.hit_count("initialize"), 1);
    assert_eq!(up.hit_count("notifications/initialized"), 1);
    for hit in up.hits("tools/call") {
        assert_eq!(hit.headers["mcp-session-id"], "fake-session-1");
        assert_eq!(hit.headers["mcp-protocol-version"], "2025-11-25");
    }
    assert_eq!(gw.healthz().await["upstreams"][0]["protocol"], "2025-11-25");
}

#[tokio::test]
async fn an_expired_session_is_renewed_transparently_404_and_400_styles() {
    for style in [SessionErrorStyle::NotFound404, SessionErrorStyle::BadRequest400] {
        let up = FakeUpstream::new().echo_tool("echo").session_errors(style).start().await;
        let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
        let client = Legacy::connect(&gw.url).await;
        assert_eq!(client.call_tool("fake__echo", json!({"message": "1"})).await["result"]["content"][0]["text"], "1");
        up.expire_sessions();
        let reply = client.call_tool("fake__echo", json!({"message": "2"})).await;
        assert_eq!(reply["result"]["content"][0]["text"], "2", "{style:?}: {reply}");
        assert_eq!(up.hit_count("initialize"), 2, "{style:?}: re-initialized once");
        assert_eq!(up.hits("tools/call").last().unwrap().headers["mcp-session-id"], "fake-session-2");
    }
}

#[tokio::test]
async fn sse_response_bodies_are_read_past_notifications() {
    let up = FakeUpstream::new().echo_tool("echo").sse_responses().start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["fake__echo"]);
    assert_eq!(client.call_tool("fake__echo", json!({"message": "sse"})).await["result"]["content"][0]["text"], "sse");
}

#[tokio::test]
async fn modern_upstreams_get_the_envelope_and_routing_headers() {
    let up = FakeUpstream::new().era(Era::Modern).echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("modern", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.call_tool("modern__echo", json!({"message": "m"})).await["result"]["content"][0]["text"], "m");
    assert_eq!(up.hit_count("initialize"), 0, "a 2026-07-28 upstream is never initialized");
    let hit = up.hits("tools/call").pop().unwrap();
    assert_eq!(hit.headers["mcp-method"], "tools/call");
    assert_eq!(hit.headers["mcp-name"], "echo");
    assert_eq!(hit.headers["mcp-protocol-version"], "2026-07-28");
    assert!(hit.headers.get("mcp-session-id").is_none());
    assert_eq!(hit.params["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "gatehouse");
    assert_eq!(gw.healthz().await["upstreams"][0]["protocol"], "2026-07-28");
}

#[tokio::test]
async fn bare_servers_without_initialize_are_served() {
    let up = FakeUpstream::new().era(Era::Bare).echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("bare", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.call_tool("bare__echo", json!({"message": "b"})).await["result"]["content"][0]["text"], "b");
    let hit = up.hits("tools/call").pop().unwrap();
    assert!(hit.headers.get("mcp-session-id").is_none() && hit.headers.get("mcp-protocol-version").is_none());
    assert_eq!(gw.healthz().await["upstreams"][0]["protocol"], "bare");
}

#[tokio::test]
async fn credentials_origin_and_extra_headers_are_sent_per_upstream() {
    let up = FakeUpstream::new().echo_tool("echo").require_bearer("up-secret").start().await;
    let config = format!(
        "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"fake\"\nurl = \"{}\"\nbearer_token_env = \"UP_TOKEN\"\norigin = \"atlas\"\nheaders = {{ x-team = \"blue\" }}\n",
        up.url()
    );
    let gw = TestGateway::start_with_env(&config, &[("UP_TOKEN", "up-secret")]).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.call_tool("fake__echo", json!({"message": "a"})).await["result"]["content"][0]["text"], "a");
    let hit = up.hits("tools/call").pop().unwrap();
    assert_eq!(hit.headers["authorization"], "Bearer up-secret");
    assert_eq!(hit.headers["x-auth-token"], "up-secret");
    assert_eq!(hit.headers["origin"], "atlas");
    assert_eq!(hit.headers["x-team"], "blue");
}

#[tokio::test]
async fn a_token_file_is_reread_after_a_401() {
    let up = FakeUpstream::new().echo_tool("echo").require_bearer("old").start().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token.json");
    std::fs::write(&token_file, r#"{"id_token": "old", "refresh_token": "ignored"}"#).unwrap();
    let config = format!(
        "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"fake\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
        up.url(),
        token_file.display()
    );
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.call_tool("fake__echo", json!({"message": "1"})).await["result"]["content"][0]["text"], "1");

    // The token is renewed outside the gateway: the next 401 makes it re-read the file.
    std::fs::write(&token_file, "new\n").unwrap();
    up.set_bearer("new");
    assert_eq!(client.call_tool("fake__echo", json!({"message": "2"})).await["result"]["content"][0]["text"], "2");
    assert_eq!(up.hits("tools/call").last().unwrap().headers["authorization"], "Bearer new");
}

#[tokio::test]
async fn a_catalog_change_upstream_reaches_listings_on_the_next_refresh() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    // A changed definition is served as it is (the default would quarantine it: contracts.rs).
    let config =
        config_for(&[("fake", &up.url())]).replace("namespace = \"fake\"", "namespace = \"fake\"\ndrift = \"warn\"");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    let before = gw.wait_for_state("fake", "up").await["fingerprint"].clone();
    assert!(before.is_string());
    up.set_tools(vec![(tool_def("echo", json!({"type": "object", "required": ["x"]})), echo())]);
    for _ in 0..100 {
        if gw.healthz().await["upstreams"][0]["fingerprint"] != before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_ne!(gw.healthz().await["upstreams"][0]["fingerprint"], before, "fingerprint follows the schema");
    let list = client.request("tools/list", json!({})).await;
    assert_eq!(list["result"]["tools"][0]["inputSchema"]["required"][0], "x");
}

#[tokio::test]
async fn per_client_upstreams_give_each_agent_session_its_own_upstream_session() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let config = format!("{}session = \"per_client\"\n", config_for(&[("fake", &up.url())]));
    let gw = TestGateway::start(&config).await;
    let alice = Legacy::connect(&gw.url).await;
    let bob = Legacy::connect(&gw.url).await;
    alice.call_tool("fake__echo", json!({"message": "a"})).await;
    bob.call_tool("fake__echo", json!({"message": "b"})).await;
    alice.call_tool("fake__echo", json!({"message": "a2"})).await;
    let sessions: Vec<String> =
        up.hits("tools/call").iter().map(|h| h.headers["mcp-session-id"].to_str().unwrap().to_string()).collect();
    assert_eq!(sessions[0], sessions[2], "alice keeps her upstream session");
    assert_ne!(sessions[0], sessions[1], "bob has his own");
    assert_eq!(gw.healthz().await["upstreams"][0]["client_sessions"], 2);

    // Ending alice's session ends her upstream session.
    let delete =
        alice.http.delete(&gw.url).header("mcp-session-id", alice.session.as_ref().unwrap()).send().await.unwrap();
    assert_eq!(delete.status(), 200);
    for _ in 0..100 {
        if up.hit_count("DELETE") == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(up.hits("DELETE")[0].params["session"], sessions[0]);
    assert_eq!(gw.healthz().await["upstreams"][0]["client_sessions"], 1);
}
