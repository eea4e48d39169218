//! Resource subscriptions through the gateway (legacy sessions): one upstream subscription per
//! resource whoever asks, updates relayed to every subscriber's GET stream under the URI it
//! subscribed with, and released by the last subscriber — by unsubscribing or by ending.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fake_upstream::FakeUpstreamBuilder;
use crate::support::*;

/// Reads a session's GET stream until a `notifications/resources/updated` arrives.
async fn next_update(stream: &mut reqwest::Response) -> Value {
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(data) = seen
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .find(|d| d.contains("notifications/resources/updated"))
        {
            return serde_json::from_str(data).unwrap();
        }
        let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.expect("an update within 20 s");
        seen.push_str(&String::from_utf8_lossy(&chunk.unwrap().expect("stream open")));
    }
}

/// A gateway in front of one fake upstream (`fake`) serving `file:///notes.txt`.
async fn gateway_with_notes(upstream: FakeUpstreamBuilder) -> (FakeUpstream, TestGateway) {
    let up = upstream.echo_tool("echo").resource("file:///notes.txt", "hello").start().await;
    let gw = TestGateway::start(&config_for(&[("fake", &up.url())])).await;
    (up, gw)
}

/// The URI agents see for the notes resource (as listed, namespaced).
async fn notes_uri(client: &Legacy) -> String {
    let listed = client.request("resources/list", json!({})).await;
    listed["result"]["resources"][0]["uri"].as_str().unwrap_or_else(|| panic!("{listed}")).to_string()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn subscribers_share_one_upstream_subscription_and_each_gets_the_update() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new()).await;
    let mut a = Legacy::new(&gw.url);
    let init = a.initialize().await;
    assert_eq!(init["capabilities"]["resources"]["subscribe"], true, "{init}");
    let b = Legacy::connect(&gw.url).await;
    let uri = notes_uri(&a).await;
    assert_ne!(uri, "file:///notes.txt", "agents see the namespaced URI: {uri}");

    let (mut stream_a, mut stream_b) = (a.open_stream().await, b.open_stream().await);
    for client in [&a, &b] {
        let reply = client.request("resources/subscribe", json!({ "uri": uri })).await;
        assert_eq!(reply["result"], json!({}), "{reply}");
    }
    let subscribed = up.hits("resources/subscribe");
    assert_eq!(subscribed.len(), 1, "one upstream subscription serves both sessions");
    assert_eq!(subscribed[0].params["uri"], "file:///notes.txt", "the upstream is asked for its own URI");

    wait_until("the gateway watches the upstream's stream", || up.get_streams_opened() > 0).await;
    up.announce_resource_updated("file:///notes.txt");
    for stream in [&mut stream_a, &mut stream_b] {
        let update = next_update(stream).await;
        assert_eq!(update["params"]["uri"], uri.as_str(), "under the URI the agent subscribed with: {update}");
    }

    let reply = a.request("resources/unsubscribe", json!({ "uri": uri })).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    assert_eq!(up.hit_count("resources/unsubscribe"), 0, "b still holds the subscription");
    up.announce_resource_updated("file:///notes.txt");
    assert_eq!(next_update(&mut stream_b).await["params"]["uri"], uri.as_str());
    let quiet = tokio::time::timeout(Duration::from_millis(300), stream_a.chunk()).await;
    assert!(quiet.is_err(), "a unsubscribed and hears nothing more: {quiet:?}");

    b.request("resources/unsubscribe", json!({ "uri": uri })).await;
    assert_eq!(up.hit_count("resources/unsubscribe"), 1, "the last subscriber releases it upstream");
    assert_eq!(up.hits("resources/unsubscribe")[0].params["uri"], "file:///notes.txt");
}

#[tokio::test]
async fn an_ended_session_releases_its_subscriptions_and_unknown_uris_are_refused() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new()).await;
    let client = Legacy::connect(&gw.url).await;
    let uri = notes_uri(&client).await;

    let missing = client.request("resources/subscribe", json!({ "uri": "fake+file:///absent" })).await;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    assert!(!missing.to_string().contains("/srv/data"), "the upstream's message is not relayed: {missing}");
    let unroutable = client.request("resources/subscribe", json!({ "uri": "nowhere+file:///x" })).await;
    assert_eq!(unroutable["error"]["code"], -32002, "{unroutable}");
    assert_eq!(up.hit_count("resources/unsubscribe"), 0, "a refused subscription holds nothing upstream");
    let bad = client.request("resources/subscribe", json!({})).await;
    assert_eq!(bad["error"]["code"], -32602, "a missing uri is invalid params: {bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("uri"), "{bad}");

    let reply = client.request("resources/subscribe", json!({ "uri": uri })).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    let ended = client
        .http
        .delete(&client.url)
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    wait_until("the ended session's subscription is released", || up.hit_count("resources/unsubscribe") == 1).await;
}

