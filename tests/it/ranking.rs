//! Hybrid ranking end to end: tool embeddings indexed off the request path through an
//! OpenAI-compatible embeddings service (an in-process fake we can break) and the local model,
//! BM25 whenever embedding fails, and embeddings that survive a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};

use crate::support::*;

/// Concepts the fake embedder knows: a text gets a unit vector over the concepts it mentions
/// (or the last, "other", axis), so "umbrella" is close to "weather" with no word in common.
const CONCEPTS: [&[&str]; 3] = [&["weather", "umbrella", "rain"], &["currency", "euro", "dollar"], &["email", "mail"]];

fn embed(text: &str) -> Vec<f32> {
    let text = text.to_lowercase();
    let mut v: Vec<f32> =
        CONCEPTS.iter().map(|words| if words.iter().any(|w| text.contains(w)) { 1.0 } else { 0.0 }).collect();
    v.push(if v.iter().all(|x| *x == 0.0) { 1.0 } else { 0.0 });
    v
}

#[derive(Default)]
struct Service {
    broken: AtomicBool,
    texts: AtomicUsize,
}

async fn embeddings(State(service): State<Arc<Service>>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    if service.broken.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": "overloaded"})));
    }
    assert_eq!(body["model"], "concepts-1");
    let inputs: Vec<String> = serde_json::from_value(body["input"].clone()).unwrap();
    service.texts.fetch_add(inputs.len(), Ordering::SeqCst);
    // Out of order on purpose: clients must sort by index.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": embed(text)}))
        .collect();
    (StatusCode::OK, Json(json!({"object": "list", "data": data, "model": "concepts-1"})))
}

