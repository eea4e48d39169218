//! The agent-facing MCP server: both protocol eras on one endpoint, over Streamable HTTP
//! ([`http`]) or stdio ([`stdio`]), plus the operations endpoints ([`ops`]).
//!
//! [`Front::answer`] is the method table shared by every transport and era; transports only
//! decide the era, find the session and frame the bytes. See README.md here for the decisions.

mod gated;
pub mod http;
mod methods;
pub mod ops;
pub mod rest;
pub mod session;
pub mod stdio;
mod subscriptions;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::catalog::Catalog;
use crate::config::{Config, InboundAuth, is_loopback_host};
use crate::contracts::Contracts;
use crate::error::{GatewayError, WireEra};
use crate::gate::Gate;
use crate::gate::tails::Tails;
use crate::pipeline::{Authenticator, Pipeline, Principal};
use crate::protocol::jsonrpc::{self, Request};
use crate::protocol::{ProtocolVersion, meta};
use crate::telemetry::Metrics;
use crate::upstream::{Inbound, Relay, Upstream, Via};
use session::{Session, Sessions};

/// The era of one request, as the body-first classifier decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy(ProtocolVersion),
    Modern,
}

impl Era {
    pub fn wire(self) -> WireEra {
        match self {
            Self::Legacy(_) => WireEra::Legacy,
            Self::Modern => WireEra::Modern,
        }
    }
}

/// Everything a method needs to know about who asks and how.
pub struct Ctx {
    pub era: Era,
    pub principal: Principal,
    pub session: Option<Arc<Session>>,
    /// Where upstream progress, logs and server requests for this request go (None: dropped).
    pub relay: Option<Relay>,
    /// Whether the agent wants `notifications/message` (2026-07-28: only if it set a logLevel).
    pub wants_logs: bool,
    /// W3C baggage `session.id`, a 2026-07-28 agent's way to name its conversation.
    pub baggage_session: Option<String>,
}

impl Ctx {
    pub fn legacy(session: Arc<Session>, principal: Principal, relay: Option<Relay>) -> Self {
        Self {
            era: Era::Legacy(session.version),
            principal,
            session: Some(session),
            relay,
            wants_logs: true,
            baggage_session: None,
        }
    }

    /// How this request's upstream calls travel: its relay, and its session for per-client
    /// upstreams.
    pub fn via(&self) -> Via<'_> {
        Via { relay: self.relay.as_ref(), session: self.session.as_ref().map(|s| &s.id) }
    }

    pub fn modern(principal: Principal, relay: Option<Relay>, wants_logs: bool) -> Self {
        Self { era: Era::Modern, principal, session: None, relay, wants_logs, baggage_session: None }
    }
}

/// Client capabilities a gateway can bridge back to an agent (server-to-client requests).
pub const RELAYABLE_CAPABILITIES: [&str; 3] = ["sampling", "elicitation", "roots"];

/// The capability an upstream's own request needs from the agent.
fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Settings the front door reads on every request, resolved once.
pub struct Settings {
    pub path: String,
    pub max_body_bytes: usize,
    pub allowed_origins: Vec<String>,
    /// None: any Host is accepted (wildcard bind without an allow-list).
    pub allowed_hosts: Option<Vec<String>>,
    pub keep_alive: Duration,
    pub list_ttl: Duration,
    pub cold_start_wait: Duration,
    pub instructions: String,
}

pub struct Front {
    pub settings: Settings,
    pub auth: Authenticator,
    pub catalog: Arc<Catalog>,
    pub pipeline: Pipeline,
    pub upstreams: Arc<[Arc<Upstream>]>,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    pub gate: Arc<Gate>,
    pub contracts: Arc<Contracts>,
    tails: Tails,
    subscriptions: subscriptions::Subscriptions,
    /// Per upstream: subscription changes one at a time, so the registry and the upstream
    /// never disagree about whether a resource is subscribed.
    subscribing: Box<[tokio::sync::Mutex<()>]>,
    first_loads: Vec<watch::Receiver<bool>>,
    warm: AtomicBool,
    server_info: Value,
    /// `[auth] resource`, or `http://ADDR` + path once the listener is bound.
    resource: std::sync::OnceLock<String>,
    authorization_servers: Vec<String>,
}

