//! Test support: the fake upstream, a real gateway process, and small MCP clients.

pub mod fake_upstream;
pub mod peers;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub use fake_upstream::{Era, FakeUpstream, Fault, Handler, SessionErrorStyle, echo, tool_def};

/// A `gatehouse serve` process on an ephemeral port, killed on drop.
pub struct TestGateway {
    _child: Child,
    /// The MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`.
    pub url: String,
    /// `http://127.0.0.1:41234`
    pub base: String,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

pub const BIN: &str = env!("CARGO_BIN_EXE_gatehouse");

impl TestGateway {
    /// `config` is TOML; `port = 0` is added to `[gateway]` if missing.
    pub async fn start(config: &str) -> Self {
        Self::start_with_env(config, &[]).await
    }

    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = if config.contains("port =") {
            config.to_string()
        } else {
            config.replacen("[gateway]", "[gateway]\nport = 0", 1)
        };
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(&path, config).unwrap();
        let log = dir.path().join("gatehouse.log");
        let mut command = Command::new(BIN);
        command
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "info,gatehouse=debug")
            // The default store (contracts, audit) goes in this test's own directory.
            .env("XDG_DATA_HOME", dir.path())
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn gatehouse");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!("gatehouse did not start; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
            })
            .unwrap()
            .unwrap_or_else(|| panic!("gatehouse exited; log:\n{}", std::fs::read_to_string(&log).unwrap_or_default()));
        let url = line.strip_prefix("gatehouse listening on ").expect("listening line").to_string();
        let base = url.rsplit_once('/').unwrap().0.to_string();
        Self { _child: child, url, base, _dir: dir, log }
    }

    /// SIGTERM, then waits for the process to exit (graceful shutdown).
    pub async fn terminate(&mut self) {
        if let Some(pid) = self._child.id() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), self._child.wait()).await;
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn healthz(&self) -> Value {
        serde_json::from_str(
            &crate::support::http_client()
                .get(format!("{}/healthz", self.base))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap(),
        )
        .unwrap()
    }

    /// Polls /healthz until `namespace` is in `state` (the gateway's supervisors run async).
    pub async fn wait_for_state(&self, namespace: &str, state: &str) -> Value {
        for _ in 0..200 {
            let health = self.healthz().await;
            let found = health["upstreams"].as_array().unwrap().iter().find(|u| u["namespace"] == namespace).cloned();
            if found.as_ref().is_some_and(|u| u["state"] == state) {
                return found.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{namespace} never reached {state}: {}\nlog:\n{}", self.healthz().await, self.logs());
    }
}

/// A raw HTTP response, body as text.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    /// The JSON-RPC message: the body, or the last `data:` message of an SSE body.
    pub fn json(&self) -> Value {
        let is_sse =
            self.headers.get("content-type").is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        if is_sse {
            let data: Vec<&str> =
                self.body.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| !d.trim().is_empty()).collect();
            return serde_json::from_str(data.last().expect("an SSE message")).unwrap();
        }
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A hand-rolled legacy (2025-11-25) MCP client: exact control over every header and body.
pub struct Legacy {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub token: Option<String>,
    pub version: String,
    next_id: AtomicU64,
}

impl Legacy {
    pub fn new(url: &str) -> Self {
        Self {
            http: crate::support::http_client(),
            url: url.to_string(),
            session: None,
            token: None,
            version: "2025-11-25".into(),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    /// Opens the session's GET stream (server-to-client notifications).
    pub async fn open_stream(&self) -> reqwest::Response {
        let session = self.session.as_ref().expect("an initialized session");
        self.http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .send()
            .await
            .unwrap()
    }

    /// Initializes, records the session id, sends `notifications/initialized`.
    pub async fn connect(url: &str) -> Self {
        let mut client = Self::new(url);
        client.initialize().await;
        client
    }

    pub async fn initialize(&mut self) -> Value {
        let reply = self
            .post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": self.version, "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}}))
            .await;
        assert_eq!(reply.status, 200, "initialize: {}", reply.body);
        self.session = reply.header("mcp-session-id").map(str::to_string);
        // From here on the client speaks the version the server chose.
        self.version = reply.json()["result"]["protocolVersion"].as_str().unwrap().to_string();
        let n = self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(n.status, 202);
        reply.json()["result"].clone()
    }

    pub async fn post(&self, body: Value) -> Reply {
        self.post_with(body.to_string(), &[]).await
    }

    /// POSTs `body` with the session/version/auth headers plus `extra` (which override).
    pub async fn post_with(&self, body: String, extra: &[(&str, &str)]) -> Reply {
        let mut headers = http::HeaderMap::new();
        let mut set = |k: &str, v: &str| {
            headers.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        };
        set("content-type", "application/json");
        set("accept", "application/json, text/event-stream");
        if let Some(s) = &self.session {
            set("mcp-session-id", s);
            set("mcp-protocol-version", &self.version);
        }
        if let Some(t) = &self.token {
            set("authorization", &format!("Bearer {t}"));
        }
        for (k, v) in extra {
            set(k, v);
        }
        read(self.http.post(&self.url).headers(headers).body(body).send().await.unwrap()).await
    }

    /// A request; returns the whole JSON-RPC response.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let reply = self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        let message = reply.json();
        assert_eq!(message["id"], id, "{}", reply.body);
        message
    }

    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments})).await
    }

    pub async fn tool_names(&self) -> Vec<String> {
        let list = self.request("tools/list", json!({})).await;
        list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }
}

