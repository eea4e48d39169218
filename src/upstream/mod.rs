//! Upstreams: the MCP client side. One [`Upstream`] per configured server owns its transport,
//! its negotiated era and session, and its health; [`supervise`] keeps its catalog fresh.
//!
//! Must not know about agents, sessions on the front side, or policy. See README.md here for
//! the era/session decisions.

mod auth;
mod mux;
pub mod relay;
pub mod signals;
pub mod sse;
pub mod stdio;
pub mod streamable_http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::catalog::{Catalog, Listing};
use crate::config::{Endpoint, SessionMode, UpstreamConfig};
use crate::protocol::ProtocolVersion;
use crate::telemetry::Metrics;

pub use relay::{Inbound, Relay};
pub use signals::ResourceUpdate;
use signals::Signals;

/// Any JSON-RPC message an upstream sends, as the transports read it (only what they act on).
#[derive(serde::Deserialize)]
struct Message {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

/// A JSON-RPC error object from an upstream.
#[derive(serde::Deserialize)]
struct ErrorBody {
    code: i64,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<Value>,
}
pub use sse::{SseSetup, SseTransport};
pub use stdio::StdioTransport;
pub use streamable_http::StreamableHttp;

/// Health states (SPEC §3). `degraded` arrives with the liveness tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Connecting,
    Up,
    Degraded,
    Down,
}

impl State {
    pub const ALL: [State; 4] = [State::Connecting, State::Up, State::Degraded, State::Down];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Up => "up",
            Self::Degraded => "degraded",
            Self::Down => "down",
        }
    }
}

/// Which protocol lifecycle an upstream speaks, decided by the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: stateless, `_meta` envelope on every request.
    Modern,
    /// `initialize`-based, with the version negotiated with this upstream.
    Legacy(ProtocolVersion),
    /// Answers `initialize` with method-not-found: no lifecycle, no version header.
    Bare,
}

impl Era {
    pub fn label(self) -> &'static str {
        match self {
            Self::Modern => "2026-07-28",
            Self::Legacy(v) => v.as_str(),
            Self::Bare => "bare",
        }
    }
}

/// A failure talking to an upstream. Details are for logs; the class is what operators and
/// agents see.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect: {0}")]
    Connect(#[source] reqwest::Error),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("HTTP status {0}")]
    Status(http::StatusCode),
    #[error("session expired")]
    SessionExpired,
    #[error("unauthorized (HTTP 401)")]
    Unauthorized,
    #[error("response exceeds {0} bytes")]
    TooLarge(usize),
    #[error("malformed response: {0}")]
    Protocol(String),
    #[error("JSON-RPC error {code}: {message}")]
    Rpc { code: i64, message: String, data: Option<serde_json::Value> },
    #[error("token file {path}: {reason}")]
    TokenFile { path: String, reason: String },
    #[error("cannot start the server process: {0}")]
    Spawn(String),
    #[error("the server process exited")]
    Exited,
}

impl UpstreamError {
    /// Bounded set of classes for `/healthz`, metrics and logs.
    pub fn class(&self) -> &'static str {
        match self {
            Self::Connect(_) => "connect",
            Self::Timeout(_) => "timeout",
            Self::Status(_) => "http_status",
            Self::SessionExpired => "session_expired",
            Self::Unauthorized => "unauthorized",
            Self::TooLarge(_) => "too_large",
            Self::Protocol(_) => "protocol",
            Self::Rpc { .. } => "rpc_error",
            Self::TokenFile { .. } => "token_file",
            Self::Spawn(_) => "spawn",
            Self::Exited => "exited",
        }
    }

    /// True when the upstream could not be reached at all (as opposed to answering badly).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::TokenFile { .. } | Self::Spawn(_) | Self::Exited)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub class: &'static str,
    #[serde(serialize_with = "rfc3339")]
    pub at: SystemTime,
}

