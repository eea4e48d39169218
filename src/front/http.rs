//! Streamable HTTP for agents: `POST/GET/DELETE` on the MCP path, both eras on one endpoint.
//!
//! Every request passes, in this order: Origin and Host (DNS-rebinding defence — before
//! anything else, so a hostile page learns nothing), authentication, media types, the body
//! limit, then the body-first era classifier (digest §5):
//! initialize → legacy; `_meta` protocol version → 2026-07-28; a 2026-07-28 header without the
//! envelope → 400; anything else → legacy session.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use base64::Engine;
use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::session::{InflightGuard, Session};
use super::{Answer, Ctx, Front, Payload};
use crate::config::is_loopback_host;
use crate::error::{FieldError, GatewayError, WireEra};
use crate::pipeline::Principal;
use crate::protocol::jsonrpc::{self, Incoming, Message, Notification, Request, RequestId, parse_params};
use crate::protocol::{ProtocolVersion, header as mcp_header, meta, sse};
use crate::upstream::{Inbound, Relay, Via};

pub fn router(front: Arc<Front>) -> Router {
    let path = front.settings.path.clone();
    Router::new()
        .route(&path, get(mcp_get).post(mcp_post).delete(mcp_delete))
        .route("/healthz", get(super::ops::healthz))
        .route("/v1/tools/{spec}", axum::routing::post(super::rest::call_tool))
        .route("/v1/audit", get(super::rest::audit))
        .route("/.well-known/oauth-protected-resource", get(super::ops::protected_resource))
        .route("/.well-known/oauth-protected-resource/{*path}", get(super::ops::protected_resource))
        .route("/readyz", get(super::ops::readyz))
        .route("/metrics", get(super::ops::metrics))
        .route("/metrics.json", get(super::ops::metrics_json))
        .route("/context/select", axum::routing::post(super::ops::context_select))
        .with_state(front)
}

async fn mcp_post(State(front): State<Arc<Front>>, headers: HeaderMap, body: Body) -> Response {
    let principal = match front.admit(&headers) {
        Ok(principal) => principal,
        Err(e) => return front.reject(&e),
    };
    if !is_json(&headers) {
        return front.reject(&GatewayError::UnsupportedMediaType);
    }
    if !accepts(&headers, "application/json") || !accepts(&headers, "text/event-stream") {
        return front.reject(&GatewayError::NotAcceptable("both application/json and text/event-stream"));
    }
    let bytes = match axum::body::to_bytes(body, front.settings.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => return front.reject(&GatewayError::PayloadTooLarge),
    };
    let incoming = match jsonrpc::parse_body(&bytes) {
        Ok(incoming) => incoming,
        Err(rejected) => {
            return front.reject_with_id(WireEra::Legacy, rejected.id.as_ref().map(|id| id.raw()), &rejected.error);
        }
    };
    match incoming {
        // A 2026-07-28 envelope wins even on `initialize`, which that revision removed (-32601).
        Incoming::Single(Message::Request(req)) if modern_envelope(&req).is_some() => {
            front.modern(&headers, principal, req).await
        }
        Incoming::Single(Message::Request(req)) if req.method == "initialize" => front.initialize(principal, req),
        other => front.legacy(&headers, principal, other).await,
    }
}

/// GET opens the session's server-to-client stream (legacy only; 2026-07-28 has no GET).
async fn mcp_get(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    let principal = match front.admit(&headers) {
        Ok(principal) => principal,
        Err(e) => return front.reject(&e),
    };
    if !accepts(&headers, "text/event-stream") {
        return front.reject(&GatewayError::NotAcceptable("text/event-stream"));
    }
    let session = match front.session(&headers, &principal) {
        Ok(session) => session,
        Err(e) => return front.reject(&e),
    };
    let (stream_id, rx) = session.open_stream();
    let priming = stream::once({
        let id = format!("{stream_id}-0");
        async move { sse::priming_event(&id, 3000) }
    });
    // Event ids are unique per stream: the stream's id, then a sequence number.
    let messages = tokio_stream_from(rx)
        .enumerate()
        .map(move |(seq, message)| sse::message_event(Some(&format!("{stream_id}-{}", seq + 1)), &message));
    sse_response(StatusCode::OK, with_keep_alive(priming.chain(messages), front.settings.keep_alive), None)
}