async fn embedding_service() -> (Arc<Service>, String) {
    let service = Arc::new(Service::default());
    let app = axum::Router::new().route("/v1/embeddings", post(embeddings)).with_state(service.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (service, url)
}

async fn catalog() -> FakeUpstream {
    let mut builder = FakeUpstream::new();
    for (name, description) in [
        ("get_weather", "Current conditions and forecast for a city."),
        ("convert_currency", "Convert an amount between currencies."),
        ("send_email", "Send an email message to a recipient."),
        ("book_hotel", "Book a hotel room in a city."),
    ] {
        builder = builder
            .tool_def(json!({"name": name, "description": description, "inputSchema": {"type": "object"}}), echo());
    }
    builder.start().await
}

fn config(upstream: &str, embeddings: &str, extra: &str) -> String {
    format!(
        "[gateway]\nauth_disabled = true\nmanifest_ttl = \"1s\"\n[gating]\ntail_k = 3\n\
         [embedding]\nprovider = \"openai\"\nbase_url = \"{embeddings}\"\nmodel = \"concepts-1\"\ntimeout = \"2s\"\n{extra}{}",
        upstream_block("travel", upstream)
    )
}

/// The tail a new session gets for `task` (a new session each time: within one, tails only grow).
async fn tail(gw: &TestGateway, task: &str) -> Vec<String> {
    let client = Legacy::connect(&gw.url).await;
    let result = client.request("tools/list", json!({"_meta": {"gatehouse/task": task}})).await;
    result["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {result}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .filter(|n| !n.starts_with("gateway__"))
        .collect()
}

async fn ranking_state(gw: &TestGateway, wanted: &str) -> Value {
    for _ in 0..300 {
        let health = gw.healthz().await;
        if health["ranking"]["state"] == wanted && health["tools"] == 4 {
            return health;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("ranking never became {wanted}: {}\n{}", gw.healthz().await, gw.logs());
}

async fn rankings(gw: &TestGateway) -> Value {
    let text = http_client().get(format!("{}/metrics.json", gw.base)).send().await.unwrap().text().await.unwrap();
    serde_json::from_str::<Value>(&text).unwrap()
}

const UMBRELLA: &str = "Will I need an umbrella tomorrow?";

#[tokio::test]
async fn hybrid_finds_tools_by_meaning_and_a_failing_query_embedding_falls_back_to_bm25() {
    let up = catalog().await;
    let (service, url) = embedding_service().await;
    let gw = TestGateway::start(&config(&up.url(), &url, "")).await;
    ranking_state(&gw, "ready").await;

    // No word of the task is in any tool: only the embeddings can find the weather tool.
    assert_eq!(tail(&gw, UMBRELLA).await, ["travel__get_weather"]);
    assert_eq!(tail(&gw, "convert euro").await, ["travel__convert_currency"]);
    assert!(rankings(&gw).await["rankings_total"]["hybrid"].as_u64().unwrap() >= 2);

    // The service breaks: a new task cannot be embedded, the listing is BM25's and still whole.
    service.broken.store(true, Ordering::SeqCst);
    assert!(tail(&gw, "Is rain expected? Do I need my umbrella").await.is_empty(), "BM25 knows no umbrellas");
    assert_eq!(tail(&gw, "send an email").await, ["travel__send_email"]);
    let metrics = rankings(&gw).await;
    assert_eq!(metrics["rankings_total"]["bm25_fallback"], 2, "{metrics}");
    assert!(gw.logs().contains("task embedding failed"), "the fallback is logged");
    // A task embedded before the outage comes from the query cache.
    assert_eq!(tail(&gw, UMBRELLA).await, ["travel__get_weather"]);
}

#[tokio::test]
async fn an_embedder_down_at_start_leaves_bm25_serving_until_it_recovers() {
    let up = catalog().await;
    let (service, url) = embedding_service().await;
    service.broken.store(true, Ordering::SeqCst);
    let gw = TestGateway::start(&config(&up.url(), &url, "")).await;
    ranking_state(&gw, "failing").await;
    assert!(tail(&gw, UMBRELLA).await.is_empty());
    assert_eq!(tail(&gw, "convert an amount between currencies").await, ["travel__convert_currency"]);
    assert!(gw.logs().contains("embedding the catalog failed"));

    service.broken.store(false, Ordering::SeqCst);
    ranking_state(&gw, "ready").await; // retried with backoff, no restart
    assert_eq!(tail(&gw, UMBRELLA).await, ["travel__get_weather"]);
}

#[tokio::test]
async fn tool_embeddings_persist_in_the_store_so_a_restart_embeds_nothing() {
    let up = catalog().await;
    let (service, url) = embedding_service().await;
    let dir = tempfile::tempdir().unwrap();
    // One store across both runs (embeddings live there).
    let persist = format!("[store]\nurl = \"sqlite://{}/gh.db\"\n", dir.path().display());
    let gw = TestGateway::start(&config(&up.url(), &url, &persist)).await;
    ranking_state(&gw, "ready").await;
    assert_eq!(service.texts.load(Ordering::SeqCst), 4, "one passage per tool");
    drop(gw);

    let gw = TestGateway::start(&config(&up.url(), &url, &persist)).await;
    ranking_state(&gw, "ready").await;
    assert_eq!(service.texts.load(Ordering::SeqCst), 4, "nothing re-embedded");
    assert_eq!(rankings(&gw).await["tools_embedded_total"], 0);
    assert_eq!(tail(&gw, UMBRELLA).await, ["travel__get_weather"]);
}

#[tokio::test]
async fn a_missing_local_model_is_logged_and_bm25_serves() {
    let up = catalog().await;
    let config = format!(
        "[gateway]\nauth_disabled = true\n[embedding]\nprovider = \"local\"\nmodel_dir = \"/nonexistent/model\"\n{}",
        upstream_block("travel", &up.url())
    );
    let gw = TestGateway::start(&config).await;
    ranking_state(&gw, "off").await;
    assert!(gw.logs().contains("run scripts/fetch-model"), "{}", gw.logs());
    assert_eq!(tail(&gw, "send an email").await, ["travel__send_email"]);
}

/// The real local model (all-MiniLM-L6-v2 from `scripts/fetch-model`, which `scripts/test` runs).
#[tokio::test]
async fn the_local_model_ranks_by_meaning() {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".models/all-minilm-l6-v2");
    assert!(model.join("model.safetensors").exists(), "run scripts/fetch-model (scripts/test does)");
    let up = catalog().await;
    let config = format!(
        "[gateway]\nauth_disabled = true\n[gating]\ntail_k = 1\n[embedding]\nprovider = \"local\"\nmodel_dir = \"{}\"\n{}",
        model.display(),
        upstream_block("travel", &up.url())
    );
    let gw = TestGateway::start(&config).await;
    ranking_state(&gw, "ready").await;
    assert_eq!(tail(&gw, "Is it going to be sunny in Lisbon?").await, ["travel__get_weather"]);
    assert_eq!(tail(&gw, "How many yen is fifty dollars?").await, ["travel__convert_currency"]);
    assert_eq!(rankings(&gw).await["rankings_total"]["hybrid"], 2);
}
