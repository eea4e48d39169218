//! `FakeUpstream`: an in-process MCP server on a real loopback socket, for fault injection.
//!
//! It speaks raw `json!` — none of the gateway's own types — so it cannot share the gateway's
//! bugs, and it records every request so tests can assert what did (or did not) reach it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

pub type Handler = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// initialize-based, issues a session id.
    Legacy,
    /// 2026-07-28 only: answers server/discover, rejects initialize.
    Modern,
    /// No lifecycle at all: initialize is method-not-found.
    Bare,
}

/// How the fake reports an unknown session: the spec's 404, or the reference servers' 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionErrorStyle {
    NotFound404,
    BadRequest400,
}

/// Misbehaviours to inject on `tools/call` for a given tool name.
#[derive(Clone, Debug)]
pub enum Fault {
    Hang,
    Delay(Duration),
    MalformedJson,
    HugeBody(usize),
    CloseMidStream,
    Http(StatusCode),
    /// Answers on an SSE stream that carries this many progress notifications first.
    Flood(usize),
    /// Sends a server request (e.g. `sampling/createMessage`) on the response stream, waits for
    /// the gateway to POST the answer back, and returns that answer as the tool's text.
    AskClient(&'static str),
}

pub struct FakeUpstreamBuilder {
    era: Era,
    tools: Vec<(Value, Handler)>,
    prompts: Vec<Value>,
    resources: Vec<(Value, String)>,
    templates: Vec<Value>,
    page_size: usize,
    sse: bool,
    session_style: SessionErrorStyle,
    bearer: Option<String>,
    faults: HashMap<String, Fault>,
}

struct Inner {
    era: Era,
    tools: Mutex<Vec<(Value, Handler)>>,
    prompts: Vec<Value>,
    resources: Vec<(Value, String)>,
    templates: Vec<Value>,
    page_size: usize,
    sse: bool,
    session_style: SessionErrorStyle,
    bearer: Mutex<Option<String>>,
    faults: Mutex<HashMap<String, Fault>>,
    sessions: Mutex<HashSet<String>>,
    session_counter: AtomicUsize,
    hits: Mutex<Vec<Hit>>,
    down: AtomicBool,
    /// Server requests sent, by id, waiting for the gateway's answer.
    answers: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Value>>>,
    /// Open GET streams (legacy sessions' server-to-client channel).
    streams: tokio::sync::broadcast::Sender<Value>,
    get_streams_opened: AtomicUsize,
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Hit {
    pub id: Option<Value>,
    pub method: String,
    pub params: Value,
    pub headers: HeaderMap,
}

#[derive(Clone)]
pub struct FakeUpstream {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

impl FakeUpstream {
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> FakeUpstreamBuilder {
        FakeUpstreamBuilder {
            era: Era::Legacy,
            tools: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            templates: Vec::new(),
            page_size: usize::MAX,
            sse: false,
            session_style: SessionErrorStyle::NotFound404,
            bearer: None,
            faults: HashMap::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Requests received for `method`.
    pub fn hits(&self, method: &str) -> Vec<Hit> {
        self.inner.hits.lock().unwrap().iter().filter(|h| h.method == method).cloned().collect()
    }

    pub fn hit_count(&self, method: &str) -> usize {
        self.hits(method).len()
    }

    /// Forgets every session, as a restarted server would.
    pub fn expire_sessions(&self) {
        self.inner.sessions.lock().unwrap().clear();
    }

    pub fn set_bearer(&self, token: &str) {
        *self.inner.bearer.lock().unwrap() = Some(token.to_string());
    }

    /// Replaces the tool list (as a server whose tools changed would).
    pub fn set_tools(&self, tools: Vec<(Value, Handler)>) {
        *self.inner.tools.lock().unwrap() = tools;
    }

    /// Announces a tool-list change on every open GET stream.
    pub fn announce_tools_changed(&self) {
        let _ = self.inner.streams.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    }

    /// Announces on every open GET stream that a resource changed (as to a subscriber).
    pub fn announce_resource_updated(&self, uri: &str) {
        let _ = self
            .inner
            .streams
            .send(json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}));
    }

    pub fn get_streams_opened(&self) -> usize {
        self.inner.get_streams_opened.load(Ordering::SeqCst)
    }

    /// While down, every request gets a 503.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }
}

pub fn tool_def(name: &str, schema: Value) -> Value {
    json!({ "name": name, "description": format!("The {name} tool."), "inputSchema": schema })
}

pub fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": false })
}

/// A handler that echoes `arguments.message` (or the whole arguments object).
pub fn echo() -> Handler {
    Arc::new(|args: &Value| {
        let text = args.get("message").and_then(Value::as_str).map_or_else(|| args.to_string(), str::to_string);
        text_result(&text)
    })
}

impl FakeUpstreamBuilder {
    pub fn era(mut self, era: Era) -> Self {
        self.era = era;
        self
    }

