//! The `gatehouse` command line: `check`, config errors, config path fallbacks, `--stdio`.

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::support::*;

fn write_config(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn check_prints_the_resolved_plan_without_secrets() {
    let (_dir, path) = write_config(
        "[gateway]\nbearer_token_env = \"GW\"\n[[upstreams]]\nnamespace = \"bamboo\"\nurl = \"https://user:pw@bamboo.example.com/mcp\"\nbearer_token_env = \"UP\"\n",
    );
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env("GW", "gw-secret")
        .env("UP", "up-secret")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "listen: http://127.0.0.1:8090/mcp",
        "bearer token from $GW",
        "bamboo",
        "bearer from $UP",
        "https://bamboo.example.com/mcp",
    ] {
        assert!(plan.contains(expected), "{expected:?} missing from:\n{plan}");
    }
    for secret in ["gw-secret", "up-secret", "pw@"] {
        assert!(!plan.contains(secret), "{secret} leaked:\n{plan}");
    }
}

#[test]
fn invalid_configs_name_the_key_and_line() {
    let (_dir, path) =
        write_config("[gateway]\nauth_disabled = true\n\n[[upstreams]]\nnamespace = \"a\"\nurl = \"localhost:8000\"\n");
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("line 6") && err.contains("upstreams[0].url") && err.contains("expected an absolute http(s) URL"),
        "{err}"
    );

    let (_dir, path) = write_config("[gateway]\nauth_disabled = true\nbogus = 1\n");
    let out = Command::new(BIN).args(["check", "--config"]).arg(&path).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("gateway.bogus") && err.contains("line 3") && err.contains("unknown field"), "{err}");
}

