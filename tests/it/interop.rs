//! Against peers nobody here wrote: the MCP reference servers (npm), the official Python SDK
//! client (PyPI), and the MCP conformance suites (npm), all over real loopback sockets.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::peers::*;
use crate::support::*;

/// server-everything (Streamable HTTP) beside our own test upstream: the Python SDK lists the
/// merged catalog and calls a tool in each namespace, over a legacy session and over 2026-07-28.
#[tokio::test]
async fn python_sdk_through_the_gateway_to_server_everything_and_a_second_upstream() {
    let everything = server_everything("streamableHttp").await;
    let mine = FakeUpstream::new().echo_tool("shout").start().await;
    let gw = TestGateway::start(&config_for(&[("everything", &everything.url), ("mine", &mine.url())])).await;

    for era in ["legacy", "modern"] {
        let out = sdk_client(era, &gw.url, Some(("everything__echo", r#"{"message": "hi"}"#)), None).await;
        let expected_version = if era == "legacy" { "2025-11-25" } else { "2026-07-28" };
        assert_eq!(out["protocol_version"], expected_version);
        let tools: Vec<&str> = out["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert!(tools.contains(&"everything__echo") && tools.contains(&"everything__get-sum"), "{tools:?}");
        assert!(tools.contains(&"mine__shout"), "{tools:?}");
        assert_eq!(out["call"]["is_error"], false);
        assert_eq!(out["call"]["content"][0]["text"], "Echo: hi", "{era}");

        let out = sdk_client(era, &gw.url, Some(("mine__shout", r#"{"message": "hello"}"#)), None).await;
        assert_eq!(out["call"]["content"][0]["text"], "hello", "{era}");
    }
    assert_eq!(mine.hit_count("tools/call"), 2);
}

#[tokio::test]
async fn python_sdk_with_a_bearer_token() {
    let mine = FakeUpstream::new().echo_tool("echo").start().await;
    let config = format!("[gateway]\nbearer_token_env = \"GW_TOKEN\"\n{}", upstream_block("mine", &mine.url()));
    let gw = TestGateway::start_with_env(&config, &[("GW_TOKEN", "sdk-token")]).await;
    let out = sdk_client("legacy", &gw.url, Some(("mine__echo", r#"{"message": "authed"}"#)), Some("sdk-token")).await;
    assert_eq!(out["call"]["content"][0]["text"], "authed");
}

/// Runs one conformance suite against the gateway fronting our fixture in prefix mode `never`
/// (the suite calls fixed names). Fails on any failure not in the baseline file, and on any
/// baseline entry that now passes (the suite's own `--expected-failures` semantics).
async fn conformance(package: &str, args: &[&str], baseline: &str) -> (usize, usize) {
    let fixture = conformance_fixture().await;
    let config = format!(
        "[gateway]\nauth_disabled = true\nprefix_mode = \"never\"\n{PLAIN_CATALOG}{}",
        upstream_block("fixture", &fixture.url)
    );
    let gw = TestGateway::start(&config).await;
    let out_dir = tempfile::tempdir().unwrap();
    let entry = interop_dir().join("node_modules").join(package).join("dist/index.js");
    let output = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(node())
            .arg(entry)
            .args(["server", "--url", &gw.url])
            .args(args)
            .arg("--expected-failures")
            .arg(interop_file(baseline))
            .arg("-o")
            .arg(out_dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("conformance suite finished within 10 minutes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let (passed, failed) = count_checks(out_dir.path());
    println!("conformance {package} {args:?}: {passed} checks passed, {failed} failed");
    assert!(
        output.status.success(),
        "{package} {args:?} regressed against {baseline}:\n{}\n{}\ngateway log:\n{}",
        stdout
            .lines()
            .filter(|l| l.contains('✗') || l.contains("Unexpected") || l.contains("Stale") || l.contains("  "))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&output.stderr),
        gw.logs().lines().rev().take(40).collect::<Vec<_>>().join("\n")
    );
    assert!(passed > 0);
    (passed, failed)
}

fn count_checks(dir: &Path) -> (usize, usize) {
    let (mut passed, mut failed) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let checks: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                passed += checks.iter().filter(|c| c["status"] == "SUCCESS").count();
                failed += checks.iter().filter(|c| c["status"] == "FAILURE").count();
            }
        }
    }
    (passed, failed)
}

#[tokio::test]
async fn conformance_2025_11_25_suite_through_the_gateway() {
    conformance("conformance-legacy", &["--suite", "all"], "expected-failures-2025.yml").await;
}

#[tokio::test]
async fn conformance_2026_07_28_suite_through_the_gateway() {
    conformance("conformance-modern", &["--requirements", "2026-07-28"], "expected-failures-2026.yml").await;
}
