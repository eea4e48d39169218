//! Upstreams that misbehave: each fault becomes a clean, classified error for that call only,
//! with nothing of the upstream's body on the wire, and the gateway keeps serving.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn call_with_fault(fault: Fault, upstream_timeout: &str) -> (Value, Legacy, FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("bad").echo_tool("good").fault("bad", fault).start().await;
    let config = format!("{}timeout = \"{upstream_timeout}\"\n", config_for(&[("fake", &up.url())]));
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    let reply = client.call_tool("fake__bad", json!({})).await;
    (reply, client, up, gw)
}

async fn still_serving(client: &Legacy) {
    assert_eq!(client.call_tool("fake__good", json!({"message": "ok"})).await["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn malformed_json_from_upstream_is_an_upstream_error() {
    let (reply, client, _up, _gw) = call_with_fault(Fault::MalformedJson, "10s").await;
    assert_eq!(reply["error"]["data"]["_meta"]["gatehouse/error"], "upstream_error", "{reply}");
    assert_eq!(reply["error"]["data"]["upstream"], "fake");
    still_serving(&client).await;
}

#[tokio::test]
async fn a_50_mb_body_is_cut_off_not_buffered() {
    let (reply, client, _up, gw) = call_with_fault(Fault::HugeBody(50 * 1024 * 1024), "30s").await;
    assert_eq!(
        reply["error"]["data"]["_meta"]["gatehouse/error"],
        "upstream_error",
        "{}",
        &reply.to_string()[..200.min(reply.to_string().len())]
    );
    assert!(reply.to_string().len() < 1024, "no upstream payload relayed");
    assert!(gw.logs().contains("too_large"), "operators see why");
    still_serving(&client).await;
}

#[tokio::test]
async fn a_stream_closed_midway_is_an_upstream_error() {
    let (reply, client, _up, _gw) = call_with_fault(Fault::CloseMidStream, "10s").await;
    let class = reply["error"]["data"]["_meta"]["gatehouse/error"].as_str().unwrap().to_string();
    assert!(class == "upstream_error" || class == "upstream_unavailable", "{reply}");
    still_serving(&client).await;
}

#[tokio::test]
async fn an_http_500_never_leaks_the_upstream_body() {
    let (reply, client, _up, _gw) = call_with_fault(Fault::Http(http::StatusCode::INTERNAL_SERVER_ERROR), "10s").await;
    assert_eq!(reply["error"]["data"]["_meta"]["gatehouse/error"], "upstream_error");
    let text = reply.to_string();
    assert!(!text.contains("/srv/app.py") && !text.contains("exploded"), "{text}");
    still_serving(&client).await;
}

#[tokio::test]
async fn a_slow_upstream_hits_its_deadline() {
    let (reply, client, _up, _gw) = call_with_fault(Fault::Delay(Duration::from_secs(5)), "500ms").await;
    assert_eq!(reply["error"]["data"]["_meta"]["gatehouse/error"], "deadline_exceeded", "{reply}");
    assert_eq!(reply["error"]["data"]["upstream"], "fake");
    still_serving(&client).await;
}

#[tokio::test]
async fn a_notification_flood_is_bounded_and_the_call_still_completes() {
    let (_reply, client, _up, _gw) = call_with_fault(Fault::Flood(20_000), "30s").await;
    // Progress-tracked, so the flood is relayed as far as the bounded relay lets it.
    let reply = client
        .post(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "fake__bad", "arguments": {}, "_meta": {"progressToken": "mine"}}}))
        .await;
    let messages: Vec<Value> =
        reply.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    let last = messages.last().unwrap();
    assert_eq!(last["result"]["content"][0]["text"], "survived");
    assert!(messages.len() <= 20_001, "nothing is duplicated");
    still_serving(&client).await;
}

#[tokio::test]
async fn a_stdio_server_writing_junk_to_stdout_is_still_served() {
    let python = crate::support::peers::python().display().to_string();
    let script = crate::support::peers::interop_file("strict_legacy_server.py").display().to_string();
    let config = format!(
        "[gateway]\nauth_disabled = true\n[[upstreams]]\nnamespace = \"noisy\"\ncommand = {python:?}\nargs = [{script:?}, \"--noisy\"]\n"
    );
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    let reply = client.call_tool("noisy__whoami", json!({})).await;
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().parse::<u32>().is_ok(), "{reply}");
    assert!(gw.logs().contains("not JSON-RPC"), "the junk is reported");
}