async fn mcp_delete(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    let principal = match front.admit(&headers) {
        Ok(principal) => principal,
        Err(e) => return front.reject(&e),
    };
    match front.session(&headers, &principal) {
        Ok(session) => {
            front.sessions.remove(&session.id);
            tracing::debug!(session = %&session.id[..8], "session ended by client");
            Response::builder().status(StatusCode::OK).body(Body::empty()).expect("static response")
        }
        Err(e) => front.reject(&e),
    }
}

/// The `_meta` envelope of a 2026-07-28 request (only the keys the classifier needs).
#[derive(Deserialize)]
struct EnvelopeProbe {
    #[serde(rename = "_meta", default)]
    meta: Option<EnvelopeMeta>,
}

#[derive(Deserialize)]
struct EnvelopeMeta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", default)]
    version: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default)]
    capabilities: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", default)]
    log_level: Option<Value>,
}

fn modern_envelope(req: &Request) -> Option<EnvelopeMeta> {
    let params = req.params.as_deref()?;
    let probe: EnvelopeProbe = serde_json::from_str(params.get()).ok()?;
    probe.meta.filter(|m| m.version.is_some())
}

impl Front {
    /// Origin/Host, then authentication. Applied to every MCP request, whatever its verb.
    pub(super) fn admit(&self, headers: &HeaderMap) -> Result<Principal, GatewayError> {
        if let Some(allowed) = &self.settings.allowed_hosts {
            if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
                let name = host_name(host).to_ascii_lowercase();
                if !is_loopback_host(&name) && !allowed.contains(&name) {
                    return Err(GatewayError::HostForbidden);
                }
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !origin_allowed(origin, &self.settings.allowed_origins) {
                return Err(GatewayError::OriginForbidden);
            }
        }
        self.auth.authenticate(headers.get(header::AUTHORIZATION).map(HeaderValue::as_bytes))
    }

    fn session(&self, headers: &HeaderMap, principal: &Principal) -> Result<Arc<Session>, GatewayError> {
        let id = headers.get(mcp_header::SESSION_ID).ok_or(GatewayError::SessionRequired)?;
        let id = id.to_str().map_err(|_| GatewayError::SessionNotFound)?;
        self.sessions.get(id, principal).ok_or(GatewayError::SessionNotFound)
    }

