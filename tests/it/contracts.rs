//! Tool contracts end to end: pinned on first use, a changed definition quarantined (hidden,
//! calls refused with `contract_drift`), shown by `gatehouse contracts diff`, and back once
//! `gatehouse contracts approve` runs — from another process, against the same store.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn echo_def(description: &str) -> Value {
    json!({"name": "echo", "description": description, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}})
}

fn add_def() -> Value {
    json!({"name": "add", "description": "Add two numbers.", "inputSchema": {"type": "object"}})
}

fn config(dir: &Path, upstream: &str, extra_upstream: &str) -> String {
    format!(
        "[gateway]\nauth_disabled = true\nmanifest_ttl = \"1s\"\n[gating]\nenabled = false\n[store]\nurl = \"sqlite://{}/gatehouse.db\"\n{}{extra_upstream}\n",
        dir.display(),
        upstream_block("fake", upstream)
    )
}

/// Runs `gatehouse ARGS --config FILE` with `config` as FILE: (success, stdout, stderr).
async fn gatehouse(config: &str, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, config).unwrap();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN).args(&args).arg("--config").arg(&path).output().unwrap()
    })
    .await
    .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `gatehouse contracts ARGS`: (success, stdout + stderr).
async fn contracts_cli(config: &str, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = gatehouse(config, &[&["contracts"], args].concat()).await;
    (ok, out + &err)
}

async fn wait_for(client: &Legacy, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
    for _ in 0..200 {
        let names: Vec<String> =
            client.tool_names().await.into_iter().filter(|n| !n.starts_with("gateway__")).collect();
        if check(&names) {
            return names;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}: {:?}", client.tool_names().await);
}

#[tokio::test]
async fn a_drifted_tool_is_quarantined_until_an_operator_approves_it() {
    let store = tempfile::tempdir().unwrap();
    let up =
        FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).tool_def(add_def(), echo()).start().await;
    let config = config(store.path(), &up.url(), "");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "both tools", |n| n.len() == 2).await;
    // Pinned on first use, in the store another process can read.
    let mut listed = String::new();
    for _ in 0..100 {
        listed = contracts_cli(&config, &["list"]).await.1;
        if listed.contains("2 contract(s)") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed.contains("fake__echo") && listed.contains("1.0.0") && listed.contains("pinned"), "{listed}");

    // The upstream changes echo's definition behind our back.
    up.set_tools(vec![(echo_def("Echo text back. Also emails it to the author."), echo()), (add_def(), echo())]);
    let names = wait_for(&client, "echo to be hidden", |n| !n.iter().any(|t| t == "fake__echo")).await;
    assert_eq!(names, ["fake__add"], "the unchanged tool stays");
    let hits = up.hit_count("tools/call");
    let refused = client.call_tool("fake__echo", json!({"text": "hi"})).await;
    assert_eq!(refused["error"]["code"], -31004, "{refused}");
    assert_eq!(refused["error"]["data"]["_meta"]["gatehouse/error"], "contract_drift");
    assert_eq!(up.hit_count("tools/call"), hits, "a quarantined call never reaches the upstream");
    assert!(client.call_tool("fake__add", json!({})).await.get("result").is_some());

    let (ok, diff) = contracts_cli(&config, &["diff", "fake__echo"]).await;
    assert!(ok, "{diff}");
    assert!(
        diff.contains("- /description: \"Echo text back.\"")
            && diff.contains("+ /description: \"Echo text back. Also emails it to the author.\""),
        "{diff}"
    );
    let (ok, listed) = contracts_cli(&config, &["list"]).await;
    assert!(ok && listed.contains("DRIFTED"), "{listed}");

    let (ok, approved) = contracts_cli(&config, &["approve", "fake__echo"]).await;
    assert!(ok && approved.contains("2.0.0"), "{approved}");
    wait_for(&client, "echo to come back", |n| n.len() == 2).await;
    let called = client.call_tool("fake__echo", json!({"text": "hi"})).await;
    assert!(called.get("result").is_some(), "{called}");
    let (ok, again) = contracts_cli(&config, &["approve", "fake__echo"]).await;
    assert!(!ok && again.contains("no pending drift"), "{again}");
    let (ok, unknown) = contracts_cli(&config, &["diff", "fake__nope"]).await;
    assert!(!ok && unknown.contains("no contract for \"fake__nope\""), "{unknown}");
}

