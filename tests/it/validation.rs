//! Stages 3 and 9 end to end: arguments that break a tool's inputSchema never reach the
//! upstream and come back as an isError result naming the path and rule (never the value);
//! a result that breaks the outputSchema becomes an upstream_error result. Both are audited.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn schema_violations_are_results_the_model_can_fix_and_are_audited() {
    let store = tempfile::tempdir().unwrap();
    let add = json!({"name": "add", "description": "Add.", "inputSchema": {"type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        "outputSchema": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}});
    // The upstream gets addition wrong when a is 13: a string where the schema says integer.
    let handler: Handler = Arc::new(|args: &Value| {
        let (a, b) = (args["a"].as_i64().unwrap_or(0), args["b"].as_i64().unwrap_or(0));
        let sum = if a == 13 { json!("thirteen-ish") } else { json!(a + b) };
        json!({"content": [{"type": "text", "text": sum.to_string()}], "structuredContent": {"sum": sum}})
    });
    let up = FakeUpstream::new().tool_def(add, handler).start().await;
    let config = format!(
        "[gateway]\nauth_disabled = true\n[store]\nurl = \"sqlite://{}/gh.db\"\n{}",
        store.path().display(),
        upstream_block("math", &up.url())
    );
    let mut gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;

    let ok = client.call_tool("math__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(ok["result"]["structuredContent"]["sum"], 5, "{ok}");

    let bad = client.call_tool("math__add", json!({"a": "SECRET-VALUE", "b": 3})).await;
    let result = &bad["result"];
    assert_eq!(result["isError"], true, "{bad}");
    assert_eq!(result["_meta"]["gatehouse/error"], "invalid_arguments");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert_eq!(text, "Invalid arguments: arguments/a: must be of type integer");
    assert!(!bad.to_string().contains("SECRET-VALUE"), "values are never echoed");
    let missing = client.call_tool("math__add", json!({"a": 1})).await;
    assert_eq!(
        missing["result"]["content"][0]["text"],
        "Invalid arguments: arguments: missing required property \"b\""
    );
    assert_eq!(up.hit_count("tools/call"), 1, "invalid calls never reach the upstream");

    let wrong = client.call_tool("math__add", json!({"a": 13, "b": 1})).await;
    assert_eq!(wrong["result"]["isError"], true, "{wrong}");
    assert_eq!(wrong["result"]["_meta"]["gatehouse/error"], "upstream_error");
    assert!(!wrong.to_string().contains("thirteen-ish"), "the bad output is not relayed: {wrong}");

    gw.terminate().await;
    let path = store.path().join("gatehouse.toml");
    std::fs::write(&path, &config).unwrap();
    let out = std::process::Command::new(BIN).args(["audit", "--json", "--config"]).arg(&path).output().unwrap();
    let outcomes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["upstream_error", "invalid_arguments", "invalid_arguments", "ok"]);
}