    fn initialize(&self, principal: Principal, req: Request) -> Response {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct InitializeParams {
            protocol_version: String,
            #[serde(default)]
            capabilities: Value,
        }
        let params: InitializeParams = match parse_params(req.params.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                self.metrics.count_request("initialize", e.class());
                return self.reject_with_id(WireEra::Legacy, Some(req.id.raw()), &e);
            }
        };
        // Legacy negotiation: the same version if we speak it, else our latest legacy one —
        // including for 2026-07-28, which has no initialize.
        let version = ProtocolVersion::negotiate_legacy(&params.protocol_version);
        let session = self.sessions.insert(Session::new(version, principal, params.capabilities));
        tracing::debug!(session = %&session.id[..8], version = %version, "session started");
        self.metrics.count_request("initialize", "ok");
        let result = jsonrpc::raw(&self.initialize_result(version));
        let mut response = json_response(StatusCode::OK, jsonrpc::result_bytes(req.id.raw(), &result));
        if let Ok(v) = HeaderValue::from_str(&session.id) {
            response.headers_mut().insert(mcp_header::SESSION_ID, v);
        }
        response
    }

    async fn legacy(self: &Arc<Self>, headers: &HeaderMap, principal: Principal, incoming: Incoming) -> Response {
        // Rejections below still echo the request's id when there is one.
        let id = match &incoming {
            Incoming::Single(Message::Request(req)) => Some(req.id.clone()),
            _ => None,
        };
        let id = id.as_ref().map(RequestId::raw);
        let header_version = headers.get(mcp_header::PROTOCOL_VERSION).map(|v| v.to_str().unwrap_or("?"));
        if header_version == Some(ProtocolVersion::MODERN.as_str()) {
            let e = GatewayError::InvalidEnvelope(FieldError {
                path: "params._meta".into(),
                rule: format!("a 2026-07-28 request must carry {:?} in params._meta", meta::PROTOCOL_VERSION),
            });
            return self.reject_with_id(WireEra::Modern, id, &e);
        }
        let session = match self.session(headers, &principal) {
            Ok(session) => session,
            Err(e) => return self.reject_with_id(WireEra::Legacy, id, &e),
        };
        if let Some(v) = header_version {
            if ProtocolVersion::parse(v).is_none_or(ProtocolVersion::is_modern) {
                let e = GatewayError::UnsupportedProtocolVersion { requested: v.to_string() };
                return self.reject_with_id(WireEra::Legacy, id, &e);
            }
        }
        match incoming {
            Incoming::Single(Message::Request(req)) => {
                let (relay, inbound) = Relay::channel();
                let cancel = session.track(req.id.raw().get());
                let ctx = Ctx::legacy(session, principal, Some(relay));
                self.respond(ctx, req, inbound, Some(cancel)).await
            }
            Incoming::Single(Message::Notification(n)) => {
                self.on_notification(&session, &n);
                accepted()
            }
            Incoming::Single(Message::Response(r)) => {
                self.on_response(&session, r);
                accepted()
            }
            Incoming::Batch(items) => {
                if !session.version.allows_batches() {
                    return self.reject(&GatewayError::BatchNotSupported(session.version));
                }
                let ctx = Ctx::legacy(session, principal, None);
                self.batch(&ctx, items).await
            }
        }
    }

    /// Answers one request. Until the upstream sends something to relay (progress, a log
    /// line, a request of its own) the answer goes out as plain JSON; from the first relayed
    /// message on, the response becomes an SSE stream carrying those messages and then the
    /// answer. Dropping the stream (the agent went away) or a `notifications/cancelled` for
    /// this request drops the call, which cancels it upstream.
    async fn respond(
        self: &Arc<Self>,
        ctx: Ctx,
        req: Request,
        mut inbound: mpsc::Receiver<Inbound>,
        cancel: Option<(CancellationToken, InflightGuard)>,
    ) -> Response {
        let front = self.clone();
        let ctx = Arc::new(ctx);
        let call_ctx = ctx.clone();
        let (token, guard) = match cancel {
            Some((token, guard)) => (token, Some(guard)),
            None => (CancellationToken::new(), None),
        };
        let mut call: Pin<Box<dyn Future<Output = Option<Answer>> + Send>> = Box::pin(async move {
            let _guard = guard;
            tokio::select! {
                answer = front.answer(&call_ctx, req) => Some(answer),
                () = token.cancelled() => None,
            }
        });
        let first = loop {
            tokio::select! {
                biased;
                Some(message) = inbound.recv() => {
                    if let Some(frame) = self.relay_to_agent(&ctx, message) {
                        break vec![sse::message_event(None, &frame)];
                    }
                }
                answer = &mut call => {
                    // Messages queued while the answer was produced still go first.
                    let mut frames = self.drain_relayed(&ctx, &mut inbound);
                    return match answer {
                        Some(answer) if frames.is_empty() => json_response(answer.status, answer.body),
                        Some(answer) => {
                            frames.push(sse::message_event(None, &answer.body.into_vec()));
                            sse_response(StatusCode::OK, stream::iter(frames), None)
                        }
                        // Cancelled: the agent expects no answer; end the exchange empty.
                        None => sse_response(StatusCode::OK, stream::empty(), None),
                    };
                }
            }
        };
        let front = self.clone();
        let rest = stream::unfold(Some((call, inbound)), move |state| {
            let (front, ctx) = (front.clone(), ctx.clone());
            async move {
                let (mut call, mut inbound) = state?;
                loop {
                    tokio::select! {
                        biased;
                        Some(message) = inbound.recv() => {
                            if let Some(frame) = front.relay_to_agent(&ctx, message) {
                                let frames = vec![sse::message_event(None, &frame)];
                                return Some((stream::iter(frames), Some((call, inbound))));
                            }
                        }
                        answer = &mut call => {
                            // Drain what is queued, then the answer: always the last frame.
                            let mut frames = front.drain_relayed(&ctx, &mut inbound);
                            if let Some(answer) = answer {
                                frames.push(sse::message_event(None, &answer.body.into_vec()));
                            }
                            return Some((stream::iter(frames), None));
                        }
                    }
                }
            }
        })
        .flatten();
        sse_response(StatusCode::OK, stream::iter(first).chain(rest), None)
    }

    /// SSE frames for the relayed messages already queued.
    fn drain_relayed(&self, ctx: &Ctx, inbound: &mut mpsc::Receiver<Inbound>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        while let Ok(message) = inbound.try_recv() {
            if let Some(frame) = self.relay_to_agent(ctx, message) {
                frames.push(sse::message_event(None, &frame));
            }
        }
        frames
    }

    /// An agent's answer to a server request we relayed.
    pub(super) fn on_response(&self, session: &Session, response: jsonrpc::Response) {
        let id: Value = response.id.to_value();
        let key = id.as_str().map_or_else(|| id.to_string(), str::to_string);
        let parse = |raw: Option<Box<RawValue>>| raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok());
        let answer = match (parse(response.result), parse(response.error)) {
            (Some(result), None) => Ok(result),
            (_, Some(error)) => Err(error),
            (None, None) => Err(json!({ "code": -32603, "message": "empty answer" })),
        };
        if !session.answer(&key, answer) {
            tracing::debug!(id = %key, "answer to no pending server request");
        }
    }

    /// 2025-03-26 batches: each member answered, notifications and responses silently taken.
    async fn batch(&self, ctx: &Ctx, items: Vec<Result<Message, jsonrpc::Rejected>>) -> Response {
        let mut answers: Vec<Vec<u8>> = Vec::new();
        for item in items {
            match item {
                Ok(Message::Request(req)) if req.method == "initialize" => {
                    let e = GatewayError::InvalidRequest("initialize must not be part of a batch");
                    answers.push(self.error_answer(WireEra::Legacy, Some(req.id.raw()), &e).body.into_vec());
                }
                Ok(Message::Request(req)) => answers.push(self.answer(ctx, req).await.body.into_vec()),
                Ok(Message::Notification(n)) => {
                    if let Some(session) = &ctx.session {
                        self.on_notification(session, &n);
                    }
                }
                Ok(Message::Response(r)) => {
                    if let Some(session) = &ctx.session {
                        self.on_response(session, r);
                    }
                }
                Err(rejected) => {
                    let id = rejected.id.as_ref().map(|id| id.raw());
                    answers.push(self.error_answer(WireEra::Legacy, id, &rejected.error).body.into_vec());
                }
            }
        }
        if answers.is_empty() {
            return accepted();
        }
        let mut body = b"[".to_vec();
        body.extend(answers.join(&b","[..]));
        body.push(b']');
        json_response(StatusCode::OK, body)
    }

    pub(super) fn on_notification(&self, session: &Session, notification: &Notification) {
        self.metrics.count_request(&notification.method, "ok");
        match notification.method.as_str() {
            "notifications/initialized" => session.mark_initialized(),
            "notifications/cancelled" => {
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Cancelled {
                    request_id: Box<RawValue>,
                }
                // Unknown or finished requests are ignored, as the spec asks.
                if let Ok(c) = parse_params::<Cancelled>(notification.params.as_deref()) {
                    session.cancel(c.request_id.get());
                }
            }
            _ => {}
        }
    }

    /// 2026-07-28: validated in the digest's order — envelope, headers, version, method.
    async fn modern(self: &Arc<Self>, headers: &HeaderMap, principal: Principal, req: Request) -> Response {
        if let Err(e) = check_modern(headers, &req) {
            self.metrics.count_request(&req.method, e.class());
            return self.reject_with_id(WireEra::Modern, Some(req.id.raw()), &e);
        }
        if req.method == "subscriptions/listen" {
            return self.listen(principal, req).await;
        }
        // A client disconnect is the cancellation in 2026-07-28: dropping the stream does it.
        let (relay, inbound) = Relay::channel();
        let wants_logs = modern_envelope(&req).is_some_and(|m| m.log_level.is_some());
        let mut ctx = Ctx::modern(principal, Some(relay), wants_logs);
        ctx.baggage_session = headers.get("baggage").and_then(|v| v.to_str().ok()).and_then(baggage_session);
        self.respond(ctx, req, inbound, None).await
    }

    /// `subscriptions/listen`: an SSE stream that acknowledges first (with the subset it
    /// accepted), then carries the list-changed notifications and resource updates the client
    /// asked for, tagged with its subscription id. Closing the stream ends its subscriptions.
    async fn listen(self: &Arc<Self>, principal: Principal, req: Request) -> Response {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Wanted {
            #[serde(default)]
            tools_list_changed: bool,
            #[serde(default)]
            resources_list_changed: bool,
            #[serde(default)]
            prompts_list_changed: bool,
            #[serde(default)]
            resource_subscriptions: Vec<String>,
        }
        #[derive(Deserialize)]
        struct ListenParams {
            #[serde(default)]
            notifications: Wanted,
        }
        let wanted = match parse_params::<ListenParams>(req.params.as_deref()) {
            Ok(p) => p.notifications,
            Err(e) => return self.reject_with_id(WireEra::Modern, Some(req.id.raw()), &e),
        };
        self.metrics.count_request("subscriptions/listen", "ok");
        let id: Value = req.id.to_value();
        let tag = json!({ meta::SUBSCRIPTION_ID: id });
        let mut accepted = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", wanted.tools_list_changed),
            ("resourcesListChanged", wanted.resources_list_changed),
            ("promptsListChanged", wanted.prompts_list_changed),
        ] {
            if on {
                accepted.insert(key.into(), json!(true));
            }
        }
        // Resources are subscribed to the way a legacy session does it, through a session
        // object of this stream's own (never listed, so nobody else can use it).
        let listener = Arc::new(Session::new(ProtocolVersion::V2025_11_25, principal, json!({})));
        let (_, updates) = listener.open_stream();
        // From here on, a client that goes away (even before the acknowledgement) ends them.
        let release = ReleaseOnDrop { front: self.clone(), listener: listener.clone() };
        let mut resources: Vec<String> = Vec::new();
        for uri in &wanted.resource_subscriptions {
            if resources.contains(uri) {
                continue;
            }
            match self.change_subscription(&listener, uri, true, Via::default()).await {
                Ok(()) => resources.push(uri.clone()),
                Err(e) => tracing::debug!(class = e.class(), "listen: resource subscription not accepted"),
            }
        }
        if !resources.is_empty() {
            accepted.insert("resourceSubscriptions".into(), json!(resources));
        }
        let ack = jsonrpc::notification_bytes(
            "notifications/subscriptions/acknowledged",
            &json!({ "_meta": tag, "notifications": accepted }),
        );
        let ack = stream::once(async move { sse::message_event(None, &ack) });
        let updates = tokio_stream_from(updates).filter_map({
            let tag = tag.clone();
            move |message| {
                let _held_until_the_stream_ends = &release;
                let tagged = serde_json::from_slice::<Value>(&message).ok().map(|mut m| {
                    m["params"]["_meta"] = tag.clone();
                    sse::message_event(None, m.to_string().as_bytes())
                });
                std::future::ready(tagged)
            }
        });

        let mut catalog = self.catalog.subscribe();
        let last = catalog.borrow_and_update().view_hashes;
        let changes = stream::unfold((catalog, last), move |(mut catalog, mut last)| {
            let tag = tag.clone();
            async move {
                loop {
                    catalog.changed().await.ok()?;
                    let now = catalog.borrow_and_update().view_hashes;
                    let mut frames = Vec::new();
                    for (changed, on, method) in [
                        (now.tools != last.tools, wanted.tools_list_changed, "notifications/tools/list_changed"),
                        (
                            now.resources != last.resources,
                            wanted.resources_list_changed,
                            "notifications/resources/list_changed",
                        ),
                        (
                            now.prompts != last.prompts,
                            wanted.prompts_list_changed,
                            "notifications/prompts/list_changed",
                        ),
                    ] {
                        if changed && on {
                            let body = jsonrpc::notification_bytes(method, &json!({ "_meta": tag }));
                            frames.push(sse::message_event(None, &body));
                        }
                    }
                    last = now;
                    if !frames.is_empty() {
                        return Some((stream::iter(frames), (catalog, last)));
                    }
                }
            }
        })
        .flatten();
        let notifications = stream::select(changes, updates);
        sse_response(StatusCode::OK, with_keep_alive(ack.chain(notifications), self.settings.keep_alive), None)
    }

    fn reject(&self, e: &GatewayError) -> Response {
        self.reject_with_id(WireEra::Legacy, None, e)
    }

    fn reject_with_id(&self, era: WireEra, id: Option<&RawValue>, e: &GatewayError) -> Response {
        let Answer { status, body } = self.error_answer(era, id, e);
        let mut response = json_response(status, body);
        if matches!(e, GatewayError::Unauthenticated) {
            if let Ok(value) = HeaderValue::from_str(&self.challenge()) {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
            }
        }
        response
    }
}