/// A JSON-RPC answer and the HTTP status it travels with.
pub struct Answer {
    pub status: ::http::StatusCode,
    pub body: Payload,
}

/// Answer bytes: one buffer, or chunks that share a snapshot's pre-serialised listing so a
/// large `tools/list` is never copied per request.
pub enum Payload {
    One(Vec<u8>),
    Chunks(Vec<Bytes>),
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Self {
        Self::One(bytes)
    }
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Self::One(v) => v.len(),
            Self::Chunks(c) => c.iter().map(Bytes::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Contiguous bytes, for framings that need them (stdio lines, SSE events, batches).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Self::One(v) => v,
            Self::Chunks(chunks) => chunks.concat(),
        }
    }
}

/// What a method produces: a raw result, or a result spliced from shared chunks.
pub(crate) enum Reply {
    Raw(Box<RawValue>),
    Chunks(Vec<Bytes>),
}

impl From<Box<RawValue>> for Reply {
    fn from(raw: Box<RawValue>) -> Self {
        Self::Raw(raw)
    }
}

/// What the front door is built from (the wiring in `gateway` makes these).
pub struct Parts {
    pub catalog: Arc<Catalog>,
    pub upstreams: Arc<[Arc<Upstream>]>,
    /// One per upstream: true once its first listing is in (or failed).
    pub first_loads: Vec<watch::Receiver<bool>>,
    pub metrics: Arc<Metrics>,
    /// Ended agent sessions, so their per-client upstream sessions close.
    pub ended_sessions: tokio::sync::mpsc::UnboundedSender<Arc<str>>,
    pub contracts: Arc<Contracts>,
    pub policy: Arc<crate::policy::Policy>,
    /// Keys the audit log's argument hashes (a store secret).
    pub audit_key: Vec<u8>,
}

impl Front {
    pub fn new(config: &Config, parts: Parts) -> Self {
        let Parts { catalog, upstreams, first_loads, metrics, ended_sessions, contracts, policy, audit_key } = parts;
        let g = &config.gateway;
        let wildcard = matches!(g.host.as_str(), "0.0.0.0" | "::" | "[::]");
        let allowed_hosts = if wildcard && g.allowed_hosts.is_empty() {
            None
        } else {
            let mut hosts = g.allowed_hosts.clone();
            if !is_loopback_host(&g.host) {
                hosts.push(g.host.to_ascii_lowercase());
            }
            Some(hosts)
        };
        let settings = Settings {
            path: g.path.clone(),
            max_body_bytes: g.max_body_bytes,
            allowed_origins: g.allowed_origins.clone(),
            allowed_hosts,
            keep_alive: Duration::from_secs(15),
            list_ttl: g.manifest_ttl,
            cold_start_wait: g.cold_start_wait,
            instructions: g.instructions.clone().unwrap_or_else(|| default_instructions(config)),
        };
        if matches!(g.auth, InboundAuth::Disabled { .. }) {
            tracing::warn!(
                "AUTHENTICATION IS DISABLED (auth_disabled = true): anyone who can reach {}:{} can call every tool",
                g.host,
                g.port
            );
        }
        let namer = catalog.namer().clone();
        Self {
            settings,
            auth: Authenticator::new(&g.auth, &config.auth),
            pipeline: Pipeline::new(catalog.clone(), upstreams.clone(), contracts.clone(), policy.clone(), audit_key),
            subscribing: upstreams.iter().map(|_| tokio::sync::Mutex::new(())).collect(),
            catalog,
            upstreams,
            sessions: Sessions::new(g.session_idle_timeout, g.max_sessions, ended_sessions),
            gate: Arc::new(Gate::new(config, namer, metrics.clone(), contracts.clone(), policy)),
            contracts,
            tails: Tails::new(config.gating.session_tail_max, config.gating.max_conversations),
            subscriptions: subscriptions::Subscriptions::default(),
            metrics,
            first_loads,
            warm: AtomicBool::new(false),
            server_info: json!({ "name": "gatehouse", "version": env!("CARGO_PKG_VERSION") }),
            resource: config
                .auth
                .resource
                .as_ref()
                .map(|u| u.to_string())
                .map(std::sync::OnceLock::from)
                .unwrap_or_default(),
            authorization_servers: config
                .auth
                .jwt
                .as_ref()
                .map(|j| j.authorization_servers.clone())
                .unwrap_or_default(),
        }
    }