#[test]
fn config_path_falls_back_to_gatehouse_then_panda_env() {
    let (_dir, path) = write_config("[gateway]\nauth_disabled = true\n");
    for var in ["GATEHOUSE_CONFIG", "PANDA_GATEWAY_CONFIG"] {
        let out = Command::new(BIN).arg("check").env_remove("GATEHOUSE_CONFIG").env(var, &path).output().unwrap();
        assert!(out.status.success(), "{var}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new(BIN)
        .arg("check")
        .env_remove("GATEHOUSE_CONFIG")
        .env_remove("PANDA_GATEWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
}

/// `gatehouse --stdio` on `config`: the child (killed when dropped), its stdin, its stdout lines.
fn spawn_stdio(
    config: &std::path::Path,
    data: &std::path::Path,
) -> (tokio::process::Child, tokio::process::ChildStdin, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    let mut child = tokio::process::Command::new(BIN)
        .arg("--stdio")
        .arg("--config")
        .arg(config)
        .env("XDG_DATA_HOME", data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, stdin, lines)
}

#[tokio::test]
async fn stdio_mode_serves_mcp_on_stdin_and_stdout() {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let (_dir, path) = write_config(&config_for(&[("fake", &up.url())]));
    let (_child, mut stdin, mut lines) = spawn_stdio(&path, _dir.path());
    let mut send = async |message: Value| {
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})).await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fake__echo", "arguments": {"message": "via stdio"}}})).await;
    send(json!("not a message")).await;
    let mut by_id = std::collections::HashMap::new();
    while by_id.len() < 4 {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message.get("method").is_some() {
            continue; // a notification (e.g. tools/list_changed once the catalog loads)
        }
        by_id.insert(message["id"].to_string(), message);
    }
    assert_eq!(by_id["1"]["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(by_id["2"]["result"]["tools"][0]["name"], "fake__echo");
    assert_eq!(by_id["3"]["result"]["content"][0]["text"], "via stdio");
    assert_eq!(by_id["null"]["error"]["code"], -32600);
}

#[tokio::test]
async fn tools_and_search_commands_show_the_manifest_and_rankings() {
    let up = FakeUpstream::new()
        .tool_def(json!({"name": "get_weather", "description": "Weather forecast for a city.", "inputSchema": {"type": "object"}}), echo())
        .tool_def(json!({"name": "send_email", "description": "Send an email message.", "inputSchema": {"type": "object"}}), echo())
        .start()
        .await;
    let (_dir, path) =
        write_config(&format!("[gateway]\nauth_disabled = true\n{}", upstream_block("office", &up.url())));
    let data = _dir.path().to_path_buf();
    let run = |args: Vec<&str>| {
        let (path, data) = (path.clone(), data.clone());
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        tokio::task::spawn_blocking(move || {
            Command::new(BIN).args(&args).arg("--config").arg(&path).env("XDG_DATA_HOME", &data).output().unwrap()
        })
    };
    let out = run(vec!["tools", "--task", "email my team"]).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("core (2 tools") && text.contains("gateway__search_tools"), "{text}");
    assert!(text.contains("tail (1 tools):\n  office__send_email"), "{text}");
    assert!(text.contains("tokens (o200k): full catalog"), "{text}");

    let out = run(vec!["search", "weather in Oslo", "--limit", "3"]).await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("  1. office__get_weather"), "{text}");
}

#[test]
fn bench_retrieval_scores_any_dataset_in_the_bench_layout_and_names_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.jsonl");
    let queries = dir.path().join("queries.jsonl");
    std::fs::write(
        &tools,
        concat!(
            r#"{"id": "weather", "name": "get_weather", "description": "Current weather for a city."}"#,
            "\n",
            r#"{"id": "stocks", "name": "stock_quote", "description": "Latest stock price for a ticker."}"#,
            "\n",
        ),
    )
    .unwrap();
    std::fs::write(
        &queries,
        concat!(
            r#"{"id": "q1", "query": "what is the weather in Oslo", "gold": [["weather"]], "meta": {"category": "simple"}}"#,
            "\n",
            r#"{"id": "q2", "query": "price of the AAPL stock", "gold": [["stocks"]], "meta": {"category": "live_simple"}}"#,
            "\n",
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(["bench", "retrieval", "--tools"])
            .arg(&tools)
            .arg("--queries")
            .arg(&queries)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(report.contains("2 tools, 2 queries"), "{report}");
    let all = report.lines().find(|l| l.starts_with("all (all)")).unwrap_or_default();
    assert!(all.contains(" 100.0 "), "both queries find their tool first: {report}");
    let live = report.lines().find(|l| l.starts_with("live (all)")).unwrap_or_default();
    assert!(live.split_whitespace().nth(2) == Some("1"), "one live query, reported apart: {report}");

    let out = run(&["--ranker", "bm42"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--ranker \"bm42\"") && err.contains("expected bm25, dense or hybrid"), "{err}");

    std::fs::write(&queries, "{\"id\": \"q1\", \"query\": \n").unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("queries.jsonl:1"), "the file and line of the bad record: {err}");
}

#[tokio::test]
async fn stdio_sessions_get_resource_updates_on_stdout() {
    let up = FakeUpstream::new().echo_tool("echo").resource("file:///notes.txt", "hello").start().await;
    let (_dir, path) = write_config(&config_for(&[("fake", &up.url())]));
    let (_child, mut stdin, mut lines) = spawn_stdio(&path, _dir.path());
    let mut next = async || -> Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line()).await.unwrap();
        serde_json::from_str(&line.unwrap().unwrap()).unwrap()
    };
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": "fake+file:///notes.txt"}}),
    ] {
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
    }
    loop {
        let message = next().await;
        if message["id"] == 2 {
            assert_eq!(message["result"], json!({}), "{message}");
            break;
        }
    }
    for _ in 0..400 {
        if up.get_streams_opened() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    up.announce_resource_updated("file:///notes.txt");
    loop {
        let message = next().await;
        if message["method"] == "notifications/resources/updated" {
            assert_eq!(message["params"]["uri"], "fake+file:///notes.txt", "{message}");
            break;
        }
    }
}