fn check_modern(headers: &HeaderMap, req: &Request) -> Result<(), GatewayError> {
    let envelope = modern_envelope(req).ok_or(GatewayError::InvalidRequest("missing _meta envelope"))?;
    let version = envelope.version.as_ref().and_then(Value::as_str).ok_or_else(|| {
        GatewayError::InvalidEnvelope(FieldError {
            path: format!("params._meta.{}", meta::PROTOCOL_VERSION),
            rule: "expected a string".into(),
        })
    })?;
    if !envelope.capabilities.as_ref().is_some_and(Value::is_object) {
        return Err(GatewayError::InvalidEnvelope(FieldError {
            path: format!("params._meta.{}", meta::CLIENT_CAPABILITIES),
            rule: "required: an object".into(),
        }));
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header(mcp_header::PROTOCOL_VERSION) != Some(version) {
        return Err(GatewayError::HeaderMismatch("MCP-Protocol-Version"));
    }
    if !ProtocolVersion::parse(version).is_some_and(ProtocolVersion::is_modern) {
        return Err(GatewayError::UnsupportedProtocolVersion { requested: version.to_string() });
    }
    if header(mcp_header::METHOD) != Some(req.method.as_str()) {
        return Err(GatewayError::HeaderMismatch("Mcp-Method"));
    }
    let name_key = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(key) = name_key {
        let body_value: Option<String> = req
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| p.get(key).and_then(Value::as_str).map(str::to_string));
        let header_value = header(mcp_header::NAME).map(decode_header_value);
        if let Some(body_value) = body_value {
            if header_value.as_deref() != Some(body_value.as_str()) {
                return Err(GatewayError::HeaderMismatch("Mcp-Name"));
            }
        }
    }
    Ok(())
}