/// What `/healthz` reports for one upstream.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub namespace: Arc<str>,
    pub state: State,
    pub transport: &'static str,
    pub protocol: Option<&'static str>,
    pub tools: usize,
    pub fingerprint: Option<String>,
    /// The server process, for stdio upstreams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Upstream sessions opened for individual agent sessions (`session = "per_client"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_sessions: Option<usize>,
    pub last_error: Option<Failure>,
    #[serde(serialize_with = "rfc3339")]
    pub since: SystemTime,
}

/// One configured upstream.
pub struct Upstream {
    pub index: usize,
    pub namespace: Arc<str>,
    pub config: UpstreamConfig,
    pub transport: Transport,
    /// With `session = "per_client"`: one transport (upstream session or process) per agent
    /// session, made on first use and closed when the agent session ends.
    per_client: Option<Mutex<HashMap<Arc<str>, Arc<Transport>>>>,
    /// `notifications/resources/updated` from any of this upstream's transports.
    updates: tokio::sync::broadcast::Sender<ResourceUpdate>,
    max_response_bytes: usize,
    health: Mutex<Health>,
    metrics: Arc<Metrics>,
}

impl Upstream {
    pub fn new(
        index: usize,
        config: UpstreamConfig,
        max_response_bytes: usize,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        let namespace: Arc<str> = config.namespace.as_str().into();
        let (updates, _) = tokio::sync::broadcast::channel(signals::UPDATE_BUFFER);
        let transport =
            Transport::build(&namespace, &config, max_response_bytes, Signals::new(index, None, updates.clone()))?;
        let health = Health {
            namespace: namespace.clone(),
            state: State::Connecting,
            transport: transport.kind(),
            protocol: None,
            tools: 0,
            fingerprint: None,
            pid: None,
            client_sessions: None,
            last_error: None,
            since: SystemTime::now(),
        };
        metrics.set_upstream_state(&namespace, State::Connecting);
        let per_client = (config.session == SessionMode::PerClient).then(|| Mutex::new(HashMap::new()));
        Ok(Self {
            index,
            namespace,
            config,
            transport,
            per_client,
            updates,
            max_response_bytes,
            health: Mutex::new(health),
            metrics,
        })
    }

    pub fn health(&self) -> Health {
        let mut health = self.health.lock().expect("health lock poisoned").clone();
        health.client_sessions = self.per_client.is_some().then(|| self.client_sessions());
        health
    }

    pub fn state(&self) -> State {
        self.health.lock().expect("health lock poisoned").state
    }