pub async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap_or_default();
    Reply { status, headers, body }
}

/// A 2026-07-28 request with a correct envelope and headers; `tweak` may alter the headers.
pub async fn modern(url: &str, method: &str, mut params: Value, tweak: &[(&str, Option<&str>)]) -> Reply {
    let meta = params.as_object_mut().unwrap().entry("_meta").or_insert(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "it", "version": "0"});
    let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_string);
    let mut headers: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        ("accept".into(), "application/json, text/event-stream".into()),
        ("mcp-protocol-version".into(), "2026-07-28".into()),
        ("mcp-method".into(), method.into()),
    ];
    if let Some(name) = name {
        headers.push(("mcp-name".into(), name));
    }
    for (k, v) in tweak {
        headers.retain(|(h, _)| h != k);
        if let Some(v) = v {
            headers.push((k.to_string(), v.to_string()));
        }
    }
    let mut req = crate::support::http_client().post(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    read(req.body(body.to_string()).send().await.unwrap()).await
}

/// Opens a 2026-07-28 `subscriptions/listen` stream with request id `id` asking for
/// `notifications`; returns the streaming response.
pub async fn open_listen(url: &str, id: &str, notifications: Value) -> reqwest::Response {
    let params = json!({
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}},
        "notifications": notifications,
    });
    crate::support::http_client()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .body(json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params}).to_string())
        .send()
        .await
        .unwrap()
}

/// A minimal `[[upstreams]]` block.
pub fn upstream_block(namespace: &str, url: &str) -> String {
    format!("\n[[upstreams]]\nnamespace = \"{namespace}\"\nurl = \"{url}\"\n")
}

/// Gating and the search tool off: tests about routing and protocol list the whole catalog,
/// exactly as the upstreams offer it.
pub const PLAIN_CATALOG: &str = "[gating]\nenabled = false\n[rag]\nenabled = false\n";

/// Gateway config fronting the given (namespace, url) upstreams, auth disabled.
pub fn config_for(upstreams: &[(&str, &str)]) -> String {
    let mut config = format!("[gateway]\nauth_disabled = true\nmanifest_ttl = \"1s\"\n{PLAIN_CATALOG}");
    for (ns, url) in upstreams {
        config.push_str(&upstream_block(ns, url));
    }
    config
}

/// A reqwest client for tests. The crate builds reqwest without a default TLS provider (the
/// gateway configures ring itself), so tests install ring as the process default once.
pub fn http_client() -> reqwest::Client {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::new()
}
