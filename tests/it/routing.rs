//! Aggregation and routing across namespaces: prefixes, shortened names, down upstreams,
//! resources, prompts and completion.

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn calls_route_by_namespace_to_the_owning_upstream() {
    let a = FakeUpstream::new().echo_tool("echo").echo_tool("only_a").start().await;
    let b = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("alpha", &a.url()), ("beta", &b.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["alpha__echo", "alpha__only_a", "beta__echo"]);

    client.call_tool("beta__echo", json!({"message": "to b"})).await;
    assert_eq!(b.hit_count("tools/call"), 1);
    assert_eq!(a.hit_count("tools/call"), 0);
    assert_eq!(b.hits("tools/call")[0].params["name"], "echo", "upstream sees its own name");
    assert_eq!(b.hits("tools/call")[0].params["arguments"]["message"], "to b");

    for unknown in ["gamma__echo", "alpha__nope", "echo", ""] {
        let reply = client.call_tool(unknown, json!({})).await;
        assert_eq!(reply["error"]["code"], -32602, "{unknown}: {reply}");
        assert_eq!(reply["error"]["data"]["_meta"]["gatehouse/error"], "unknown_tool");
    }
}

#[tokio::test]
async fn a_down_upstream_disappears_and_its_calls_get_minus_32603_naming_it() {
    let a = FakeUpstream::new().echo_tool("echo").start().await;
    let dead = "http://127.0.0.1:9/mcp"; // discard port: connection refused
    let gw = TestGateway::start(&config_for(&[("alpha", &a.url()), ("ghost", dead)])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["alpha__echo"]);
    let reply = client.call_tool("ghost__anything", json!({})).await;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert_eq!(reply["error"]["data"]["upstream"], "ghost");
    assert!(reply["error"]["message"].as_str().unwrap().contains("ghost"));
    assert_eq!(
        client.call_tool("alpha__echo", json!({"message": "still"})).await["result"]["content"][0]["text"],
        "still"
    );

    let health = gw.wait_for_state("ghost", "down").await;
    assert_eq!(health["last_error"]["class"], "connect");
    assert_eq!(gw.healthz().await["status"], "degraded");
}

#[tokio::test]
async fn tools_of_an_upstream_that_goes_down_are_withdrawn_and_return() {
    let a = FakeUpstream::new().echo_tool("echo").start().await;
    let b = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("alpha", &a.url()), ("beta", &b.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await.len(), 2);
    b.set_down(true);
    gw.wait_for_state("beta", "down").await;
    assert_eq!(client.tool_names().await, ["alpha__echo"]);
    b.set_down(false);
    gw.wait_for_state("beta", "up").await;
    assert_eq!(client.tool_names().await, ["alpha__echo", "beta__echo"]);
}

#[tokio::test]
async fn prefix_modes_conditional_and_never() {
    let a = FakeUpstream::new().echo_tool("echo").echo_tool("a_only").start().await;
    let single = config_for(&[("alpha", &a.url())]).replace("[gateway]", "[gateway]\nprefix_mode = \"conditional\"");
    let gw = TestGateway::start(&single).await;
    assert_eq!(Legacy::connect(&gw.url).await.tool_names().await, ["a_only", "echo"], "one upstream: bare names");

    let b = FakeUpstream::new().echo_tool("echo").echo_tool("b_only").start().await;
    let two = config_for(&[("alpha", &a.url()), ("beta", &b.url())])
        .replace("[gateway]", "[gateway]\nprefix_mode = \"never\"");
    let gw = TestGateway::start(&two).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await, ["a_only", "b_only", "echo"]);
    let warnings = gw.healthz().await["warnings"].to_string();
    assert!(warnings.contains("collision") && warnings.contains("alpha") && warnings.contains("beta"), "{warnings}");
    client.call_tool("b_only", json!({})).await;
    assert_eq!(b.hit_count("tools/call"), 1);
    client.call_tool("echo", json!({})).await;
    assert_eq!(a.hit_count("tools/call"), 1, "a collision keeps the first-configured upstream's tool");
}