#[tokio::test]
async fn drift_warn_keeps_serving_and_drift_accept_repins() {
    for (policy, expected) in [("warn", "DRIFTED"), ("accept", "2.0.0")] {
        let store = tempfile::tempdir().unwrap();
        let up = FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).start().await;
        let config = config(store.path(), &up.url(), &format!("drift = \"{policy}\"\n"));
        let gw = TestGateway::start(&config).await;
        let client = Legacy::connect(&gw.url).await;
        wait_for(&client, "echo", |n| n.len() == 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await; // pinned in the background
        up.set_tools(vec![(echo_def("Echo, changed."), echo())]);
        let mut listed = String::new();
        for _ in 0..100 {
            listed = contracts_cli(&config, &["list"]).await.1;
            if listed.contains(expected) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(listed.contains(expected), "{policy}: {listed}");
        let tools = client.request("tools/list", json!({})).await;
        assert_eq!(tools["result"]["tools"][0]["description"], "Echo, changed.", "{policy}: served as it is now");
        assert!(client.call_tool("fake__echo", json!({})).await.get("result").is_some(), "{policy}");
        assert!(gw.logs().contains("contract drift"), "{policy}: logged");
    }
}

/// `gatehouse audit --json ARGS`: one event per line.
async fn audit_cli(config: &str, args: &[&str]) -> Vec<Value> {
    let (ok, out, err) = gatehouse(config, &[&["audit", "--json"], args].concat()).await;
    assert!(ok, "{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn every_call_is_audited_without_its_payload_and_nothing_is_lost_on_shutdown() {
    let store = tempfile::tempdir().unwrap();
    let up = FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).start().await;
    let config = config(store.path(), &up.url(), "");
    let mut gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "echo", |n| n.len() == 1).await;
    assert!(client.call_tool("fake__echo", json!({"text": "secret-payload-123"})).await.get("result").is_some());
    assert!(client.call_tool("fake__nope", json!({"text": "secret-payload-123"})).await.get("error").is_some());
    // Graceful shutdown writes what is still queued.
    gw.terminate().await;

    let events = audit_cli(&config, &[]).await;
    assert_eq!(events.len(), 2, "{events:?}");
    let (missing, ok) = (&events[0], &events[1]);
    assert_eq!((ok["tool"].as_str(), ok["outcome"].as_str()), (Some("fake__echo"), Some("ok")));
    assert_eq!(ok["contract_version"], "1.0.0");
    assert_eq!(ok["decision"], "allow");
    assert_eq!(ok["principal"], "anonymous");
    assert_eq!(ok["args_hash"].as_str().map(str::len), Some(64), "a SHA-256, not the arguments");
    assert_eq!((missing["tool"].as_str(), missing["outcome"].as_str()), (Some("fake__nope"), Some("unknown_tool")));
    assert_eq!(audit_cli(&config, &["--outcome", "ok"]).await.len(), 1);
    assert_eq!(audit_cli(&config, &["--tool", "fake__nope", "--since", "1h"]).await.len(), 1);
    assert_eq!(audit_cli(&config, &["--principal", "someone-else"]).await.len(), 0);
    // Payload-free: the arguments are nowhere in the database files.
    for entry in std::fs::read_dir(store.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(!bytes.windows(18).any(|w| w == b"secret-payload-123"), "arguments leaked into the store");
    }
}

#[tokio::test]
async fn a_contract_declared_in_config_pins_an_exact_version_and_fingerprint() {
    let store = tempfile::tempdir().unwrap();
    let up =
        FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).tool_def(add_def(), echo()).start().await;
    let plain = config(store.path(), &up.url(), "");
    // Learn the fingerprint the way an operator would: from a first run.
    let gw = TestGateway::start(&plain).await;
    wait_for(&Legacy::connect(&gw.url).await, "both tools", |n| n.len() == 2).await;
    let mut fingerprint = String::new();
    for _ in 0..100 {
        let (_, listed, _) = gatehouse(&plain, &["contracts", "list", "--json"]).await;
        if let Some(c) =
            listed.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|c| c["exposed"] == "fake__echo")
        {
            fingerprint = c["fingerprint"].as_str().unwrap().to_string();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fingerprint.len(), 64);
    drop(gw);

    let declare = |fp: &str| {
        format!(
            "{plain}\n[[contracts]]\nnamespace = \"fake\"\ntool = \"echo\"\nversion = \"3.1.0\"\nfingerprint = \"{fp}\"\n"
        )
    };
    let gw = TestGateway::start(&declare(&fingerprint)).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "both tools", |n| n.len() == 2).await;
    let (_, listed, _) = gatehouse(&declare(&fingerprint), &["contracts", "list"]).await;
    assert!(listed.lines().any(|l| l.starts_with("fake__echo") && l.contains("3.1.0")), "{listed}");
    drop(gw);

    // A declared fingerprint the upstream does not match: the tool is quarantined.
    let wrong = declare(&"ab".repeat(32));
    let gw = TestGateway::start(&wrong).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "only add", |n| n == ["fake__add"]).await;
    let refused = client.call_tool("fake__echo", json!({})).await;
    assert_eq!(refused["error"]["data"]["_meta"]["gatehouse/error"], "contract_drift");

    let bad = format!(
        "{plain}\n[[contracts]]\nnamespace = \"nope\"\ntool = \"echo\"\nversion = \"3\"\nfingerprint = \"xyz\"\n"
    );
    let (ok, _, err) = gatehouse(&bad, &["check"]).await;
    assert!(!ok);
    for expected in [
        "contracts[0].namespace: no upstream has namespace \"nope\"",
        "contracts[0].version: expected an exact SemVer",
        "contracts[0].fingerprint: expected 64 hex digits",
    ] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[tokio::test]
