//! The 2026-07-28 front door: stateless requests, envelope and header validation, cache hints,
//! `subscriptions/listen` — in front of legacy upstreams (the gateway terminates each era).

use serde_json::{Value, json};

use crate::support::*;

async fn gateway() -> (FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("echo").prompt("greet").resource("file:///a.txt", "A").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    (up, gw)
}

#[tokio::test]
async fn discover_lists_versions_capabilities_and_identity() {
    let (_up, gw) = gateway().await;
    let reply = modern(&gw.url, "server/discover", json!({}), &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let result = &reply.json()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"][0], "2026-07-28");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["ttlMs"].as_u64().is_some());
    assert_eq!(result["cacheScope"], "public");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "gatehouse");
    assert!(reply.header("mcp-session-id").is_none(), "no sessions in 2026-07-28");
}

#[tokio::test]
async fn lists_and_calls_work_with_only_legacy_upstreams() {
    let (up, gw) = gateway().await;
    let list = modern(&gw.url, "tools/list", json!({}), &[]).await.json();
    let result = &list["result"];
    assert_eq!(result["tools"][0]["name"], "fake__echo");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["ttlMs"].as_u64().unwrap() > 0);

    let call =
        modern(&gw.url, "tools/call", json!({"name": "fake__echo", "arguments": {"message": "hi"}}), &[]).await.json();
    assert_eq!(call["result"]["content"][0]["text"], "hi");
    assert_eq!(call["result"]["resultType"], "complete");
    assert_eq!(call["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "gatehouse");

    // The upstream saw its own negotiated version and session, never the agent's envelope.
    let hit = up.hits("tools/call").pop().unwrap();
    assert_eq!(hit.headers["mcp-protocol-version"], "2025-11-25");
    assert!(hit.headers["mcp-session-id"].to_str().unwrap().starts_with("fake-session-"));
    assert!(hit.params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion").is_none(), "{}", hit.params);

    let prompt = modern(&gw.url, "prompts/get", json!({"name": "fake__greet"}), &[]).await.json();
    assert_eq!(prompt["result"]["messages"][0]["content"]["text"], "prompt greet");
    let read = modern(&gw.url, "resources/read", json!({"uri": "fake+file:///a.txt"}), &[]).await.json();
    assert_eq!(read["result"]["contents"][0]["uri"], "fake+file:///a.txt");
}

#[tokio::test]
async fn envelope_header_version_and_method_checks_in_order() {
    let (up, gw) = gateway().await;
    let cases: Vec<(&str, Value, Vec<(&str, Option<&str>)>, u16, i64)> = vec![
        ("tools/list", json!({}), vec![("mcp-protocol-version", Some("2025-11-25"))], 400, -32020),
        ("tools/list", json!({}), vec![("mcp-protocol-version", None)], 400, -32020),
        ("tools/list", json!({}), vec![("mcp-method", Some("tools/call"))], 400, -32020),
        ("tools/call", json!({"name": "fake__echo"}), vec![("mcp-name", Some("fake__other"))], 400, -32020),
        ("tools/call", json!({"name": "fake__echo"}), vec![("mcp-name", None)], 400, -32020),
        ("tools/frobnicate", json!({}), vec![], 404, -32601),
    ];
    for (method, params, tweak, status, code) in cases {
        let reply = modern(&gw.url, method, params, &tweak).await;
        assert_eq!(reply.status, status, "{method} {tweak:?}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], code, "{method} {tweak:?}");
        assert_eq!(reply.json()["id"], 7, "the request id is echoed");
    }
    assert_eq!(up.hit_count("tools/call"), 0, "rejected requests never reach the upstream");
}

#[tokio::test]
async fn unsupported_version_and_broken_envelope() {
    let (_up, gw) = gateway().await;
    let body =
        |meta: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}).to_string();
    let post = |body: String, version: &'static str| {
        let url = gw.url.clone();
        async move {
            read(
                crate::support::http_client()
                    .post(url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-protocol-version", version)
                    .header("mcp-method", "tools/list")
                    .body(body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    let future = post(body(json!({"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}})), "2099-01-01").await;
    assert_eq!(future.status, 400);
    let error = &future.json()["error"];
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["requested"], "2099-01-01");
    assert!(error["data"]["supported"].as_array().unwrap().contains(&json!("2026-07-28")));

    let no_caps = post(body(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})), "2026-07-28").await;
    assert_eq!(no_caps.status, 400);
    assert_eq!(no_caps.json()["error"]["code"], -32602);
    assert!(no_caps.json()["error"]["data"]["field"].as_str().unwrap().contains("clientCapabilities"));

    // A 2026-07-28 header without the body envelope is not silently served as legacy.
    let headless = post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(), "2026-07-28").await;
    assert_eq!(headless.status, 400);
    assert_eq!(headless.json()["error"]["code"], -32602);
}

#[tokio::test]
async fn base64_encoded_mcp_name_is_decoded_before_comparison() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let encoded = format!("=?base64?{}?=", base64_encode("fake__echo"));
    let reply = modern(
        &gw.url,
        "tools/call",
        json!({"name": "fake__echo", "arguments": {"message": "b64"}}),
        &[("mcp-name", Some(&encoded))],
    )
    .await;
    assert_eq!(reply.json()["result"]["content"][0]["text"], "b64", "{}", reply.body);
}

fn base64_encode(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn listen_acknowledges_then_tags_list_changed_with_the_subscription_id() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let notifications = json!({"toolsListChanged": true, "resourceSubscriptions": ["x"]});
    let mut stream = open_listen(&gw.url, "sub-1", notifications).await;
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut changed = false;
    while !seen.contains("notifications/tools/list_changed") {
        if seen.contains("acknowledged") && !changed {
            up.set_tools(vec![(tool_def("newer", json!({"type": "object"})), echo())]);
            changed = true;
        }
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("notification within 20 s")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let messages: Vec<Value> =
        seen.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(messages[0]["method"], "notifications/subscriptions/acknowledged", "acknowledgement first");
    assert_eq!(
        messages[0]["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "only what we support is accepted"
    );
    for m in &messages {
        assert_eq!(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-1", "{m}");
    }
}