    /// Sends one request and returns the upstream's raw `result`. What the upstream sends
    /// meanwhile (progress, logs, its own requests) goes to `via.relay`; `via.session` picks the
    /// agent's own upstream session when this upstream is per-client.
    pub async fn request(
        &self,
        method: &str,
        params: Map<String, Value>,
        via: Via<'_>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        match self.transport_for(via.session)? {
            Some(own) => own.request(method, params, via.relay).await,
            None => self.transport.request(method, params, via.relay).await,
        }
    }

    /// Subscribes to (or unsubscribes from) updates of the upstream resource `uri`, through the
    /// agent session's own transport for per-client upstreams.
    pub async fn subscribe(&self, uri: &str, on: bool, via: Via<'_>) -> Result<(), UpstreamError> {
        match self.transport_for(via.session)? {
            Some(own) => own.subscribe(uri, on, via.relay).await,
            None => self.transport.subscribe(uri, on, via.relay).await,
        }
    }

    /// `notifications/resources/updated` as this upstream sends them, from now on.
    pub fn resource_updates(&self) -> tokio::sync::broadcast::Receiver<ResourceUpdate> {
        self.updates.subscribe()
    }

    /// Whether each agent session gets its own upstream session (`session = "per_client"`).
    pub fn is_per_client(&self) -> bool {
        self.per_client.is_some()
    }

    /// The agent session's own transport, for per-client upstreams.
    fn transport_for(&self, session: Option<&Arc<str>>) -> Result<Option<Arc<Transport>>, UpstreamError> {
        let (Some(table), Some(session)) = (&self.per_client, session) else {
            return Ok(None);
        };
        let mut table = table.lock().expect("per-client lock poisoned");
        if let Some(own) = table.get(session) {
            return Ok(Some(own.clone()));
        }
        let signals = Signals::new(self.index, Some(session.clone()), self.updates.clone());
        let own = Arc::new(
            Transport::build(&self.namespace, &self.config, self.max_response_bytes, signals)
                .map_err(UpstreamError::Spawn)?,
        );
        table.insert(session.clone(), own.clone());
        Ok(Some(own))
    }

    /// Closes the upstream session (or process) an ended agent session had.
    pub async fn end_session(&self, session: &str) {
        let own = self.per_client.as_ref().and_then(|t| t.lock().expect("per-client lock poisoned").remove(session));
        if let Some(own) = own {
            own.shutdown().await;
        }
    }

    /// Stops everything this upstream runs: the shared connection and every per-client one.
    pub async fn shutdown(&self) {
        let own: Vec<Arc<Transport>> = self
            .per_client
            .as_ref()
            .map(|t| t.lock().expect("per-client lock poisoned").drain().map(|(_, t)| t).collect())
            .unwrap_or_default();
        for transport in own {
            transport.shutdown().await;
        }
        self.transport.shutdown().await;
    }

    /// Per-client upstream sessions open now.
    pub fn client_sessions(&self) -> usize {
        self.per_client.as_ref().map_or(0, |t| t.lock().expect("per-client lock poisoned").len())
    }

    fn set_state(&self, state: State, failure: Option<&UpstreamError>) {
        let mut h = self.health.lock().expect("health lock poisoned");
        if h.state != state {
            h.since = SystemTime::now();
            tracing::info!(namespace = %self.namespace, from = h.state.as_str(), to = state.as_str(), "upstream state");
        }
        h.state = state;
        if let Some(e) = failure {
            h.last_error = Some(Failure { class: e.class(), at: SystemTime::now() });
        }
        self.metrics.set_upstream_state(&self.namespace, state);
    }

    fn record_listing(&self, tools: usize, fingerprint: Option<String>) {
        let mut h = self.health.lock().expect("health lock poisoned");
        h.tools = tools;
        h.fingerprint = fingerprint;
        h.protocol = self.transport.era().map(Era::label);
        h.transport = self.transport.kind();
        h.pid = match &self.transport {
            Transport::Stdio(t) => t.pid(),
            Transport::Http { .. } => None,
        };
    }

    /// The liveness tier: `ping` for legacy and bare servers, `server/discover` for 2026-07-28
    /// (which has no ping). Any JSON-RPC answer, even an error, proves the server alive.
    async fn ping(&self) -> Result<(), UpstreamError> {
        let method = if self.transport.era() == Some(Era::Modern) { "server/discover" } else { "ping" };
        match self.request(method, Map::new(), Via::default()).await {
            Ok(_) | Err(UpstreamError::Rpc { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Connects (probing the era) and fetches every list the upstream offers.
    async fn load_listing(&self) -> Result<Listing, UpstreamError> {
        let caps = self.transport.ensure_connected().await?;
        let has = |cap: &str| caps.as_ref().is_none_or(|c| c.get(cap).is_some());
        let mut listing = Listing { tools: self.list_all("tools/list", "tools").await?, ..Listing::default() };
        // Optional lists: a server may advertise a capability and still not implement the list;
        // that must not take its tools down with it.
        if has("resources") {
            listing.resources = self.optional_list("resources/list", "resources").await;
            listing.templates = self.optional_list("resources/templates/list", "resourceTemplates").await;
        }
        if has("prompts") {
            listing.prompts = self.optional_list("prompts/list", "prompts").await;
        }
        Ok(listing)
    }

    /// Fetches every page of a list method and returns the items that are JSON objects.
    async fn list_all(&self, method: &str, key: &str) -> Result<Vec<Value>, UpstreamError> {
        const MAX_PAGES: usize = 1000;
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = Map::new();
            if let Some(c) = &cursor {
                params.insert("cursor".into(), Value::from(c.as_str()));
            }
            let page: Value = serde_json::from_str(self.request(method, params, Via::default()).await?.get())
                .map_err(|e| UpstreamError::Protocol(format!("{method} result: {e}")))?;
            let list = page
                .get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| UpstreamError::Protocol(format!("{method} result has no {key:?} array")))?;
            items.extend(list.iter().filter(|v| v.is_object()).cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => cursor = Some(next.to_string()),
                _ => return Ok(items),
            }
        }
        tracing::warn!(namespace = %self.namespace, method, "stopped paginating after {MAX_PAGES} pages");
        Ok(items)
    }

    async fn optional_list(&self, method: &str, key: &str) -> Vec<Value> {
        match self.list_all(method, key).await {
            Ok(items) => items,
            Err(e) => {
                tracing::debug!(namespace = %self.namespace, method, error = %e, "optional list unavailable");
                Vec::new()
            }
        }
    }
}

/// Keeps one upstream healthy and its catalog entry fresh, in two tiers (SPEC §3):
/// a liveness check every `ping_interval` (`ping`, or `server/discover` for 2026-07-28) and a
/// full listing probe every `refresh` — and at once when the server announces a list change.
/// One missed liveness check makes it `degraded` (its tools stay listed); a second, a failed
/// probe, or a dead connection makes it `down`: its tools are withdrawn and it is reconnected
/// with capped exponential backoff and full jitter.
pub async fn supervise(
    upstream: Arc<Upstream>,
    catalog: Arc<Catalog>,
    refresh: Duration,
    first_load: watch::Sender<bool>,
) {
    let mut failures: u32 = 0;
    loop {
        let failure = match publish(&upstream, &catalog).await {
            Ok(()) => {
                failures = 0;
                first_load.send_replace(true);
                watch_until_failure(&upstream, &catalog, refresh).await
            }
            Err(e) => e,
        };
        failures = failures.saturating_add(1);
        withdraw(&upstream, &catalog, &failure);
        first_load.send_replace(true);
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// Loads every listing and publishes it; the upstream is `up` afterwards.
async fn publish(upstream: &Upstream, catalog: &Catalog) -> Result<(), UpstreamError> {
    let listing = upstream.load_listing().await?;
    let tools = listing.tools.len();
    let fingerprint = catalog.update(upstream.index, Some(listing));
    upstream.record_listing(tools, fingerprint);
    upstream.set_state(State::Up, None);
    Ok(())
}

/// The steady state of a connected upstream; returns the failure that ended it.
async fn watch_until_failure(upstream: &Upstream, catalog: &Catalog, refresh: Duration) -> UpstreamError {
    const MISSES_BEFORE_DOWN: u32 = 2;
    let ping_every = upstream.config.ping_interval;
    let mut next_probe = tokio::time::Instant::now() + refresh;
    let mut next_ping = tokio::time::Instant::now() + ping_every;
    let mut misses = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next_probe) => {
                if let Err(e) = publish(upstream, catalog).await {
                    return e;
                }
                next_probe = tokio::time::Instant::now() + refresh;
            }
            () = upstream.transport.list_changed() => {
                tracing::debug!(namespace = %upstream.namespace, "upstream list changed; probing now");
                if let Err(e) = publish(upstream, catalog).await {
                    return e;
                }
                next_probe = tokio::time::Instant::now() + refresh;
            }
            () = tokio::time::sleep_until(next_ping) => {
                match upstream.ping().await {
                    Ok(()) => {
                        if misses > 0 {
                            upstream.set_state(State::Up, None);
                        }
                        misses = 0;
                    }
                    Err(e) => {
                        misses += 1;
                        if misses >= MISSES_BEFORE_DOWN {
                            return e;
                        }
                        tracing::warn!(namespace = %upstream.namespace, class = e.class(), error = %e, "upstream missed a liveness check");
                        upstream.set_state(State::Degraded, Some(&e));
                    }
                }
                next_ping = tokio::time::Instant::now() + ping_every;
            }
            () = upstream.transport.closed() => return UpstreamError::Exited,
        }
    }
}