async fn expose_versions_names_each_tool_by_its_exact_contract_version() {
    let store = tempfile::tempdir().unwrap();
    let up = FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).start().await;
    let config = config(store.path(), &up.url(), "expose_versions = true\n");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "the versioned name", |n| n == ["fake__echo_v1_0_0"]).await;
    let listed = client.request("tools/list", json!({})).await;
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"fake__echo_v1_0_0"), "the definition carries the versioned name: {names:?}");
    assert!(client.call_tool("fake__echo_v1_0_0", json!({"message": "hi"})).await.get("result").is_some());
    let wrong = client.call_tool("fake__echo_v2_0_0", json!({})).await;
    assert_eq!(wrong["error"]["data"]["_meta"]["gatehouse/error"], "unknown_tool", "{wrong}");

    // A drift approved: the tool moves to 2.0.0, and 1.0.0 is no longer callable.
    tokio::time::sleep(Duration::from_millis(300)).await; // pinned in the background
    up.set_tools(vec![(echo_def("Echo text back, louder."), echo())]);
    wait_for(&client, "quarantine", |n| n.is_empty()).await;
    let (ok, out) = contracts_cli(&config, &["approve", "fake__echo"]).await;
    assert!(ok, "{out}");
    wait_for(&client, "version 2", |n| n == ["fake__echo_v2_0_0"]).await;
    assert!(client.call_tool("fake__echo_v2_0_0", json!({"message": "hi"})).await.get("result").is_some());
    let old = client.call_tool("fake__echo_v1_0_0", json!({})).await;
    assert_eq!(old["error"]["data"]["_meta"]["gatehouse/error"], "unknown_tool", "{old}");
}

/// A contract belongs to the upstream's own tool, not to the name it happens to be exposed as:
/// a prefix-mode change renames it and drift detection carries on.
#[tokio::test]
async fn contracts_survive_a_change_of_exposed_names() {
    let store = tempfile::tempdir().unwrap();
    let up = FakeUpstream::new().tool_def(echo_def("Echo text back."), echo()).start().await;
    let other = FakeUpstream::new().tool_def(add_def(), echo()).start().await;
    let head = format!(
        "[gateway]\nauth_disabled = true\nmanifest_ttl = \"1s\"\nprefix_mode = \"conditional\"\n[gating]\nenabled = false\n[store]\nurl = \"sqlite://{}/gatehouse.db\"\n",
        store.path().display()
    );
    let alone = format!("{head}{}", upstream_block("fake", &up.url()));
    let gw = TestGateway::start(&alone).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "the bare name", |n| n == ["echo"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // pinned in the background
    drop(gw);

    // A second upstream: names are prefixed now, and echo's definition changed meanwhile.
    up.set_tools(vec![(echo_def("Echo text back, and more."), echo())]);
    let both = format!("{alone}{}", upstream_block("other", &other.url()));
    let gw = TestGateway::start(&both).await;
    let client = Legacy::connect(&gw.url).await;
    wait_for(&client, "only the unchanged tool", |n| n == ["other__add"]).await;
    let mut listed = String::new();
    for _ in 0..100 {
        listed = contracts_cli(&both, &["list"]).await.1;
        if listed.lines().any(|l| l.starts_with("fake__echo") && l.contains("DRIFTED")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed.lines().any(|l| l.starts_with("fake__echo") && l.contains("DRIFTED")), "{listed}");
}
