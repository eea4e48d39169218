//! What travels while a call runs: upstream server requests relayed to the agent and answered,
//! refusals when the agent cannot answer, and cancellation in both directions.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

async fn setup(fault: Fault) -> (FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("ask").fault("ask", fault).start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    (up, gw)
}

/// Reads SSE `data:` messages from a streaming response until `stop` says so.
async fn read_until(response: &mut reqwest::Response, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut buffer = String::new();
    let mut messages = Vec::new();
    loop {
        let chunk =
            tokio::time::timeout(Duration::from_secs(20), response.chunk()).await.expect("SSE event in time").unwrap();
        let Some(chunk) = chunk else { return messages };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                let message: Value = serde_json::from_str(data).unwrap();
                let done = stop(&message);
                messages.push(message);
                if done {
                    return messages;
                }
            }
        }
    }
}

fn call_request(id: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "fake__ask", "arguments": {}}})
        .to_string()
}

fn streaming_request(client: &Legacy, body: String) -> reqwest::RequestBuilder {
    client
        .http
        .post(&client.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", client.session.as_ref().unwrap())
        .header("mcp-protocol-version", &client.version)
        .body(body)
}

async fn post_streaming(client: &Legacy, body: String) -> reqwest::Response {
    streaming_request(client, body).send().await.unwrap()
}

#[tokio::test]
async fn an_upstream_sampling_request_reaches_an_agent_that_declared_sampling_and_the_answer_goes_back() {
    let (up, gw) = setup(Fault::AskClient("sampling/createMessage")).await;
    let mut client = Legacy::new(&gw.url);
    let init = client
        .post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    client.session = init.header("mcp-session-id").map(str::to_string);

    let mut stream = post_streaming(&client, call_request(1)).await;
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let first = read_until(&mut stream, |m| m.get("method").is_some()).await;
    let ask = first.last().unwrap();
    assert_eq!(ask["method"], "sampling/createMessage");
    let relayed_id = ask["id"].as_str().unwrap().to_string();
    assert!(relayed_id.starts_with("gatehouse-"), "the gateway mints its own ids: {relayed_id}");

    let answer = json!({"jsonrpc": "2.0", "id": relayed_id, "result": {"role": "assistant", "content": {"type": "text", "text": "forty-two"}}});
    assert_eq!(client.post(answer).await.status, 202);
    let rest = read_until(&mut stream, |m| m.get("result").is_some()).await;
    let result = rest.last().unwrap();
    assert_eq!(result["id"], 1);
    assert!(result["result"]["content"][0]["text"].as_str().unwrap().contains("forty-two"), "{result}");
    assert!(
        up.hits("").iter().any(|h| h.id == Some(json!("srv-1")) || h.id == Some(json!("srv-0"))),
        "the answer was POSTed upstream"
    );
}

#[tokio::test]
async fn server_requests_an_agent_cannot_answer_are_refused_upstream() {
    let (_up, gw) = setup(Fault::AskClient("elicitation/create")).await;
    // A legacy session that declared nothing.
    let client = Legacy::connect(&gw.url).await;
    let reply = client.call_tool("fake__ask", json!({})).await;
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("-32601") && text.contains("elicitation/create"), "the upstream got a refusal: {text}");

    // 2026-07-28 agents are never sent server requests.
    let reply = modern(&gw.url, "tools/call", json!({"name": "fake__ask", "arguments": {}}), &[]).await.json();
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("-32601"), "{reply}");
}

#[tokio::test]
async fn notifications_cancelled_from_the_agent_cancels_the_upstream_request() {
    let (up, gw) = setup(Fault::Hang).await;
    let client = Legacy::connect(&gw.url).await;
    let pending = post_streaming(&client, call_request(77));
    let cancel = async {
        for _ in 0..100 {
            if up.hit_count("tools/call") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let reply = client.post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77, "reason": "user"}})).await;
        assert_eq!(reply.status, 202);
    };
    let (response, ()) = tokio::join!(pending, cancel);
    let body = response.text().await.unwrap();
    assert!(!body.contains("\"id\":77"), "a cancelled request gets no answer: {body}");
    let upstream_id = up.hits("tools/call")[0].id.clone().unwrap();
    wait_for(|| up.hits("notifications/cancelled").iter().any(|h| h.params["requestId"] == upstream_id)).await;
    // The call is still audited, as cancelled.
    let text = http_client().get(format!("{}/v1/audit", gw.base)).send().await.unwrap().text().await.unwrap();
    let audit: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(audit["events"][0]["outcome"], "cancelled", "{audit}");
}

#[tokio::test]
async fn an_agent_that_goes_away_cancels_the_upstream_request() {
    let (up, gw) = setup(Fault::Hang).await;
    let client = Legacy::connect(&gw.url).await;
    let request = streaming_request(&client, call_request(5));
    let call = tokio::spawn(async move {
        let _ = request.send().await;
    });
    wait_for(|| up.hit_count("tools/call") == 1).await;
    call.abort();
    let upstream_id = up.hits("tools/call")[0].id.clone().unwrap();
    wait_for(|| up.hits("notifications/cancelled").iter().any(|h| h.params["requestId"] == upstream_id)).await;
}

async fn wait_for(condition: impl Fn() -> bool) {
    for _ in 0..250 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not met within 5 s");
}