#[tokio::test]
async fn a_2026_agent_subscribes_on_its_listen_stream_and_closing_it_releases_the_subscription() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new()).await;
    let listed = modern(&gw.url, "resources/list", json!({}), &[]).await.json();
    let uri = listed["result"]["resources"][0]["uri"].as_str().unwrap().to_string();
    let notifications = json!({"resourceSubscriptions": [uri, "nowhere+file:///x"]});
    let mut stream = open_listen(&gw.url, "sub-9", notifications).await;
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let ack = String::from_utf8(stream.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    let ack: Value = serde_json::from_str(ack.lines().find_map(|l| l.strip_prefix("data: ")).unwrap()).unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [uri]}),
        "only the resource that exists is accepted, nothing unasked for"
    );
    assert_eq!(up.hit_count("resources/subscribe"), 1);

    wait_until("the gateway watches the upstream's stream", || up.get_streams_opened() > 0).await;
    up.announce_resource_updated("file:///notes.txt");
    let update = next_update(&mut stream).await;
    assert_eq!(update["params"]["uri"], uri.as_str(), "{update}");
    assert_eq!(update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "sub-9", "{update}");

    drop(stream);
    wait_until("closing the stream releases the upstream subscription", || up.hit_count("resources/unsubscribe") == 1)
        .await;
}

#[tokio::test]
async fn modern_requests_have_no_resources_subscribe() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new()).await;
    let reply = modern(&gw.url, "resources/subscribe", json!({ "uri": "fake+file:///notes.txt" }), &[]).await;
    assert_eq!(reply.json()["error"]["code"], -32601, "2026-07-28 removed the method: {}", reply.body);
    assert_eq!(up.hit_count("resources/subscribe"), 0);
}

#[tokio::test]
async fn a_2026_upstream_is_subscribed_through_its_notification_stream() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new().era(Era::Modern)).await;
    let client = Legacy::connect(&gw.url).await;
    let uri = notes_uri(&client).await;
    let mut stream = client.open_stream().await;
    let listens = |up: &FakeUpstream| up.hits("subscriptions/listen");
    wait_until("the gateway listens to the upstream", || !listens(&up).is_empty()).await;

    let reply = client.request("resources/subscribe", json!({ "uri": uri })).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    assert_eq!(up.hit_count("resources/subscribe"), 0, "2026-07-28 has no resources/subscribe");
    wait_until("the stream is reopened with the resource", || {
        listens(&up)
            .last()
            .is_some_and(|h| h.params["notifications"]["resourceSubscriptions"] == json!(["file:///notes.txt"]))
    })
    .await;
    up.announce_resource_updated("file:///notes.txt");
    assert_eq!(next_update(&mut stream).await["params"]["uri"], uri.as_str());

    client.request("resources/unsubscribe", json!({ "uri": uri })).await;
    wait_until("the stream is reopened without it", || {
        listens(&up).last().is_some_and(|h| h.params["notifications"].get("resourceSubscriptions").is_none())
    })
    .await;
}

#[tokio::test]
async fn a_new_upstream_session_is_subscribed_again() {
    let (up, gw) = gateway_with_notes(FakeUpstream::new()).await;
    let client = Legacy::connect(&gw.url).await;
    let uri = notes_uri(&client).await;
    client.request("resources/subscribe", json!({ "uri": uri })).await;
    assert_eq!(up.hit_count("resources/subscribe"), 1);

    // The upstream forgets its sessions (a restart): the next request re-initializes.
    up.expire_sessions();
    let called = client.call_tool("fake__echo", json!({ "message": "hi" })).await;
    assert_eq!(called["result"]["content"][0]["text"], "hi", "{called}");
    let subscribed = up.hits("resources/subscribe");
    assert_eq!(subscribed.len(), 2, "the subscription is renewed on the new upstream session");
    let session = |i: usize| subscribed[i].headers.get("mcp-session-id").cloned();
    assert_ne!(session(0), session(1));
    assert_eq!(subscribed[1].params["uri"], "file:///notes.txt");
}
