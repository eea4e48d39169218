//! The two health tiers: liveness (degraded, then down) and probes (scheduled, and immediate on
//! an upstream's list_changed), as /healthz reports them.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

fn config(url: &str, extra: &str) -> String {
    format!(
        "[gateway]\nauth_disabled = true\nmanifest_ttl = \"1h\"\n{PLAIN_CATALOG}{}{extra}",
        upstream_block("fake", url)
    )
}

#[tokio::test]
async fn one_missed_ping_degrades_two_take_it_down_and_it_comes_back() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config(&up.url(), "ping_interval = \"300ms\"\n")).await;
    let client = Legacy::connect(&gw.url).await;
    gw.wait_for_state("fake", "up").await;
    up.set_down(true);

    let degraded = gw.wait_for_state("fake", "degraded").await;
    assert_eq!(degraded["last_error"]["class"], "http_status", "{degraded}");
    assert_eq!(client.tool_names().await, ["fake__echo"], "a degraded upstream keeps its tools");

    let down = gw.wait_for_state("fake", "down").await;
    assert!(down["last_error"]["at"].is_string());
    assert!(client.tool_names().await.is_empty(), "a down upstream's tools are withdrawn");
    assert_eq!(gw.healthz().await["status"], "degraded");

    up.set_down(false);
    gw.wait_for_state("fake", "up").await;
    assert_eq!(client.tool_names().await, ["fake__echo"]);
    assert!(up.hit_count("ping") >= 2, "liveness uses ping");
}

#[tokio::test]
async fn an_announced_list_change_is_probed_at_once() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    // The scheduled probe is an hour away: only the announcement can explain a quick update.
    let gw = TestGateway::start(&config(&up.url(), "")).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["fake__echo"]);
    for _ in 0..200 {
        if up.get_streams_opened() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(up.get_streams_opened(), 1, "the gateway watches the upstream's GET stream");

    up.set_tools(vec![
        (tool_def("echo", json!({"type": "object"})), echo()),
        (tool_def("fresh", json!({"type": "object"})), echo()),
    ]);
    let announced = Instant::now();
    up.announce_tools_changed();
    loop {
        if client.tool_names().await.contains(&"fake__fresh".to_string()) {
            break;
        }
        assert!(announced.elapsed() < Duration::from_secs(20), "the change never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("list_changed to catalog: {} ms", announced.elapsed().as_millis());
}

#[tokio::test]
async fn an_unchanged_probe_changes_nothing_downstream() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config(&up.url(), "probe_interval = \"200ms\"\n")).await;
    let client = Legacy::connect(&gw.url).await;
    let before = gw.wait_for_state("fake", "up").await;
    let mut stream = client.open_stream().await;
    let _priming = stream.chunk().await.unwrap();
    for _ in 0..100 {
        if up.hit_count("tools/list") >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up.hit_count("tools/list") >= 4, "probed repeatedly");
    let quiet = tokio::time::timeout(Duration::from_millis(500), stream.chunk()).await;
    assert!(quiet.is_err(), "no list_changed for an unchanged fingerprint: {quiet:?}");
    assert_eq!(gw.healthz().await["upstreams"][0]["fingerprint"], before["fingerprint"]);
}