#[tokio::test]
async fn names_llm_apis_reject_are_shortened_reversibly() {
    let long = format!("fetch_{}", "very_long_segment_".repeat(5));
    let up = FakeUpstream::new().echo_tool("math.factorial").echo_tool(&long).echo_tool("has space").start().await;
    let gw = TestGateway::start(&config_for(&[("calc", &up.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    let names = client.tool_names().await;
    assert_eq!(names.len(), 3);
    for name in &names {
        assert!(name.len() <= 64, "{name}");
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{name}");
        assert!(name.starts_with("calc__"), "{name}");
    }
    let dotted = names.iter().find(|n| n.starts_with("calc__math_factorial_")).unwrap();
    client.call_tool(dotted, json!({"message": "5"})).await;
    let long_exposed = names.iter().find(|n| n.starts_with("calc__fetch_very")).unwrap();
    client.call_tool(long_exposed, json!({})).await;
    let called: Vec<Value> = up.hits("tools/call").iter().map(|h| h.params["name"].clone()).collect();
    assert_eq!(called, [json!("math.factorial"), json!(long)]);
    // Stable across gateway restarts: same input, same exposed names.
    let gw2 = TestGateway::start(&config_for(&[("calc", &up.url())])).await;
    assert_eq!(Legacy::connect(&gw2.url).await.tool_names().await, names);
}

#[tokio::test]
async fn resources_prompts_and_completion_route_by_namespace() {
    let up = FakeUpstream::new()
        .echo_tool("echo")
        .prompt("greet")
        .resource("file:///notes.txt", "hello notes")
        .template("db://rows/{id}")
        .start()
        .await;
    let other = FakeUpstream::new().echo_tool("echo").start().await;
    let gw = TestGateway::start(&config_for(&[("docs", &up.url()), ("other", &other.url())])).await;
    let client = Legacy::connect(&gw.url).await;

    let resources = client.request("resources/list", json!({})).await;
    assert_eq!(resources["result"]["resources"][0]["uri"], "docs+file:///notes.txt");
    let templates = client.request("resources/templates/list", json!({})).await;
    assert_eq!(templates["result"]["resourceTemplates"][0]["uriTemplate"], "docs+db://rows/{id}");

    let read = client.request("resources/read", json!({"uri": "docs+file:///notes.txt"})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "hello notes");
    assert_eq!(read["result"]["contents"][0]["uri"], "docs+file:///notes.txt");
    assert_eq!(up.hits("resources/read")[0].params["uri"], "file:///notes.txt");
    let templated = client.request("resources/read", json!({"uri": "docs+db://rows/7"})).await;
    assert_eq!(templated["result"]["contents"][0]["uri"], "docs+db://rows/7");

    let missing = client.request("resources/read", json!({"uri": "docs+file:///nope"})).await;
    assert_eq!(missing["error"]["code"], -32002);
    assert!(!missing.to_string().contains("/srv/data"), "upstream detail is not relayed: {missing}");

    let prompts = client.request("prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"][0]["name"], "docs__greet");
    let got = client.request("prompts/get", json!({"name": "docs__greet"})).await;
    assert_eq!(got["result"]["messages"][0]["content"]["text"], "prompt greet");
    assert_eq!(client.request("prompts/get", json!({"name": "docs__nope"})).await["error"]["code"], -32602);

    let complete = client
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "docs__greet"}, "argument": {"name": "x", "value": "a"}}),
        )
        .await;
    // The fake has no completion method: the upstream's -32601 comes back as ours.
    assert_eq!(complete["error"]["code"], -32601);
    let hit = up.hits("completion/complete").pop().expect("routed to docs");
    assert_eq!(hit.params["ref"]["name"], "greet");
}

#[tokio::test]
async fn pagination_is_followed_when_aggregating() {
    let mut builder = FakeUpstream::new().page_size(3);
    for i in 0..10 {
        builder = builder.echo_tool(&format!("t{i:02}"));
    }
    let up = builder.start().await;
    let gw = TestGateway::start(&config_for(&[("p", &up.url())])).await;
    let names = Legacy::connect(&gw.url).await.tool_names().await;
    assert_eq!(names.len(), 10);
    assert!(up.hits("tools/list").iter().any(|h| h.params["cursor"] == "9"));
}

#[tokio::test]
async fn listings_never_wait_for_a_hanging_upstream_after_start_up() {
    let fast = FakeUpstream::new().echo_tool("echo").start().await;
    let slow = FakeUpstream::new().echo_tool("slow").fault("slow", Fault::Hang).start().await;
    let gw = TestGateway::start(&config_for(&[("fast", &fast.url()), ("slow", &slow.url())])).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(client.tool_names().await.len(), 2);
    // A call that hangs upstream does not block listings or other namespaces meanwhile.
    let hanging = {
        let url = gw.url.clone();
        let session = client.session.clone();
        tokio::spawn(async move {
            let mut c = Legacy::new(&url);
            c.session = session;
            c.call_tool("slow__slow", json!({})).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Liveness, not speed: if the hanging call blocked the gateway these would never return.
    let served = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        assert_eq!(client.tool_names().await.len(), 2);
        client.call_tool("fast__echo", json!({"message": "quick"})).await
    })
    .await
    .expect("listing and other namespaces are served while a call hangs");
    assert_eq!(served["result"]["content"][0]["text"], "quick");
    assert!(!hanging.is_finished(), "the hanging call is still pending upstream");
    hanging.abort();
}