/// Takes a failed upstream's tools out of the catalog and reports it down.
fn withdraw(upstream: &Upstream, catalog: &Catalog, e: &UpstreamError) {
    tracing::warn!(namespace = %upstream.namespace, class = e.class(), error = %e, "upstream unavailable");
    catalog.update(upstream.index, None);
    upstream.record_listing(0, None);
    upstream.set_state(State::Down, Some(e));
    upstream.transport.reset();
}

/// How a request reaches an upstream beyond its method and params.
#[derive(Clone, Copy, Default)]
pub struct Via<'a> {
    /// Where progress, logs and the upstream's own requests go.
    pub relay: Option<&'a Relay>,
    /// The agent session on whose behalf this is (picks a per-client upstream session).
    pub session: Option<&'a Arc<str>>,
}

/// The transports an upstream can be reached over.
pub enum Transport {
    /// Streamable HTTP, falling back to the legacy HTTP+SSE transport when `initialize` is
    /// refused with 400/404/405 (or straight to it with `use_sse = true`).
    Http {
        streamable: StreamableHttp,
        sse: SseTransport,
        legacy_sse: AtomicBool,
    },
    Stdio(StdioTransport),
}

impl Transport {
    fn build(
        namespace: &Arc<str>,
        config: &UpstreamConfig,
        max_response_bytes: usize,
        signals: Arc<Signals>,
    ) -> Result<Self, String> {
        Ok(match &config.endpoint {
            Endpoint::Http { url, use_sse } => {
                let mut static_headers = http::HeaderMap::new();
                if let Some(origin) = &config.origin {
                    static_headers.insert(http::header::ORIGIN, origin.clone());
                }
                for (name, value) in &config.headers {
                    static_headers.insert(name.clone(), value.clone());
                }
                let setup = SseSetup {
                    namespace: namespace.clone(),
                    url: url.clone(),
                    http: crate::egress::client(&crate::egress::Options {
                        peer: namespace,
                        tls_verify: config.tls_verify,
                        ca_bundle: config.ca_bundle.as_deref(),
                        connect_timeout: config.timeout,
                        timeout: None,
                    })?,
                    token: auth::TokenSource::from_config(&config.auth)?,
                    static_headers,
                    timeout: config.timeout,
                    max_message_bytes: max_response_bytes,
                    signals,
                };
                Transport::Http {
                    streamable: StreamableHttp::new(setup.clone()),
                    sse: SseTransport::new(setup),
                    legacy_sse: AtomicBool::new(*use_sse),
                }
            }
            Endpoint::Stdio(command) => Transport::Stdio(StdioTransport::new(
                namespace,
                command.clone(),
                config.timeout,
                max_response_bytes,
                signals,
            )),
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http { legacy_sse, .. } if legacy_sse.load(Ordering::Relaxed) => "sse",
            Self::Http { .. } => "streamable_http",
            Self::Stdio(_) => "stdio",
        }
    }

    fn sse(&self) -> Option<&SseTransport> {
        match self {
            Self::Http { sse, legacy_sse, .. } if legacy_sse.load(Ordering::Relaxed) => Some(sse),
            _ => None,
        }
    }

    pub fn era(&self) -> Option<Era> {
        match self {
            Self::Http { streamable, sse, legacy_sse } => {
                if legacy_sse.load(Ordering::Relaxed) {
                    sse.era()
                } else {
                    streamable.era()
                }
            }
            Self::Stdio(t) => t.era(),
        }
    }

    pub async fn ensure_connected(&self) -> Result<Option<Value>, UpstreamError> {
        match self {
            Self::Http { streamable, sse, legacy_sse } => {
                if legacy_sse.load(Ordering::Relaxed) {
                    return sse.ensure_connected().await;
                }
                match streamable.ensure_connected().await {
                    // What a server that only speaks the older transport answers a POST with.
                    Err(UpstreamError::Status(s)) if matches!(s.as_u16(), 400 | 404 | 405) => {
                        tracing::info!(
                            status = s.as_u16(),
                            "initialize refused over Streamable HTTP; trying the legacy HTTP+SSE transport"
                        );
                        let fallback = sse.ensure_connected().await;
                        legacy_sse.store(fallback.is_ok(), Ordering::Relaxed);
                        fallback.map_err(|e| {
                            tracing::info!(error = %e, "legacy HTTP+SSE transport failed too");
                            UpstreamError::Status(s)
                        })
                    }
                    other => other,
                }
            }
            Self::Stdio(t) => t.ensure_connected().await,
        }
    }

    pub async fn request(
        &self,
        method: &str,
        params: Map<String, Value>,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        match self {
            Self::Http { sse, legacy_sse, .. } if legacy_sse.load(Ordering::Relaxed) => {
                sse.request(method, params, relay).await
            }
            Self::Http { streamable, .. } => streamable.request(method, params, relay).await,
            Self::Stdio(t) => t.request(method, params, relay).await,
        }
    }

    /// `resources/(un)subscribe`; over Streamable HTTP the transport also keeps them across
    /// upstream sessions and speaks to 2026-07-28 servers through their notification stream.
    pub async fn subscribe(&self, uri: &str, on: bool, relay: Option<&Relay>) -> Result<(), UpstreamError> {
        if let Self::Http { streamable, legacy_sse, .. } = self {
            if !legacy_sse.load(Ordering::Relaxed) {
                return streamable.subscribe(uri, on, relay).await;
            }
        }
        let (method, params) = subscription_request(uri, on);
        self.request(method, params, relay).await.map(|_| ())
    }

    /// Forgets a broken connection so the next request makes a new one.
    pub fn reset(&self) {
        match self {
            Self::Http { streamable, sse, .. } => {
                streamable.reset();
                sse.reset();
            }
            Self::Stdio(t) => t.reset(),
        }
    }

    /// Resolves when the connection is known dead (a stdio process exited, an SSE stream ended).
    pub async fn closed(&self) {
        match (self, self.sse()) {
            (_, Some(sse)) => sse.closed().await,
            (Self::Stdio(t), None) => t.closed().await,
            (Self::Http { .. }, None) => std::future::pending().await,
        }
    }

    /// Resolves when the server announces that one of its lists changed.
    pub async fn list_changed(&self) {
        match (self, self.sse()) {
            (_, Some(sse)) => sse.list_changed().await,
            (Self::Stdio(t), None) => t.list_changed().await,
            (Self::Http { streamable, .. }, None) => streamable.list_changed().await,
        }
    }

    /// Ends the connection for good: stops a stdio process, ends an HTTP session.
    pub async fn shutdown(&self) {
        match self {
            Self::Stdio(t) => t.shutdown().await,
            Self::Http { streamable, sse, .. } => {
                streamable.end_session().await;
                sse.reset();
            }
        }
    }
}

pub(crate) const CLIENT_NAME: &str = "gatehouse";

/// A legacy server's `resources/subscribe` (or `unsubscribe`) of `uri`: method and params.
pub(crate) fn subscription_request(uri: &str, on: bool) -> (&'static str, Map<String, Value>) {
    let mut params = Map::new();
    params.insert("uri".into(), Value::String(uri.to_string()));
    (if on { "resources/subscribe" } else { "resources/unsubscribe" }, params)
}

/// Adds this hop's 2026-07-28 envelope to a request's `_meta` (modern upstreams), or removes
/// every 2026-07-28 key (legacy upstreams). The agent's declared capabilities and log level,
/// when the front door forwarded them, are kept for modern upstreams.
pub(crate) fn stamp_envelope(era: Era, params: &mut Map<String, Value>) {
    use crate::protocol::meta;
    match era {
        Era::Modern => {
            let envelope = params.entry("_meta").or_insert_with(|| serde_json::json!({}));
            if let Some(envelope) = envelope.as_object_mut() {
                envelope.insert(meta::PROTOCOL_VERSION.into(), ProtocolVersion::MODERN.as_str().into());
                envelope.entry(meta::CLIENT_CAPABILITIES).or_insert_with(|| serde_json::json!({}));
                envelope.insert(
                    meta::CLIENT_INFO.into(),
                    serde_json::json!({ "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") }),
                );
            }
        }
        Era::Legacy(_) | Era::Bare => {
            if let Some(envelope) = params.get_mut("_meta").and_then(Value::as_object_mut) {
                envelope.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
            }
        }
    }
}