/// W3C baggage `session.id` (`key=value[;properties],…`, values percent-encoded).
fn baggage_session(baggage: &str) -> Option<String> {
    baggage
        .split(',')
        .find_map(|member| {
            let (key, value) = member.split(';').next()?.split_once('=')?;
            (key.trim() == "session.id")
                .then(|| percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy().into_owned())
        })
        .filter(|id| !id.is_empty() && id.len() <= 256)
}

/// `=?base64?…?=` carries values that are not plain visible ASCII.
fn decode_header_value(value: &str) -> String {
    value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| value.to_string())
}

/// `host[:port]` → `host` (IPv6 literals keep their brackets).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Loopback origins always; anything else only if listed in `allowed_origins`.
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    if allowed.iter().any(|a| *a == origin) {
        return true;
    }
    match origin.split_once("://") {
        Some(("http" | "https", rest)) => is_loopback_host(host_name(rest)),
        _ => false,
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")))
}

/// Whether `Accept` admits `mime` (`*/*` and `type/*` count). A missing header admits all.
fn accepts(headers: &HeaderMap, mime: &str) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let family = mime.split('/').next().unwrap_or("");
    accept.split(',').map(|part| part.split(';').next().unwrap_or("").trim()).any(|m| {
        m == "*/*"
            || m.eq_ignore_ascii_case(mime)
            || m.strip_suffix("/*").is_some_and(|f| f.eq_ignore_ascii_case(family))
    })
}