    /// Records where the MCP endpoint is reachable (unless `[auth] resource` said so already).
    pub fn set_listen_addr(&self, addr: std::net::SocketAddr) {
        let _ = self.resource.set(format!("http://{addr}{}", self.settings.path));
    }

    /// The protected resource (the MCP endpoint's URL) and its metadata document's URL.
    pub fn resource(&self) -> Option<(&str, String)> {
        let resource = self.resource.get()?;
        let url = reqwest::Url::parse(resource).ok()?;
        let metadata =
            format!("{}/.well-known/oauth-protected-resource{}", url.origin().ascii_serialization(), url.path());
        Some((resource, metadata))
    }

    /// The `WWW-Authenticate` challenge of a 401: where to learn how to get a token (RFC 9728).
    pub fn challenge(&self) -> String {
        match self.resource() {
            Some((_, metadata)) => format!("Bearer realm=\"gatehouse\", resource_metadata=\"{metadata}\""),
            None => "Bearer realm=\"gatehouse\"".to_string(),
        }
    }

    /// RFC 9728 protected-resource metadata.
    pub fn resource_metadata(&self) -> Value {
        json!({
            "resource": self.resource().map(|(r, _)| r),
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "Gatehouse MCP gateway",
        })
    }

    /// Answers one request: the method table, the era's result decoration, the error mapping.
    pub async fn answer(&self, ctx: &Ctx, request: Request) -> Answer {
        let result = self.call(ctx, &request.method, request.params.as_deref()).await;
        let outcome = result.as_ref().map_or_else(GatewayError::class, |_| "ok");
        self.metrics.count_request(&request.method, outcome);
        let body = match result {
            Ok(Reply::Raw(result)) => Payload::One(jsonrpc::result_bytes(request.id.raw(), &result)),
            Ok(Reply::Chunks(parts)) => {
                let mut head = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
                head.extend_from_slice(request.id.raw().get().as_bytes());
                head.extend_from_slice(b",\"result\":");
                let mut chunks = Vec::with_capacity(parts.len() + 2);
                chunks.push(Bytes::from(head));
                chunks.extend(parts);
                chunks.push(Bytes::from_static(b"}"));
                Payload::Chunks(chunks)
            }
            Err(e) => return self.error_answer(ctx.era.wire(), Some(request.id.raw()), &e),
        };
        Answer { status: ::http::StatusCode::OK, body }
    }

    pub fn error_answer(&self, era: WireEra, id: Option<&RawValue>, e: &GatewayError) -> Answer {
        if matches!(e, GatewayError::Internal(_) | GatewayError::UpstreamError { .. }) {
            tracing::warn!(error = %e, source = ?std::error::Error::source(e), "request failed");
        }
        Answer { status: e.http_status(era), body: Payload::One(jsonrpc::error_bytes(id, &e.to_rpc_error(era))) }
    }

    async fn call(&self, ctx: &Ctx, method: &str, params: Option<&RawValue>) -> Result<Reply, GatewayError> {
        let raw = match method {
            "ping" if ctx.era != Era::Modern => Ok(jsonrpc::raw(&json!({}))),
            "server/discover" => Ok(self.finish(ctx, self.discover())),
            "tools/list" => return self.list_tools(ctx, params).await,
            "resources/list" => return self.list(ctx, List::Resources, params).await,
            "resources/templates/list" => return self.list(ctx, List::Templates, params).await,
            "prompts/list" => return self.list(ctx, List::Prompts, params).await,
            "tools/call" => self.tools_call(ctx, params).await,
            "resources/read" => self.resources_read(ctx, params).await,
            "resources/subscribe" if ctx.era != Era::Modern => self.resources_subscribe(ctx, params, true).await,
            "resources/unsubscribe" if ctx.era != Era::Modern => self.resources_subscribe(ctx, params, false).await,
            "prompts/get" => self.prompts_get(ctx, params).await,
            "completion/complete" => self.complete(ctx, params).await,
            "logging/setLevel" if ctx.era != Era::Modern => self.set_log_level(ctx, params).await,
            _ => Err(GatewayError::MethodNotFound),
        };
        raw.map(Reply::Raw)
    }