    pub fn tool(mut self, name: &str, schema: Value, handler: Handler) -> Self {
        self.tools.push((tool_def(name, schema), handler));
        self
    }

    pub fn tool_def(mut self, def: Value, handler: Handler) -> Self {
        self.tools.push((def, handler));
        self
    }

    pub fn echo_tool(self, name: &str) -> Self {
        self.tool(name, json!({"type": "object", "properties": {"message": {"type": "string"}}}), echo())
    }

    pub fn prompt(mut self, name: &str) -> Self {
        self.prompts.push(json!({ "name": name, "description": format!("The {name} prompt.") }));
        self
    }

    pub fn resource(mut self, uri: &str, text: &str) -> Self {
        self.resources.push((json!({ "uri": uri, "name": uri }), text.to_string()));
        self
    }

    pub fn template(mut self, template: &str) -> Self {
        self.templates.push(json!({ "uriTemplate": template, "name": template }));
        self
    }

    pub fn page_size(mut self, n: usize) -> Self {
        self.page_size = n;
        self
    }

    pub fn sse_responses(mut self) -> Self {
        self.sse = true;
        self
    }

    pub fn session_errors(mut self, style: SessionErrorStyle) -> Self {
        self.session_style = style;
        self
    }

    pub fn require_bearer(mut self, token: &str) -> Self {
        self.bearer = Some(token.to_string());
        self
    }

    pub fn fault(mut self, tool: &str, fault: Fault) -> Self {
        self.faults.insert(tool.to_string(), fault);
        self
    }

    pub async fn start(self) -> FakeUpstream {
        let inner = Arc::new(Inner {
            era: self.era,
            tools: Mutex::new(self.tools),
            prompts: self.prompts,
            resources: self.resources,
            templates: self.templates,
            page_size: self.page_size,
            sse: self.sse,
            session_style: self.session_style,
            bearer: Mutex::new(self.bearer),
            faults: Mutex::new(self.faults),
            sessions: Mutex::new(HashSet::new()),
            session_counter: AtomicUsize::new(0),
            hits: Mutex::new(Vec::new()),
            down: AtomicBool::new(false),
            answers: Mutex::new(HashMap::new()),
            streams: tokio::sync::broadcast::channel(16).0,
            get_streams_opened: AtomicUsize::new(0),
        });
        let app =
            Router::new().route("/mcp", post(handle).get(open_stream).delete(end_session)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeUpstream { addr, inner }
    }
}

/// DELETE: the client ends its session.
async fn end_session(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    let session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    inner.hits.lock().unwrap().push(Hit {
        id: None,
        method: "DELETE".into(),
        params: json!({"session": session}),
        headers,
    });
    let status = if inner.sessions.lock().unwrap().remove(&session) { StatusCode::OK } else { StatusCode::NOT_FOUND };
    Response::builder().status(status).body(Body::empty()).unwrap()
}

/// GET: the session's server-to-client stream (legacy era only).
async fn open_stream(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    let session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).unwrap_or("");
    if inner.era != Era::Legacy || !inner.sessions.lock().unwrap().contains(session) {
        return Response::builder().status(StatusCode::METHOD_NOT_ALLOWED).body(Body::empty()).unwrap();
    }
    inner.get_streams_opened.fetch_add(1, Ordering::SeqCst);
    let messages = tokio_stream_of(inner.streams.subscribe());
    Response::builder().header("content-type", "text/event-stream").body(Body::from_stream(messages)).unwrap()
}

fn tokio_stream_of(
    rx: tokio::sync::broadcast::Receiver<Value>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        let message = rx.recv().await.ok()?;
        Some((Ok(Bytes::from(format!("event: message\ndata: {message}\n\n"))), rx))
    })
}

