//! The legacy (initialize-based) front door: sessions, headers, framing, bad input.

use serde_json::{Value, json};

use crate::support::*;

async fn gateway() -> (FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    (up, gw)
}

#[tokio::test]
async fn initialize_negotiates_versions_and_issues_an_unguessable_session() {
    let (_up, gw) = gateway().await;
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let mut client = Legacy::new(&gw.url);
        client.version = asked.into();
        let result = client.initialize().await;
        assert_eq!(result["protocolVersion"], answered, "asked {asked}");
        assert_eq!(result["serverInfo"]["name"], "gatehouse");
        assert!(
            result["instructions"].as_str().unwrap().contains("fake__")
                || result["instructions"].as_str().unwrap().contains("<namespace>__<tool>")
        );
        let session = client.session.unwrap();
        assert_eq!(session.len(), 64);
        assert!(session.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}

#[tokio::test]
async fn unknown_missing_and_deleted_sessions() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));

    let mut stranger = Legacy::new(&gw.url);
    stranger.session = Some("0".repeat(64));
    assert_eq!(stranger.post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await.status, 404);

    let anonymous = Legacy::new(&gw.url);
    let reply = anonymous.post(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).await;
    assert_eq!(reply.status, 400, "{}", reply.body);

    let delete =
        client.http.delete(&gw.url).header("mcp-session-id", client.session.as_ref().unwrap()).send().await.unwrap();
    assert_eq!(delete.status(), 200);
    assert_eq!(client.post(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await.status, 404);
    let again =
        client.http.delete(&gw.url).header("mcp-session-id", client.session.as_ref().unwrap()).send().await.unwrap();
    assert_eq!(again.status(), 404);
}

#[tokio::test]
async fn protocol_version_header_rules() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let unsupported = client.post_with(ping.clone(), &[("mcp-protocol-version", "1999-01-01")]).await;
    assert_eq!(unsupported.status, 400, "{}", unsupported.body);
    assert!(unsupported.body.contains("Unsupported protocol version"));
    // Absent: the session's negotiated version applies.
    let mut bare = crate::support::http_client()
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", client.session.as_ref().unwrap());
    bare = bare.body(ping);
    assert_eq!(bare.send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn accept_and_content_type_are_checked() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(client.post_with(ping.clone(), &[("accept", "application/json")]).await.status, 406);
    assert_eq!(client.post_with(ping.clone(), &[("accept", "text/event-stream")]).await.status, 406);
    assert_eq!(client.post_with(ping.clone(), &[("content-type", "text/plain")]).await.status, 415);
    let get = client
        .http
        .get(&gw.url)
        .header("accept", "application/json")
        .header("mcp-session-id", client.session.as_ref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 406);
}

#[tokio::test]
async fn notifications_and_responses_get_202() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    let n =
        client.post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})).await;
    assert_eq!((n.status, n.body.as_str()), (202, ""));
    let r = client.post(json!({"jsonrpc": "2.0", "id": "srv-1", "result": {}})).await;
    assert_eq!(r.status, 202);
}

#[tokio::test]
async fn batches_are_rejected_from_2025_06_18_and_served_for_2025_03_26() {
    let (_up, gw) = gateway().await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]);
    let modern_session = Legacy::connect(&gw.url).await;
    let reply = modern_session.post(batch.clone()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], -32600);

    let mut old = Legacy::new(&gw.url);
    old.version = "2025-03-26".into();
    old.initialize().await;
    let reply = old.post(batch).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answers = reply.json();
    let ids: Vec<&Value> = answers.as_array().unwrap().iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2)]);
}

#[tokio::test]
async fn malformed_input_gets_specific_errors_and_the_server_keeps_serving() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    let cases: [(&str, u16, i64); 5] = [
        ("{not json", 400, -32700),
        ("[1, 2", 400, -32700),
        ("42", 400, -32600),
        (r#"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#, 400, -32600),
        (r#"{"jsonrpc": "1.0", "id": 3, "method": "ping"}"#, 400, -32600),
    ];
    for (body, status, code) in cases {
        let reply = client.post_with(body.into(), &[]).await;
        assert_eq!(reply.status, status, "{body}: {}", reply.body);
        assert_eq!(reply.json()["error"]["code"], code, "{body}");
    }
    let unknown = client.request("tools/frobnicate", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);

    let wrong_type = client.request("tools/call", json!({"name": 42})).await;
    assert_eq!(wrong_type["error"]["code"], -32602);
    assert_eq!(wrong_type["error"]["data"]["field"], "params.name");
    assert!(wrong_type["error"]["message"].as_str().unwrap().contains("params.name"));
    assert!(!wrong_type.to_string().contains("42"), "values are not echoed: {wrong_type}");

    let bad_args = client.request("tools/call", json!({"name": "fake__echo", "arguments": [1]})).await;
    assert_eq!(bad_args["error"]["data"]["field"], "params.arguments");

    // Still serving.
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let config = config_for(&[("fake", &up.url())]).replace("[gateway]", "[gateway]\nmax_body_bytes = 1024");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fake__echo", "arguments": {"message": "x".repeat(4096)}}});
    assert_eq!(client.post(big).await.status, 413);
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn answers_are_json_until_there_is_something_to_relay() {
    let (_up, gw) = gateway().await;
    let client = Legacy::connect(&gw.url).await;
    let reply = client
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "fake__echo", "arguments": {"message": "hi"}, "_meta": {"progressToken": "p1"}}}))
        .await;
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json()["result"]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn upstream_log_messages_stream_before_the_answer() {
    // This fake answers on an SSE stream that carries a notifications/message first.
    let up = FakeUpstream::new().echo_tool("echo").sse_responses().start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    let reply = client.post(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "fake__echo", "arguments": {"message": "hi"}}})).await;
    assert_eq!(reply.header("content-type"), Some("text/event-stream"), "{}", reply.body);
    let messages: Vec<Value> =
        reply.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["method"], "notifications/message");
    assert_eq!(messages[0]["params"]["data"], "working");
    assert_eq!(messages[1]["id"], 6, "the answer is the last event");
    assert_eq!(messages[1]["result"]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn get_stream_primes_keeps_alive_and_carries_list_changed() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["fake__echo"]);

    let mut stream = client.open_stream().await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let first = String::from_utf8(stream.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.starts_with("id: g1-0\n") && first.contains("data: \n"), "priming event: {first:?}");

    // The catalog refreshes every second: a new tool reaches the stream as list_changed.
    up.set_tools(vec![
        (tool_def("echo", json!({"type": "object"})), echo()),
        (tool_def("added", json!({"type": "object"})), echo()),
    ]);
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !seen.contains("notifications/tools/list_changed") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("list_changed within 20 s")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(client.tool_names().await.contains(&"fake__added".to_string()));
}
