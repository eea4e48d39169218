//! Cache-aware gating end to end: the byte-stable core, the task tail, session-stable tails,
//! the gateway's own tools, and the numbers it reports.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// An upstream whose tools have clearly different jobs.
async fn catalog() -> FakeUpstream {
    let mut builder = FakeUpstream::new();
    for (name, description) in [
        ("get_weather", "Current weather and forecast for a city."),
        ("get_stock_price", "Latest stock price for a ticker symbol."),
        ("send_email", "Send an email message to a recipient."),
        ("create_calendar_event", "Create an event in the user's calendar."),
        ("translate_text", "Translate text into another language."),
        ("convert_currency", "Convert an amount between currencies."),
        ("search_flights", "Search flights between two airports."),
        ("book_hotel", "Book a hotel room in a city."),
    ] {
        let def = json!({"name": name, "description": description, "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}});
        builder = builder.tool_def(def, echo());
    }
    builder.start().await
}

fn gated_config(url: &str, extra: &str) -> String {
    format!(
        "[gateway]\nauth_disabled = true\nmanifest_ttl = \"1s\"\n[gating]\ntail_k = 3\npin = [\"travel__get_weather\"]\n{extra}{}",
        upstream_block("travel", url)
    )
}

/// The raw `tools` array text of a tools/list answer (the bytes an LLM provider would cache).
async fn tools_bytes(client: &Legacy, task: Option<&str>) -> String {
    let params = match task {
        Some(t) => json!({"_meta": {"gatehouse/task": t}}),
        None => json!({}),
    };
    let reply = client.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})).await;
    let start = reply.body.find("\"tools\":").unwrap() + 8;
    let end = reply.body.rfind("]}").unwrap() + 1;
    reply.body[start..end].to_string()
}

fn names(tools_json: &str) -> Vec<String> {
    let tools: Vec<Value> = serde_json::from_str(tools_json).unwrap();
    tools.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn the_core_is_the_same_bytes_for_every_task_and_across_restarts() {
    let up = catalog().await;
    let config = gated_config(&up.url(), "");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    let core = tools_bytes(&client, None).await;
    assert_eq!(
        names(&core),
        ["gateway__call_tool", "gateway__search_tools", "travel__get_weather"],
        "pins and own tools, by name"
    );

    let core_prefix = core.trim_end_matches(']').to_string();
    for task in ["send an email to my boss", "what does AAPL trade at", "book a room in Paris"] {
        let listed = tools_bytes(&client, Some(task)).await;
        assert!(listed.starts_with(&core_prefix), "the core is a byte-identical prefix for {task:?}");
        assert!(names(&listed).len() > 3, "{task:?} added a tail");
    }
    let email = names(&tools_bytes(&client, Some("send an email to my boss")).await);
    assert!(email.contains(&"travel__send_email".to_string()), "{email:?}");
    assert!(!email.contains(&"travel__get_stock_price".to_string()), "the floor keeps noise out: {email:?}");

    let hash = gw_metrics(&gw).await["core_hash"].clone();
    assert!(hash.as_str().is_some_and(|h| h.len() == 64));
    drop(client);
    drop(gw);
    let again = TestGateway::start(&config).await;
    let client = Legacy::connect(&again.url).await;
    assert_eq!(tools_bytes(&client, None).await, core, "same config, same upstream: same bytes after a restart");
    assert_eq!(gw_metrics(&again).await["core_hash"], hash);
}

async fn gw_metrics(gw: &TestGateway) -> Value {
    serde_json::from_str(
        &http_client().get(format!("{}/metrics.json", gw.base)).send().await.unwrap().text().await.unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_changed_pinned_schema_changes_the_core_hash_exactly_once() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let client = Legacy::connect(&gw.url).await;
    let before = tools_bytes(&client, None).await;
    let first = gw_metrics(&gw).await;
    assert_eq!(first["core_hash_changes_total"], 0);

    let mut tools: Vec<(Value, Handler)> = Vec::new();
    for name in ["get_weather", "send_email"] {
        let schema = if name == "get_weather" {
            json!({"type": "object", "required": ["city"]})
        } else {
            json!({"type": "object"})
        };
        tools.push((json!({"name": name, "description": format!("{name}."), "inputSchema": schema}), echo()));
    }
    up.set_tools(tools);
    for _ in 0..200 {
        if tools_bytes(&client, None).await != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(tools_bytes(&client, None).await, before);
    // Several more refreshes of the unchanged catalog must not move it again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after = gw_metrics(&gw).await;
    assert_eq!(after["core_hash_changes_total"], 1, "{after}");
    assert_ne!(after["core_hash"], first["core_hash"]);
}

#[tokio::test]
async fn a_sessions_tail_only_ever_appends() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "session_tail_max = 32\n")).await;
    let client = Legacy::connect(&gw.url).await;
    let mut seen: Vec<String> = Vec::new();
    for task in ["send an email", "translate this text to French", "convert dollars to euros", "send an email"] {
        let listed = names(&tools_bytes(&client, Some(task)).await);
        let tail: Vec<String> = listed.into_iter().skip(3).collect();
        assert!(tail.starts_with(&seen), "{task:?}: {seen:?} is no longer a prefix of {tail:?}");
        seen = tail;
    }
    assert!(
        seen.contains(&"travel__send_email".to_string()) && seen.contains(&"travel__convert_currency".to_string()),
        "{seen:?}"
    );

    // Without a session, the tail is in canonical order and only the task's.
    let reply = modern(&gw.url, "tools/list", json!({"_meta": {"gatehouse/task": "convert dollars to euros"}}), &[])
        .await
        .json();
    let result = &reply["result"];
    assert_eq!(
        (result["ttlMs"].as_u64(), result["cacheScope"].as_str()),
        (Some(0), Some("private")),
        "a task makes the list personal"
    );
    let plain = modern(&gw.url, "tools/list", json!({}), &[]).await.json();
    assert_eq!(plain["result"]["cacheScope"], "public", "the bare core is the same for everyone");
}