fn reply(status: StatusCode, body: Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

async fn handle(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let message: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            return reply(
                StatusCode::BAD_REQUEST,
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}),
            );
        }
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("").to_string();
    let params = message.get("params").cloned().unwrap_or(json!({}));
    inner.hits.lock().unwrap().push(Hit {
        id: message.get("id").cloned(),
        method: method.clone(),
        params: params.clone(),
        headers: headers.clone(),
    });

    // Recorded even while down: tests count what reached the server.
    if inner.down.load(Ordering::SeqCst) {
        return reply(StatusCode::SERVICE_UNAVAILABLE, json!({}));
    }
    let expected_bearer = inner.bearer.lock().unwrap().clone();
    if let Some(token) = expected_bearer {
        let presented = headers.get("authorization").and_then(|v| v.to_str().ok());
        if presented != Some(&format!("Bearer {token}")) {
            return reply(StatusCode::UNAUTHORIZED, json!({"error": "unauthorized"}));
        }
    }
    // A response to one of our server requests.
    if message.get("method").is_none() {
        let id =
            message.get("id").map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string)).unwrap_or_default();
        if let Some(tx) = inner.answers.lock().unwrap().remove(&id) {
            let _ = tx.send(message.get("result").or_else(|| message.get("error")).cloned().unwrap_or(Value::Null));
        }
        return Response::builder().status(StatusCode::ACCEPTED).body(Body::empty()).unwrap();
    }
    let Some(id) = message.get("id").cloned() else {
        // Notifications (and responses) are accepted without a body.
        return Response::builder().status(StatusCode::ACCEPTED).body(Body::empty()).unwrap();
    };

    // Lifecycle by era.
    match (inner.era, method.as_str()) {
        (Era::Legacy, "initialize") => {
            let n = inner.session_counter.fetch_add(1, Ordering::SeqCst) + 1;
            let session = format!("fake-session-{n}");
            inner.sessions.lock().unwrap().insert(session.clone());
            let body = result(
                &id,
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": { "tools": { "listChanged": true }, "prompts": {}, "resources": {} },
                    "serverInfo": { "name": "fake", "version": "1.0.0" },
                }),
            );
            let mut r = reply(StatusCode::OK, body);
            r.headers_mut().insert("mcp-session-id", session.parse().unwrap());
            return r;
        }
        (Era::Legacy, _) => {
            let session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).unwrap_or("");
            if !inner.sessions.lock().unwrap().contains(session) {
                return match inner.session_style {
                    SessionErrorStyle::NotFound404 => {
                        reply(StatusCode::NOT_FOUND, error(&Value::Null, -32001, "Session not found"))
                    }
                    SessionErrorStyle::BadRequest400 => reply(
                        StatusCode::BAD_REQUEST,
                        error(&Value::Null, -32000, "Bad Request: No valid session ID provided"),
                    ),
                };
            }
        }
        (Era::Modern, "server/discover") => {
            return reply(
                StatusCode::OK,
                result(
                    &id,
                    json!({
                        "resultType": "complete",
                        "supportedVersions": ["2026-07-28"],
                        "capabilities": { "tools": {}, "prompts": {}, "resources": {} },
                        "ttlMs": 0, "cacheScope": "public",
                    }),
                ),
            );
        }
        (Era::Modern, _) => {
            let version = params.pointer("/_meta/io.modelcontextprotocol~1protocolVersion").and_then(Value::as_str);
            let header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
            if version != Some("2026-07-28") || header != Some("2026-07-28") {
                return reply(StatusCode::BAD_REQUEST, error(&id, -32602, "missing or mismatched 2026-07-28 envelope"));
            }
        }
        (Era::Bare, "initialize") => {
            return reply(StatusCode::OK, error(&id, -32601, "Method not found"));
        }
        (Era::Bare, _) => {}
    }

    if inner.era == Era::Modern && method == "subscriptions/listen" {
        // Acknowledges, then carries what the test announces (as a GET stream would).
        inner.get_streams_opened.fetch_add(1, Ordering::SeqCst);
        let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": params["notifications"]}});
        let ack = futures_util::stream::once(async move {
            Ok::<_, std::io::Error>(Bytes::from(format!("event: message\ndata: {ack}\n\n")))
        });
        let messages = ack.chain(tokio_stream_of(inner.streams.subscribe()));
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(messages))
            .unwrap();
    }

    let body = match method.as_str() {
        "server/discover" => {
            return reply(
                StatusCode::BAD_REQUEST,
                error(&Value::Null, -32000, "Bad Request: No valid session ID provided"),
            );
        }
        "ping" => result(&id, json!({})),
        "tools/list" => {
            let tools: Vec<Value> = inner.tools.lock().unwrap().iter().map(|(d, _)| d.clone()).collect();
            result(&id, page(&tools, "tools", &params, inner.page_size))
        }
        "prompts/list" => result(&id, page(&inner.prompts, "prompts", &params, inner.page_size)),
        "resources/list" => {
            let resources: Vec<Value> = inner.resources.iter().map(|(d, _)| d.clone()).collect();
            result(&id, page(&resources, "resources", &params, inner.page_size))
        }
        "resources/templates/list" => {
            result(&id, page(&inner.templates, "resourceTemplates", &params, inner.page_size))
        }
        "resources/read" => {
            let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
            match inner.resources.iter().find(|(d, _)| d["uri"] == uri) {
                Some((_, text)) => result(&id, json!({ "contents": [{ "uri": uri, "text": text }] })),
                None if inner
                    .templates
                    .iter()
                    .any(|t| uri.starts_with(t["uriTemplate"].as_str().unwrap().split('{').next().unwrap())) =>
                {
                    result(&id, json!({ "contents": [{ "uri": uri, "text": format!("templated {uri}") }] }))
                }
                None => error(&id, -32002, "Resource not found: secret detail /srv/data"),
            }
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
            if inner.resources.iter().any(|(d, _)| d["uri"] == uri) {
                result(&id, json!({}))
            } else {
                error(&id, -32002, "Resource not found: secret detail /srv/data")
            }
        }
        "prompts/get" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            if inner.prompts.iter().any(|p| p["name"] == name) {
                result(
                    &id,
                    json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": format!("prompt {name}") } }] }),
                )
            } else {
                error(&id, -32602, "Unknown prompt")
            }
        }
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let fault = inner.faults.lock().unwrap().get(&name).cloned();
            match fault {
                Some(Fault::Hang) => std::future::pending::<()>().await,
                Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
                Some(Fault::MalformedJson) => {
                    return Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from("{\"jsonrpc\": \"2.0\", \"id\": "))
                        .unwrap();
                }
                Some(Fault::HugeBody(n)) => {
                    let filler = "x".repeat(n);
                    return reply(StatusCode::OK, result(&id, text_result(&filler)));
                }
                Some(Fault::CloseMidStream) => {
                    let chunks = futures_util::stream::iter(vec![
                        Ok::<_, std::io::Error>(Bytes::from_static(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")),
                        Err(std::io::Error::other("connection dropped")),
                    ]);
                    return Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(chunks))
                        .unwrap();
                }
                Some(Fault::Flood(n)) => {
                    let mut body = String::with_capacity(n * 120);
                    for i in 0..n {
                        let note = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p", "progress": i}});
                        body.push_str(&format!("event: message\ndata: {note}\n\n"));
                    }
                    body.push_str(&format!("event: message\ndata: {}\n\n", result(&id, text_result("survived"))));
                    return Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from(body))
                        .unwrap();
                }
                Some(Fault::AskClient(server_method)) => {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let request_id = format!("srv-{}", inner.session_counter.fetch_add(1, Ordering::SeqCst));
                    inner.answers.lock().unwrap().insert(request_id.clone(), tx);
                    let ask = json!({"jsonrpc": "2.0", "id": request_id, "method": server_method, "params": {"messages": [], "maxTokens": 5}});
                    let first = Bytes::from(format!("event: message\ndata: {ask}\n\n"));
                    let id = id.clone();
                    let rest = futures_util::stream::once(async move {
                        let answer = rx.await.unwrap_or(Value::Null);
                        let done = result(&id, text_result(&answer.to_string()));
                        Ok::<_, std::io::Error>(Bytes::from(format!("event: message\ndata: {done}\n\n")))
                    });
                    let body = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(rest);
                    return Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(body))
                        .unwrap();
                }
                Some(Fault::Http(status)) => {
                    return reply(status, json!({"error": "upstream exploded at /srv/app.py line 3"}));
                }
                None => {}
            }
            let handler =
                inner.tools.lock().unwrap().iter().find(|(d, _)| d["name"] == name.as_str()).map(|(_, h)| h.clone());
            match handler {
                Some(h) => result(&id, h(params.get("arguments").unwrap_or(&json!({})))),
                None => error(&id, -32602, &format!("Unknown tool: {name}")),
            }
        }
        _ => error(&id, -32601, "Method not found"),
    };

    if inner.sse {
        let frames = format!(
            "event: message\ndata: {}\n\nevent: message\ndata: {}\n\n",
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}}),
            body
        );
        return Response::builder().header("content-type", "text/event-stream").body(Body::from(frames)).unwrap();
    }
    reply(StatusCode::OK, body)
}

/// Cursor = offset as a string.
fn page(items: &[Value], key: &str, params: &Value, size: usize) -> Value {
    let start: usize = params.get("cursor").and_then(Value::as_str).and_then(|c| c.parse().ok()).unwrap_or(0);
    let end = start.saturating_add(size).min(items.len());
    let mut out = json!({ key: items[start.min(items.len())..end] });
    if end < items.len() {
        out["nextCursor"] = json!(end.to_string());
    }
    out
}