/// Our `initialize` params. One upstream session serves every agent, so it declares all the
/// client capabilities the gateway can bridge; agents lacking one get a per-request refusal.
pub(crate) fn initialize_params() -> Map<String, Value> {
    let params = serde_json::json!({
        "protocolVersion": ProtocolVersion::LATEST_LEGACY.as_str(),
        "capabilities": { "sampling": {}, "elicitation": {}, "roots": {} },
        "clientInfo": { "name": CLIENT_NAME, "version": env!("CARGO_PKG_VERSION") },
    });
    params.as_object().cloned().unwrap_or_default()
}

/// A `server/discover` result's capabilities, if it says the server speaks 2026-07-28.
pub(crate) fn discovered_capabilities(result: &RawValue) -> Option<Value> {
    let result: Value = serde_json::from_str(result.get()).ok()?;
    let modern = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == ProtocolVersion::MODERN.as_str()));
    modern.then(|| result.get("capabilities").cloned().unwrap_or_else(|| serde_json::json!({})))
}

/// The version and capabilities an `initialize` result settles on.
pub(crate) fn initialized(result: &RawValue) -> Result<(ProtocolVersion, Value), UpstreamError> {
    let result: Value =
        serde_json::from_str(result.get()).map_err(|e| UpstreamError::Protocol(format!("initialize result: {e}")))?;
    let offered = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version = ProtocolVersion::parse(offered)
        .filter(|v| !v.is_modern())
        .ok_or_else(|| UpstreamError::Protocol(format!("upstream offered unsupported protocol version {offered:?}")))?;
    Ok((version, result.get("capabilities").cloned().unwrap_or_else(|| serde_json::json!({}))))
}

/// Full jitter: `U(0, min(cap, base · 2^n))` (the AWS architecture blog's recommendation).
pub fn backoff(attempt: u32) -> Duration {
    const BASE_MS: u64 = 250;
    const CAP_MS: u64 = 30_000;
    let ceiling = BASE_MS.saturating_mul(1u64 << attempt.min(20)).min(CAP_MS);
    Duration::from_millis(rand::random_range(0..=ceiling))
}

fn rfc3339<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    s.serialize_str(&format_utc(secs))
}

/// `YYYY-MM-DDTHH:MM:SSZ` from Unix seconds (civil-from-days, Howard Hinnant's algorithm).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_the_full_jitter_envelope() {
        for attempt in 0..40 {
            let ceiling = (250u64 << attempt.min(20)).min(30_000);
            for _ in 0..50 {
                assert!(backoff(attempt) <= Duration::from_millis(ceiling));
            }
        }
    }

    #[test]
    fn utc_formatting_matches_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1796216400), "2026-12-02T13:00:00Z");
    }
}