fn json_response(status: StatusCode, body: impl Into<Payload>) -> Response {
    let builder = Response::builder().status(status).header(header::CONTENT_TYPE, "application/json");
    let response = match body.into() {
        Payload::One(bytes) => builder.body(Body::from(bytes)),
        // Shared chunks go out as they are; the length header keeps it one fixed-size body.
        chunks @ Payload::Chunks(_) => {
            let length = chunks.len();
            let Payload::Chunks(parts) = chunks else { unreachable!("matched above") };
            builder
                .header(header::CONTENT_LENGTH, length)
                .body(Body::from_stream(stream::iter(parts.into_iter().map(Ok::<Bytes, Infallible>))))
        }
    };
    response.expect("static response parts")
}

fn accepted() -> Response {
    Response::builder().status(StatusCode::ACCEPTED).body(Body::empty()).expect("static response parts")
}

fn sse_response(
    status: StatusCode,
    frames: impl Stream<Item = Bytes> + Send + 'static,
    session: Option<&str>,
) -> Response {
    let mut builder = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no");
    if let Some(session) = session {
        builder = builder.header(mcp_header::SESSION_ID, session);
    }
    builder.body(Body::from_stream(frames.map(Ok::<Bytes, Infallible>))).expect("static response parts")
}

/// Interleaves SSE comment frames so idle proxies keep the connection open.
fn with_keep_alive(
    frames: impl Stream<Item = Bytes> + Send + 'static,
    every: std::time::Duration,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let ticks = stream::unfold(
        tokio::time::interval_at(tokio::time::Instant::now() + every, every),
        |mut interval| async move {
            interval.tick().await;
            Some((sse::keep_alive(), interval))
        },
    );
    // Ends when the message stream ends, not when the (infinite) ticker would.
    let frames = frames.map(Some).chain(stream::once(async { None }));
    stream::select(frames, ticks.map(Some))
        .take_while(|f| std::future::ready(f.is_some()))
        .filter_map(std::future::ready)
}

