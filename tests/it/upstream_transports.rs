//! stdio and legacy HTTP+SSE upstreams: real reference servers as child processes and over SSE,
//! a 2026-07-28 Python SDK server over stdio, era probing against a strict legacy server, restarts, no orphans.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::peers::*;
use crate::support::*;

fn stdio_block(namespace: &str, command: &str, args: &[String]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!("\n[[upstreams]]\nnamespace = \"{namespace}\"\ncommand = {command:?}\nargs = [{}]\n", args.join(", "))
}

fn node_script(package: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![interop_dir().join("node_modules").join(package).join("dist/index.js").display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn reference_servers_config() -> String {
    let node = node().display().to_string();
    format!(
        "[gateway]\nauth_disabled = true\n{PLAIN_CATALOG}{}{}",
        stdio_block("everything", &node, &node_script("@modelcontextprotocol/server-everything", &["stdio"])),
        stdio_block("memory", &node, &node_script("@modelcontextprotocol/server-memory", &[]))
    )
}

/// Two stdio upstreams and server-everything in its legacy HTTP+SSE mode behind one gateway
/// (once configured with `use_sse`, once found by the automatic fallback).
#[tokio::test]
async fn reference_servers_over_stdio_and_legacy_sse_through_the_python_sdk() {
    let sse = server_everything("sse").await;
    let config = format!(
        "{}\n[[upstreams]]\nnamespace = \"sse\"\nurl = \"{}\"\nuse_sse = true\n\n[[upstreams]]\nnamespace = \"found\"\nurl = \"{}\"\n",
        reference_servers_config(),
        sse.url,
        sse.url
    );
    let gw = TestGateway::start(&config).await;
    for ns in ["everything", "memory"] {
        let health = gw.wait_for_state(ns, "up").await;
        assert_eq!(health["transport"], "stdio");
        assert!(health["pid"].as_u64().is_some());
    }
    for ns in ["sse", "found"] {
        assert_eq!(gw.wait_for_state(ns, "up").await["transport"], "sse", "{ns}");
    }
    for era in ["legacy", "modern"] {
        let out = sdk_client(era, &gw.url, Some(("sse__echo", r#"{"message": "over sse"}"#)), None).await;
        assert_eq!(out["call"]["content"][0]["text"], "Echo: over sse", "{era}");
        let out = sdk_client(era, &gw.url, Some(("found__get-sum", r#"{"a": 1, "b": 2}"#)), None).await;
        assert!(out["call"]["content"][0]["text"].as_str().unwrap().contains('3'), "{out}");
    }
    for era in ["legacy", "modern"] {
        let out = sdk_client(era, &gw.url, Some(("everything__echo", r#"{"message": "over stdio"}"#)), None).await;
        let tools: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert!(tools.contains(&"everything__get-sum") && tools.contains(&"memory__read_graph"), "{tools:?}");
        assert_eq!(out["call"]["content"][0]["text"], "Echo: over stdio");
        let out = sdk_client(era, &gw.url, Some(("memory__read_graph", "{}")), None).await;
        assert_eq!(out["call"]["is_error"], false, "{out}");
        assert!(out["call"]["content"][0]["text"].as_str().unwrap().contains("entities"), "{out}");
    }
}

#[tokio::test]
async fn a_2026_07_28_python_sdk_server_over_stdio() {
    let python = python().display().to_string();
    let fixture = interop_file("conformance_fixture.py").display().to_string();
    let config =
        format!("[gateway]\nauth_disabled = true\n{}", stdio_block("fixture", &python, &[fixture, "--stdio".into()]));
    let gw = TestGateway::start(&config).await;
    assert_eq!(gw.wait_for_state("fixture", "up").await["protocol"], "2026-07-28");
    let client = Legacy::connect(&gw.url).await;
    let reply = client.call_tool("fixture__test_simple_text", json!({})).await;
    assert_eq!(reply["result"]["content"][0]["type"], "text", "{reply}");
    let out = sdk_client("modern", &gw.url, Some(("fixture__add_numbers", r#"{"a": 2, "b": 3}"#)), None).await;
    assert_eq!(out["call"]["structured"]["sum"], 5, "{out}");
}

#[tokio::test]
async fn a_strict_legacy_server_that_exits_on_the_probe_is_restarted_as_legacy() {
    let python = python().display().to_string();
    let script = interop_file("strict_legacy_server.py").display().to_string();
    let config = format!("[gateway]\nauth_disabled = true\n{}", stdio_block("strict", &python, &[script]));
    let gw = TestGateway::start(&config).await;
    let health = gw.wait_for_state("strict", "up").await;
    assert_eq!(health["protocol"], "2025-06-18");
    let client = Legacy::connect(&gw.url).await;
    let pid = client.call_tool("strict__whoami", json!({})).await["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(pid, health["pid"].to_string());
    let logs = gw.logs();
    assert!(logs.contains("exited on server/discover"), "the probe's casualty is logged");
    // The server's own stderr line reaches the gateway's log, tagged with its namespace.
    let stderr_line = logs.lines().find(|l| l.contains("before initialize; exiting")).expect("stderr captured");
    assert!(stderr_line.contains("strict"), "{stderr_line}");
}

#[tokio::test]
async fn a_killed_stdio_upstream_is_restarted_and_the_next_call_succeeds() {
    let gw = TestGateway::start(&reference_servers_config()).await;
    let before = gw.wait_for_state("memory", "up").await["pid"].as_u64().unwrap();
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.call_tool("memory__read_graph", json!({})).await["result"]["isError"], json!(null));

    let killed = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(before as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    // Down and back up again (the restart can be quicker than a /healthz poll).
    let up = loop {
        let health = gw.healthz().await;
        let memory =
            health["upstreams"].as_array().unwrap().iter().find(|u| u["namespace"] == "memory").unwrap().clone();
        if memory["state"] == "up" && memory["pid"].as_u64().is_some_and(|pid| pid != before) {
            break memory;
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "not restarted: {memory}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let recovered = killed.elapsed();
    assert_eq!(up["last_error"]["class"], "exited", "{up}");
    assert!(gw.logs().contains(r#"to="down""#), "the outage was reported");
    println!("stdio upstream recovery after SIGKILL: {} ms", recovered.as_millis());

    // Same agent session, no reconnect: the call just works.
    let reply = client.call_tool("memory__read_graph", json!({})).await;
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("entities"), "{reply}");
}

#[tokio::test]
async fn no_child_process_outlives_the_gateway() {
    // `sh -c` makes node a grandchild, as `npx` does: the whole process group must go.
    let marker = format!("gatehouse-orphan-test-{}", std::process::id());
    let node = node().display().to_string();
    let script = node_script("@modelcontextprotocol/server-everything", &["stdio"]).join(" ");
    let config = format!(
        "[gateway]\nauth_disabled = true\n{}",
        stdio_block("wrapped", "sh", &["-c".into(), format!("exec 3>/dev/null; {node} {script} {marker}; true")])
    );
    let mut gw = TestGateway::start(&config).await;
    gw.wait_for_state("wrapped", "up").await;
    assert!(count(&marker) >= 1, "the server runs");
    gw.terminate().await;
    for _ in 0..100 {
        if count(&marker) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} process(es) survived the gateway", count(&marker));
}

fn count(marker: &str) -> usize {
    let out = std::process::Command::new("pgrep").args(["-f", marker]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The README's quick start config, as shipped (only the port changed).
#[tokio::test]
async fn the_quickstart_config_serves_the_reference_servers() {
    interop_dir();
    let config = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")).unwrap();
    let gw = TestGateway::start(&config.replace("port = 8090", "port = 0")).await;
    let client = Legacy::connect(&gw.url).await;
    // Gating is on: no task, just the core.
    assert_eq!(client.tool_names().await, ["gateway__call_tool", "gateway__search_tools"]);
    let gated = client.request("tools/list", json!({"_meta": {"gatehouse/task": "add two numbers together"}})).await;
    let names: Vec<&str> =
        gated["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"everything__get-sum"), "{names:?}");
    let reply = client.call_tool("everything__get-sum", json!({"a": 2, "b": 40})).await;
    assert!(reply["result"]["content"][0]["text"].as_str().unwrap().contains("42"), "{reply}");
}