    /// Turns what an upstream sent mid-request into the message the agent gets, if any.
    /// Server requests go only to legacy sessions that declared the capability (2026-07-28
    /// forbids server-initiated requests); the others are refused so the upstream moves on.
    pub fn relay_to_agent(&self, ctx: &Ctx, inbound: Inbound) -> Option<Vec<u8>> {
        match inbound {
            Inbound::Notification { method, params } => {
                let wanted = match method.as_str() {
                    "notifications/progress" => true,
                    "notifications/message" => ctx.wants_logs,
                    // List changes are the catalog's business, not this request's.
                    _ => false,
                };
                wanted.then(|| jsonrpc::notification_bytes(&method, &params))
            }
            Inbound::Request { method, params, respond } => {
                if method == "ping" {
                    let _ = respond.send(Ok(json!({})));
                    return None;
                }
                let session = ctx.session.as_ref().filter(|_| ctx.era != Era::Modern);
                match (session, capability_for(&method)) {
                    (Some(session), Some(capability)) if session.declared(capability) => {
                        let id = session.expect_answer(respond);
                        Some(
                            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
                                .to_string()
                                .into_bytes(),
                        )
                    }
                    _ => {
                        let _ = respond.send(Err(crate::upstream::relay::unsupported(&method)));
                        None
                    }
                }
            }
        }
    }

    /// Waits (bounded by `cold_start_wait`) until every upstream has answered its first probe.
    pub async fn ready(&self) {
        self.warm_up().await;
    }

    /// Waits (bounded) for every upstream's first load, so the first listing after start-up is
    /// complete; afterwards listings never wait on an upstream.
    pub(super) async fn warm_up(&self) {
        if self.warm.load(Ordering::Relaxed) {
            return;
        }
        let all = futures_util::future::join_all(self.first_loads.iter().cloned().map(|mut rx| async move {
            let _ = rx.wait_for(|loaded| *loaded).await;
        }));
        if tokio::time::timeout(self.settings.cold_start_wait, all).await.is_err() {
            tracing::warn!(wait = ?self.settings.cold_start_wait, "serving before every upstream answered its first probe");
        }
        self.warm.store(true, Ordering::Relaxed);
    }

    /// 2026-07-28 results carry `resultType` and the server's identity; legacy ones pass as is.
    fn finish(&self, ctx: &Ctx, result: Value) -> Box<RawValue> {
        let mut result = result;
        if ctx.era == Era::Modern {
            if let Some(map) = result.as_object_mut() {
                decorate_modern(map, &self.server_info);
            }
        }
        jsonrpc::raw(&result)
    }

    fn finish_raw(&self, ctx: &Ctx, raw: Box<RawValue>) -> Box<RawValue> {
        if ctx.era != Era::Modern {
            return raw;
        }
        match serde_json::from_str::<Map<String, Value>>(raw.get()) {
            Ok(mut map) => {
                decorate_modern(&mut map, &self.server_info);
                jsonrpc::raw(&Value::Object(map))
            }
            Err(_) => raw,
        }
    }

    fn discover(&self) -> Value {
        let mut supported = vec![ProtocolVersion::MODERN.as_str()];
        supported.extend(ProtocolVersion::LEGACY.iter().map(|v| v.as_str()));
        json!({
            "supportedVersions": supported,
            "capabilities": self.capabilities(),
            "instructions": self.settings.instructions,
            "ttlMs": self.settings.list_ttl.as_millis() as u64,
            "cacheScope": "public",
        })
    }

    /// Only what is actually proxied is advertised.
    fn capabilities(&self) -> Value {
        json!({
            "tools": { "listChanged": true },
            // Legacy sessions subscribe with resources/subscribe, 2026-07-28 agents on their
            // subscriptions/listen stream.
            "resources": { "listChanged": true, "subscribe": true },
            "prompts": { "listChanged": true },
            "completions": {},
            "logging": {},
        })
    }