#[tokio::test]
async fn modern_conversations_are_named_by_meta_or_baggage() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let list = |task: &str, conversation: Option<&str>, baggage: Option<&str>| {
        let mut meta = json!({"gatehouse/task": task});
        if let Some(c) = conversation {
            meta["gatehouse/conversation"] = json!(c);
        }
        let url = gw.url.clone();
        let baggage = baggage.map(str::to_string);
        async move {
            let reply =
                modern(&url, "tools/list", json!({"_meta": meta}), &[("baggage", baggage.as_deref())]).await.json();
            reply["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    let first = list("send an email", Some("c-1"), None).await;
    let second = list("book a hotel room", Some("c-1"), None).await;
    assert!(second.contains(&"travel__send_email".to_string()), "the conversation remembers: {second:?}");
    let other = list("book a hotel room", Some("c-2"), None).await;
    assert!(!other.contains(&"travel__send_email".to_string()), "another conversation does not: {other:?}");
    let via_baggage = list("book a hotel room", None, Some("session.id=c-1")).await;
    assert_eq!(
        via_baggage,
        second.iter().cloned().collect::<Vec<_>>(),
        "baggage session.id names the same conversation"
    );
    assert!(first.len() < second.len());
}

#[tokio::test]
async fn search_tools_finds_tools_and_adds_them_to_the_sessions_list() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let client = Legacy::connect(&gw.url).await;
    let mut stream = client.open_stream().await;
    let _priming = stream.chunk().await.unwrap();

    let reply = client
        .call_tool("gateway__search_tools", json!({"query": "find flights from Boston to Denver", "limit": 3}))
        .await;
    let found = &reply["result"]["structuredContent"]["tools"];
    assert_eq!(found[0]["name"], "travel__search_flights", "{reply}");
    assert!(found[0]["score"].as_f64().unwrap() > 0.0);
    assert!(found[0]["description"].as_str().unwrap().contains("flights"));

    let mut seen = String::new();
    while !seen.contains("notifications/tools/list_changed") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
            .await
            .expect("list_changed")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        client.tool_names().await.contains(&"travel__search_flights".to_string()),
        "found tools join the session's list"
    );

    let bad = client.call_tool("gateway__search_tools", json!({"limit": 3})).await;
    assert_eq!(bad["error"]["data"]["field"], "params.arguments.query");
}