/// Ends a listen stream's resource subscriptions when the stream is dropped (the client went
/// away: in 2026-07-28 that is the cancellation).
struct ReleaseOnDrop {
    front: Arc<Front>,
    listener: Arc<Session>,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let (front, id) = (self.front.clone(), self.listener.id.clone());
        // No runtime left (shutdown): the upstream sessions end anyway.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { super::release_subscriptions(&front, &id).await });
        }
    }
}

fn tokio_stream_from(mut rx: tokio::sync::mpsc::Receiver<Bytes>) -> impl Stream<Item = Bytes> + Send + 'static {
    stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_pass_and_others_need_listing() {
        let allowed = vec!["https://app.example.com".to_string()];
        for ok in ["http://localhost:3000", "http://127.0.0.1", "https://[::1]:8443", "https://app.example.com/"] {
            assert!(origin_allowed(ok, &allowed), "{ok}");
        }
        for bad in ["http://evil.example.com", "null", "http://localhost.evil.com", "file://localhost"] {
            assert!(!origin_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("localhost:8090"), "localhost");
        assert_eq!(host_name("[::1]:8090"), "[::1]");
        assert_eq!(host_name("example.com"), "example.com");
    }

    #[test]
    fn accept_header_matching() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        assert!(accepts(&h, "application/json") && accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("text/*;q=0.5"));
        assert!(accepts(&h, "text/event-stream"));
    }

    #[test]
    fn baggage_session_ids_are_found_and_decoded() {
        assert_eq!(baggage_session("userId=alice,session.id=conv%2042;p=1").as_deref(), Some("conv 42"));
        assert_eq!(baggage_session("session.id = abc ").as_deref(), Some("abc"));
        assert_eq!(baggage_session("userId=alice"), None);
        assert_eq!(baggage_session("session.id="), None);
    }

    #[test]
    fn base64_header_values_decode() {
        assert_eq!(decode_header_value("=?base64?aMOpbGxv?="), "héllo");
        assert_eq!(decode_header_value("plain"), "plain");
    }
}