    pub fn initialize_result(&self, version: ProtocolVersion) -> Value {
        json!({
            "protocolVersion": version.as_str(),
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info,
            "instructions": self.settings.instructions,
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum List {
    Resources,
    Templates,
    Prompts,
}

fn decorate_modern(map: &mut Map<String, Value>, server_info: &Value) {
    map.entry("resultType").or_insert_with(|| json!("complete"));
    let meta = map.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(meta::SERVER_INFO.into(), server_info.clone());
    }
}

fn default_instructions(config: &Config) -> String {
    let separator = &config.gateway.separator;
    if config.prefixed() {
        format!(
            "Gatehouse aggregates the tools of several MCP servers. Each tool is named \
             <namespace>{separator}<tool>, where the namespace says which server runs it; resources are \
             addressed as <namespace>+<uri>."
        )
    } else {
        "Gatehouse proxies the tools of the MCP servers behind it under their own names.".into()
    }
}

/// The `list_changed` notifications that tell a client its view moved from `before` to `after`.
pub fn changed_lists(before: crate::catalog::ViewHashes, after: crate::catalog::ViewHashes) -> Vec<&'static str> {
    let mut methods = Vec::new();
    if before.tools != after.tools {
        methods.push("notifications/tools/list_changed");
    }
    if before.resources != after.resources {
        methods.push("notifications/resources/list_changed");
    }
    if before.prompts != after.prompts {
        methods.push("notifications/prompts/list_changed");
    }
    methods
}

/// Relays an upstream's `notifications/resources/updated` to the sessions subscribed to that
/// resource, under the URI they subscribed with. One task per upstream.
pub async fn fan_out_resource_updates(front: Arc<Front>, upstream: usize) {
    use tokio::sync::broadcast::error::RecvError;
    let mut updates = front.upstreams[upstream].resource_updates();
    loop {
        let update = match updates.recv().await {
            Ok(update) => update,
            // An update only says "read it again": a subscriber that misses one is told by the next.
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "resource updates dropped: they came faster than they were relayed");
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        let key = subscriptions::Key { upstream: update.upstream, session: update.session, uri: update.uri };
        let subscribers = front.subscriptions.subscribers(&key);
        if subscribers.is_empty() {
            continue;
        }
        let uri = front.catalog.snapshot().expose_uri(&front.upstreams[upstream].namespace, &key.uri);
        let message = jsonrpc::notification_bytes("notifications/resources/updated", &json!({ "uri": uri }));
        for session in subscribers {
            session.notify(&message);
        }
    }
}

/// An ended session's subscriptions: forgotten, and the upstream subscriptions only it held
/// are released (per-client upstream sessions end with the agent's, so they need no word).
pub async fn release_subscriptions(front: &Front, session: &str) {
    for key in front.subscriptions.forget(session) {
        if key.session.is_some() {
            continue;
        }
        let _one_at_a_time = front.subscribing[key.upstream].lock().await;
        if !front.subscriptions.subscribers(&key).is_empty() {
            continue; // somebody subscribed again meanwhile
        }
        let upstream = &front.upstreams[key.upstream];
        if let Err(e) = upstream.subscribe(&key.uri, false, Via::default()).await {
            tracing::debug!(namespace = %upstream.namespace, error = %e, "releasing a resource subscription failed");
        }
    }
}

/// Sends legacy sessions with an open GET stream the `list_changed` notifications for what
/// changed in the catalog.
pub async fn fan_out_list_changed(front: Arc<Front>) {
    let mut catalog = front.catalog.subscribe();
    let mut contracts = front.contracts.subscribe();
    let mut last = catalog.borrow_and_update().view_hashes;
    loop {
        let methods = tokio::select! {
            changed = catalog.changed() => {
                if changed.is_err() {
                    return;
                }
                let now = catalog.borrow_and_update().view_hashes;
                let methods = changed_lists(last, now);
                last = now;
                methods
            }
            // A tool quarantined or approved changes what agents may see.
            changed = contracts.changed() => {
                if changed.is_err() {
                    return;
                }
                vec!["notifications/tools/list_changed"]
            }
        };
        if methods.is_empty() {
            continue;
        }
        for session in front.sessions.all() {
            for method in &methods {
                session.notify(&jsonrpc::notification_bytes(method, &json!({})));
            }
        }
    }
}