#[tokio::test]
async fn any_catalog_tool_can_be_called_outside_the_manifest_directly_or_through_call_tool() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let client = Legacy::connect(&gw.url).await;
    assert!(!client.tool_names().await.contains(&"travel__book_hotel".to_string()));
    let direct = client.call_tool("travel__book_hotel", json!({"q": "direct"})).await;
    assert_eq!(direct["result"]["content"][0]["text"], r#"{"q":"direct"}"#);
    let through =
        client.call_tool("gateway__call_tool", json!({"name": "travel__book_hotel", "arguments": {"q": "via"}})).await;
    assert_eq!(through["result"]["content"][0]["text"], r#"{"q":"via"}"#);
    assert_eq!(up.hit_count("tools/call"), 2);
    let unknown = client.call_tool("gateway__call_tool", json!({"name": "travel__nope"})).await;
    assert_eq!(unknown["error"]["code"], -32602);
}

#[tokio::test]
async fn switches_plain_catalog_and_no_search() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "enabled = false\n")).await;
    let all = names(&tools_bytes(&Legacy::connect(&gw.url).await, None).await);
    assert_eq!(all.len(), 9, "gating off: every tool, plus search: {all:?}");
    assert!(all.contains(&"gateway__search_tools".to_string()) && !all.contains(&"gateway__call_tool".to_string()));

    let config = gated_config(&up.url(), "").replace("[gating]", "[rag]\nenabled = false\n[gating]");
    let gw = TestGateway::start(&config).await;
    let client = Legacy::connect(&gw.url).await;
    assert_eq!(
        names(&tools_bytes(&client, None).await),
        ["gateway__call_tool", "travel__get_weather"],
        "no search tool"
    );
    assert_eq!(client.call_tool("gateway__search_tools", json!({"query": "x"})).await["error"]["code"], -32602);
}

#[tokio::test]
async fn gated_listings_report_what_they_saved() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let client = Legacy::connect(&gw.url).await;
    tools_bytes(&client, Some("send an email")).await;
    let metrics = gw_metrics(&gw).await;
    assert!(metrics["tokens_saved_total"].as_u64().unwrap() > 50, "{metrics}");
    assert!(metrics["tools_dropped_last"].as_i64().unwrap() >= 4, "{metrics}");
    let text = http_client().get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        text.contains("gatehouse_tokens_saved_total") && text.contains("gatehouse_core_hash_changes_total"),
        "{text}"
    );
}

#[tokio::test]
async fn context_select_splits_items_into_a_hashed_core_and_a_relevant_tail() {
    let up = catalog().await;
    let gw = TestGateway::start(&gated_config(&up.url(), "")).await;
    let url = format!("{}/context/select", gw.base);
    let body = json!({
        "task": "refund the duplicate invoice payment",
        "items": [
            {"id": "summary", "text": "Rolling summary: customer Ada, account 42.", "pinned": true},
            {"id": "m1", "text": "The invoice was paid twice by mistake."},
            {"id": "m2", "text": "Weather is nice today."},
            {"id": "m3", "text": "Customer asks for a refund of the duplicate payment."}
        ]
    });
    let reply = http_client()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let selection: Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
    assert_eq!(selection["core"][0]["id"], "summary");
    let tail: Vec<&str> = selection["tail"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(tail, ["m1", "m3"]);
    assert_eq!(selection["core_hash"].as_str().unwrap().len(), 64);
    assert!(selection["tokens_out"].as_u64() < selection["tokens_in"].as_u64());

    let bad = http_client()
        .post(&url)
        .body(json!({"task": "x", "items": [{"id": 7, "text": "secret-ish"}]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let error: Value = serde_json::from_str(&bad.text().await.unwrap()).unwrap();
    assert_eq!(error["error"]["data"]["field"], "body.items[0].id", "{error}");
    assert!(!error.to_string().contains("secret-ish"));
}
