//! REST ingress: `POST /v1/tools/{name}:call` through the same authentication and pipeline as
//! MCP, errors as HTTP statuses with the taxonomy's body, and `GET /v1/audit` for auditors.

use serde_json::{Value, json};

use crate::support::*;

async fn gateway() -> (FakeUpstream, TestGateway) {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let config = format!(
        "[gateway]\n[[auth.tokens]]\nprincipal = \"agent\"\ntoken_env = \"AGENT_TOKEN\"\n\
         [[auth.tokens]]\nprincipal = \"ops\"\ntoken_env = \"OPS_TOKEN\"\nroles = [\"auditor\"]\n{}",
        upstream_block("fake", &up.url())
    );
    let gw = TestGateway::start_with_env(&config, &[("AGENT_TOKEN", "agent-7c1"), ("OPS_TOKEN", "ops-2b9")]).await;
    (up, gw)
}

async fn post(gw: &TestGateway, path: &str, token: Option<&str>, body: &str) -> (u16, Value, Option<String>) {
    let mut request = http_client().post(format!("{}{path}", gw.base)).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), challenge)
}

async fn get(gw: &TestGateway, path: &str, token: &str) -> (u16, Value) {
    let response = http_client().get(format!("{}{path}", gw.base)).bearer_auth(token).send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap())
}

#[tokio::test]
async fn rest_calls_use_the_pipeline_and_the_error_taxonomy() {
    let (up, gw) = gateway().await;
    let call = "/v1/tools/fake__echo:call";
    let (status, body, _) = post(&gw, call, Some("agent-7c1"), r#"{"arguments": {"message": "hi"}}"#).await;
    assert_eq!((status, &body["content"][0]["text"]), (200, &json!("hi")), "{body}");

    let (status, body, challenge) = post(&gw, call, None, r#"{"arguments": {}}"#).await;
    assert_eq!((status, body["error"]["class"].as_str()), (401, Some("unauthenticated")), "{body}");
    assert!(challenge.unwrap().contains("resource_metadata="));

    let cases = [
        ("/v1/tools/fake__nope:call", r#"{"arguments": {}}"#, 404, "unknown_tool"),
        (call, r#"{"arguments": {"message": 5}}"#, 422, "invalid_arguments"),
        (call, r#"{"arguments": "#, 400, "parse_error"),
        (call, r#"{"args": {}}"#, 400, "invalid_arguments"),
        ("/v1/tools/fake__echo", r#"{}"#, 404, "method_not_found"),
    ];
    for (path, body, status, class) in cases {
        let (got, reply, _) = post(&gw, path, Some("agent-7c1"), body).await;
        assert_eq!((got, reply["error"]["class"].as_str()), (status, Some(class)), "{path} {body}: {reply}");
    }
    let hits = up.hit_count("tools/call");
    assert_eq!(hits, 1, "only the valid call reached the upstream");

    // The audit log: auditors only.
    let (status, _) = get(&gw, "/v1/audit", "agent-7c1").await;
    assert_eq!(status, 403);
    let (status, body) = get(&gw, "/v1/audit?principal=agent&limit=10", "ops-2b9").await;
    assert_eq!(status, 200, "{body}");
    let outcomes: Vec<&str> =
        body["events"].as_array().unwrap().iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["invalid_arguments", "unknown_tool", "ok"], "{body}");
    let (status, body) = get(&gw, "/v1/audit?limit=0", "ops-2b9").await;
    assert_eq!((status, body["error"]["data"]["field"].as_str()), (400, Some("query.limit")));
}
