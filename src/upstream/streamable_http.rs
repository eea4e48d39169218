//! Streamable HTTP client for one upstream, both eras.
//!
//! Connecting probes once with `server/discover` (2026-07-28) and falls back to the legacy
//! `initialize` lifecycle; a server answering `initialize` with method-not-found is served bare.
//! The resulting [`Link`] (era, session id, credential) is shared by all requests; when the
//! upstream forgets the session (404, or a 400 naming the session, as the reference servers
//! send) or rejects the credential (401), the link is rebuilt once — by one task, however many
//! requests noticed — and the request is retried once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

use base64::Engine;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use reqwest::Url;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::auth::TokenSource;
use super::mux::Poster;
use super::relay::{self, Relay};
use super::signals::Signals;
use super::sse::SseSetup;
use super::{
    Era, Message, UpstreamError, discovered_capabilities, initialize_params, initialized, stamp_envelope,
    subscription_request,
};
use crate::protocol::{ProtocolVersion, header as mcp_header};

/// Error bodies are only sniffed (for "session"), never relayed: a small cap is enough.
const ERROR_BODY_CAP: usize = 8 * 1024;

/// The negotiated connection state shared by all requests to one upstream.
#[derive(Debug)]
struct Link {
    era: Era,
    session: Option<HeaderValue>,
    auth: Option<HeaderValue>,
    /// Server capabilities from `initialize` / `server/discover` (None for bare servers).
    capabilities: Option<Value>,
    generation: u64,
}

pub struct StreamableHttp {
    namespace: Arc<str>,
    url: Url,
    http: reqwest::Client,
    token: TokenSource,
    static_headers: HeaderMap,
    timeout: Duration,
    max_response_bytes: usize,
    next_id: AtomicU64,
    generation: AtomicU64,
    link: RwLock<Option<Arc<Link>>>,
    relink: tokio::sync::Mutex<()>,
    /// Stops the current link's notification stream when the link is replaced or dropped.
    watch: std::sync::Mutex<Option<DropGuard>>,
    signals: Arc<Signals>,
    /// Resources agents subscribed to: a 2026-07-28 server's notification stream is (re)opened
    /// with them as `resourceSubscriptions`; a legacy server is asked again for each on a new
    /// session, since subscriptions end with the session that made them.
    subscribed: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl StreamableHttp {
    pub fn new(setup: SseSetup) -> Self {
        Self {
            namespace: setup.namespace,
            url: setup.url,
            http: setup.http,
            token: setup.token,
            static_headers: setup.static_headers,
            timeout: setup.timeout,
            max_response_bytes: setup.max_message_bytes,
            next_id: AtomicU64::new(1),
            generation: AtomicU64::new(0),
            link: RwLock::new(None),
            relink: tokio::sync::Mutex::new(()),
            watch: std::sync::Mutex::new(None),
            signals: setup.signals,
            subscribed: std::sync::Mutex::default(),
        }
    }

    pub fn era(&self) -> Option<Era> {
        self.current().map(|l| l.era)
    }

    /// Connects if not connected; returns the server's capabilities (None: bare server).
    pub async fn ensure_connected(&self) -> Result<Option<Value>, UpstreamError> {
        let link = match self.current() {
            Some(link) => link,
            None => self.relink(None).await?,
        };
        Ok(link.capabilities.clone())
    }

    /// Forgets the link so the next request reconnects (and re-reads a token file).
    pub fn reset(&self) {
        *self.link.write().expect("link lock poisoned") = None;
        *self.watch.lock().expect("watch lock poisoned") = None;
    }

    pub async fn request(
        &self,
        method: &str,
        params: Map<String, Value>,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let link = match self.current() {
            Some(link) => link,
            None => self.relink(None).await?,
        };
        match self.send(&link, method, params.clone(), relay).await {
            // The upstream forgot our session or rejected our credential: rebuild the link
            // once (re-reading the token file) and retry once.
            Err(UpstreamError::SessionExpired | UpstreamError::Unauthorized) => {
                tracing::info!(namespace = %self.namespace, "upstream session or credential rejected; reconnecting");
                let link = self.relink(Some(link.generation)).await?;
                self.send(&link, method, params, relay).await.map(|(result, _)| result)
            }
            other => other.map(|(result, _)| result),
        }
    }

    fn current(&self) -> Option<Arc<Link>> {
        self.link.read().expect("link lock poisoned").clone()
    }

    /// Rebuilds the link unless another task already did since `failed` was current.
    async fn relink(&self, failed: Option<u64>) -> Result<Arc<Link>, UpstreamError> {
        let _one_at_a_time = self.relink.lock().await;
        if let Some(current) = self.current() {
            if failed != Some(current.generation) {
                return Ok(current);
            }
        }
        let link = Arc::new(self.connect().await?);
        *self.link.write().expect("link lock poisoned") = Some(link.clone());
        self.start_watch(&link);
        if link.era != Era::Modern {
            let resources: Vec<String> =
                self.subscribed.lock().expect("subscribed lock poisoned").iter().cloned().collect();
            for uri in resources {
                let (method, params) = subscription_request(&uri, true);
                if let Err(e) = self.send(&link, method, params, None).await {
                    tracing::warn!(namespace = %self.namespace, error = %e, "resubscribing on a new upstream session failed");
                }
            }
        }
        Ok(link)
    }

    /// (Re)opens the link's notification stream, ending the previous one.
    fn start_watch(&self, link: &Link) {
        let stop = CancellationToken::new();
        let resources: Vec<String> =
            self.subscribed.lock().expect("subscribed lock poisoned").iter().cloned().collect();
        tokio::spawn(watch(self.poster(link), link.era, self.signals.clone(), resources, stop.clone()));
        *self.watch.lock().expect("watch lock poisoned") = Some(stop.drop_guard());
    }

    /// Subscribes to (or unsubscribes from) a resource: `resources/(un)subscribe` for a legacy
    /// server; for a 2026-07-28 one, which has no such method, the notification stream is
    /// reopened with the resource added to (or removed from) what it listens to.
    pub async fn subscribe(&self, uri: &str, on: bool, relay: Option<&Relay>) -> Result<(), UpstreamError> {
        let link = match self.current() {
            Some(link) => link,
            None => self.relink(None).await?,
        };
        // Recorded first, so a new upstream session made meanwhile renews it too.
        let changed = {
            let mut subscribed = self.subscribed.lock().expect("subscribed lock poisoned");
            if on { subscribed.insert(uri.to_string()) } else { subscribed.remove(uri) }
        };
        if link.era == Era::Modern {
            if changed {
                // Under the relink lock, on the current link: never replacing a newer stream.
                let _one_at_a_time = self.relink.lock().await;
                if let Some(current) = self.current() {
                    self.start_watch(&current);
                }
            }
            return Ok(());
        }
        let (method, params) = subscription_request(uri, on);
        let asked = self.request(method, params, relay).await;
        if asked.is_err() && on && changed {
            self.subscribed.lock().expect("subscribed lock poisoned").remove(uri);
        }
        asked.map(|_| ())
    }

    /// Ends the upstream session (DELETE, best effort) and forgets the link.
    pub async fn end_session(&self) {
        let link = self.current();
        self.reset();
        if let Some(link) = link.filter(|l| l.session.is_some()) {
            let poster = self.poster(&link);
            let delete = poster.http.delete(poster.url.clone()).headers(poster.headers.clone()).send();
            let _ = tokio::time::timeout(Duration::from_secs(5), delete).await;
        }
    }

    /// Resolves when the server announces (on its notification stream) that a list changed.
    pub async fn list_changed(&self) {
        self.signals.list_changed().await;
    }

    async fn connect(&self) -> Result<Link, UpstreamError> {
        let auth = self.token.current().await?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;

        // 1. The 2026-07-28 probe. Anything but a discover result naming our version means the
        //    server is legacy — except not reaching it at all, which is just a failure.
        let probe = Link { era: Era::Modern, session: None, auth: auth.clone(), capabilities: None, generation };
        match self.send(&probe, "server/discover", Map::new(), None).await {
            Ok((result, _)) => {
                if let Some(capabilities) = discovered_capabilities(&result) {
                    tracing::info!(namespace = %self.namespace, "upstream speaks 2026-07-28");
                    return Ok(Link { capabilities: Some(capabilities), ..probe });
                }
            }
            Err(e) if e.is_unreachable() || matches!(e, UpstreamError::Timeout(_)) => {
                return Err(e);
            }
            Err(_) => {}
        }

        // 2. The legacy lifecycle.
        // `initialize` itself goes without version header or session: shaped like a bare request.
        let init = Link { era: Era::Bare, session: None, auth: auth.clone(), capabilities: None, generation };
        let params = initialize_params();
        match self.send(&init, "initialize", params, None).await {
            Ok((result, session)) => {
                let (version, capabilities) = initialized(&result)?;
                let capabilities = Some(capabilities);
                let link = Link { era: Era::Legacy(version), session, auth, capabilities, generation };
                self.notify(&link, "notifications/initialized").await?;
                tracing::info!(namespace = %self.namespace, version = %version, session = link.session.is_some(), "upstream initialized");
                Ok(link)
            }
            Err(UpstreamError::Rpc { code: -32601, .. }) => {
                tracing::info!(namespace = %self.namespace, "upstream has no initialize; serving it bare");
                Ok(Link { era: Era::Bare, session: None, auth, capabilities: None, generation })
            }
            Err(e) => Err(e),
        }
    }

    /// One request/response exchange; returns the raw result and any session id the upstream set.
    async fn send(
        &self,
        link: &Link,
        method: &str,
        mut params: Map<String, Value>,
        relay: Option<&Relay>,
    ) -> Result<(Box<RawValue>, Option<HeaderValue>), UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        stamp_envelope(link.era, &mut params);
        let name = routing_name(method, &params);
        let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let mut request = self.post(link, body);
        if link.era == Era::Modern {
            request = request.header(mcp_header::METHOD, method);
            if let Some(name) = name {
                request = request.header(mcp_header::NAME, name);
            }
        }
        // If this future is dropped before the answer (the agent cancelled or went away, or
        // the deadline passed), a legacy upstream is told with notifications/cancelled; for
        // 2026-07-28 upstreams closing the stream is the cancellation.
        let mut cancel = CancelOnDrop { transport: self, link, id, armed: matches!(link.era, Era::Legacy(_)) };
        let exchange = async {
            let response = request.send().await.map_err(|e| self.transport_error(e))?;
            let session = response.headers().get(mcp_header::SESSION_ID).cloned();
            let result = self.read_response(link, response, id, relay).await?;
            Ok((result, session))
        };
        let outcome = tokio::time::timeout(self.timeout, exchange).await;
        cancel.armed &= outcome.is_err();
        outcome.map_err(|_| UpstreamError::Timeout(self.timeout))?
    }

    /// What it takes to POST to this upstream later, detached from `self` (for spawned tasks).
    fn poster(&self, link: &Link) -> Poster {
        Poster { http: self.http.clone(), url: self.url.clone(), headers: self.headers(link) }
    }

    async fn notify(&self, link: &Link, method: &str) -> Result<(), UpstreamError> {
        let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "method": method }))
            .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
        let send = self.post(link, body).send();
        let response = tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| UpstreamError::Timeout(self.timeout))?
            .map_err(|e| self.transport_error(e))?;
        match response.status() {
            s if s.is_success() => Ok(()),
            s => Err(UpstreamError::Status(s)),
        }
    }

    /// A POST with every per-hop header derived here — never copied from the agent's request.
    fn post(&self, link: &Link, body: Vec<u8>) -> reqwest::RequestBuilder {
        self.http.post(self.url.clone()).headers(self.headers(link)).body(body)
    }

    fn headers(&self, link: &Link) -> HeaderMap {
        let mut headers = self.static_headers.clone();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        let version = match link.era {
            Era::Modern => Some(ProtocolVersion::MODERN),
            // The header arrived with 2025-06-18; the session's negotiated version, never the agent's.
            Era::Legacy(v) if v >= ProtocolVersion::V2025_06_18 => Some(v),
            Era::Legacy(_) | Era::Bare => None,
        };
        if let Some(v) = version {
            headers.insert(HeaderName::from_static(mcp_header::PROTOCOL_VERSION), HeaderValue::from_static(v.as_str()));
        }
        if let Some(session) = &link.session {
            headers.insert(HeaderName::from_static(mcp_header::SESSION_ID), session.clone());
        }
        if let Some(auth) = &link.auth {
            super::auth::insert_credential(&mut headers, auth);
        }
        headers
    }

    async fn read_response(
        &self,
        link: &Link,
        response: reqwest::Response,
        id: u64,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let status = response.status();
        if status == StatusCode::ACCEPTED {
            return Err(UpstreamError::Protocol("202 Accepted in answer to a request".into()));
        }
        if status.is_success() {
            let is_sse = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("text/event-stream"));
            return if is_sse {
                self.read_sse(link, response, id, relay).await
            } else {
                self.read_json(response, id).await
            };
        }
        let has_session = link.session.is_some();
        match status {
            StatusCode::UNAUTHORIZED => Err(UpstreamError::Unauthorized),
            StatusCode::NOT_FOUND if has_session => Err(UpstreamError::SessionExpired),
            _ => {
                let body = read_capped(response, ERROR_BODY_CAP).await.unwrap_or_default();
                // The reference servers answer an unknown session with 400 "No valid session ID".
                if has_session && status == StatusCode::BAD_REQUEST && contains_ci(&body, b"session") {
                    return Err(UpstreamError::SessionExpired);
                }
                // A JSON-RPC error in a 4xx body (2026-07-28 sends -32601 with 404) says more
                // than the status.
                match parse_frame(&body, id) {
                    Frame::Response(Err(e @ UpstreamError::Rpc { .. })) => Err(e),
                    _ => Err(UpstreamError::Status(status)),
                }
            }
        }
    }

    async fn read_json(&self, response: reqwest::Response, id: u64) -> Result<Box<RawValue>, UpstreamError> {
        let body = read_capped(response, self.max_response_bytes).await?;
        match parse_frame(&body, id) {
            Frame::Response(result) => result,
            _ => Err(UpstreamError::Protocol("JSON body is not the response".into())),
        }
    }

    /// Reads SSE events until the response to `id` arrives. Notifications and server requests
    /// on the way go to `relay`; without one, server requests are refused so the upstream does
    /// not wait for an answer that will never come.
    async fn read_sse(
        &self,
        link: &Link,
        response: reqwest::Response,
        id: u64,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let cap = self.max_response_bytes;
        let mut seen = 0usize;
        let bytes = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            seen += chunk.len();
            if seen > cap {
                return Err(std::io::Error::other(UpstreamError::TooLarge(cap)));
            }
            Ok::<Bytes, std::io::Error>(chunk)
        });
        let mut events = sse_stream::SseStream::from_bytes_stream(bytes);
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| match e {
                sse_stream::Error::Body(inner) if inner.to_string().contains("exceeds") => UpstreamError::TooLarge(cap),
                other => UpstreamError::Protocol(format!("SSE: {other}")),
            })?;
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            if event.event.as_deref().is_some_and(|e| e != "message") {
                continue;
            }
            match parse_frame(data.as_bytes(), id) {
                Frame::Response(result) => return result,
                // Not about this request: for the supervisor and the resource subscribers.
                Frame::Notification { method, params } if self.signals.take(&method, &params) => {}
                Frame::Notification { method, params } => {
                    let relayed = relay.is_some_and(|r| r.notify(method.clone(), params));
                    if !relayed {
                        tracing::debug!(namespace = %self.namespace, method, "upstream notification not relayed");
                    }
                }
                Frame::Request { id: request_id, method, params } => {
                    let answer = relay.and_then(|r| r.request(method.clone(), params));
                    self.answer_server_request(link, request_id, &method, answer);
                }
                Frame::Other => {}
            }
        }
        Err(UpstreamError::Protocol("event stream ended before the response".into()))
    }

    /// Answers an upstream's own request (sampling, elicitation, roots) once the agent side
    /// answers, within this upstream's timeout; refuses it at once if nobody can.
    fn answer_server_request(
        &self,
        link: &Link,
        id: Value,
        method: &str,
        answer: Option<oneshot::Receiver<relay::Answer>>,
    ) {
        let poster = self.poster(link);
        let timeout = self.timeout;
        let refusal = relay::unsupported(method);
        let Some(answer) = answer else {
            poster.post_detached(json!({ "jsonrpc": "2.0", "id": id, "error": refusal }));
            return;
        };
        tokio::spawn(async move {
            let message = match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(Ok(result))) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Ok(Ok(Err(error))) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
                _ => {
                    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32001, "message": "the client did not answer in time" } })
                }
            };
            poster.post_detached(message);
        });
    }

    fn transport_error(&self, e: reqwest::Error) -> UpstreamError {
        if e.is_timeout() { UpstreamError::Timeout(self.timeout) } else { UpstreamError::Connect(e) }
    }
}

/// One message read from an upstream while waiting for the response to `id`.
enum Frame {
    Response(Result<Box<RawValue>, UpstreamError>),
    Notification {
        method: String,
        params: Value,
    },
    /// A request of the upstream's own, to be answered with the same id.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A response to some other id: not ours to handle.
    Other,
}

fn parse_frame(body: &[u8], id: u64) -> Frame {
    let message: Message = match serde_json::from_slice(body) {
        Ok(m) => m,
        Err(e) => {
            return Frame::Response(Err(UpstreamError::Protocol(format!("invalid JSON-RPC message: {e}"))));
        }
    };
    let params = || message.params.clone().unwrap_or_else(|| json!({}));
    match (&message.method, &message.id) {
        (Some(method), None) => {
            return Frame::Notification { method: method.clone(), params: params() };
        }
        (Some(method), Some(request_id)) => {
            return Frame::Request { id: request_id.clone(), method: method.clone(), params: params() };
        }
        (None, Some(v)) if v.as_u64() != Some(id) && !v.is_null() => return Frame::Other,
        (None, _) => {}
    }
    Frame::Response(match (message.result, message.error) {
        (Some(result), None) => Ok(result),
        (_, Some(error)) => Err(UpstreamError::Rpc { code: error.code, message: error.message, data: error.data }),
        (None, None) => Err(UpstreamError::Protocol("response has neither result nor error".into())),
    })
}

/// Tells a legacy upstream that a request was abandoned, unless disarmed first.
struct CancelOnDrop<'a> {
    transport: &'a StreamableHttp,
    link: &'a Link,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.transport.poster(self.link).post_detached(json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": { "requestId": self.id, "reason": "the agent cancelled or the deadline passed" },
            }));
        }
    }
}

/// `Mcp-Name` for 2026-07-28: the upstream-local tool/prompt name or resource URI, base64-wrapped
/// when it is not plain visible ASCII.
fn routing_name(method: &str, params: &Map<String, Value>) -> Option<HeaderValue> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    let value = params.get(key)?.as_str()?;
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x21..=0x7e).contains(&b))
        && !(value.starts_with("=?") && value.ends_with("?="));
    if plain {
        HeaderValue::from_str(value).ok()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
        HeaderValue::from_str(&format!("=?base64?{encoded}?=")).ok()
    }
}

async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Bytes, UpstreamError> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(UpstreamError::TooLarge(cap));
    }
    let mut body = BytesMut::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(UpstreamError::Connect)?;
        if body.len() + chunk.len() > cap {
            return Err(UpstreamError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

fn contains_ci(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_name_wraps_non_ascii_in_base64() {
        let params = json!({"name": "echo"});
        assert_eq!(routing_name("tools/call", params.as_object().unwrap()).unwrap(), "echo");
        let params = json!({"name": "héllo wörld"});
        let v = routing_name("tools/call", params.as_object().unwrap()).unwrap();
        assert!(v.to_str().unwrap().starts_with("=?base64?"));
        assert!(routing_name("tools/list", &Map::new()).is_none());
    }

    #[test]
    fn frames_are_told_apart() {
        let frame = |body: &str| parse_frame(body.as_bytes(), 1);
        assert!(matches!(frame(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#),
            Frame::Notification { ref method, .. } if method == "notifications/progress"));
        assert!(matches!(frame(r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage"}"#),
            Frame::Request { ref id, .. } if id == "s1"));
        assert!(matches!(frame(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#), Frame::Other));
        match frame(r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}"#) {
            Frame::Response(Ok(raw)) => assert_eq!(raw.get(), r#"{"a":1}"#),
            _ => panic!("our response"),
        }
        assert!(matches!(
            frame(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#),
            Frame::Response(Err(UpstreamError::Rpc { code: -32601, .. }))
        ));
        assert!(matches!(frame("{nope"), Frame::Response(Err(UpstreamError::Protocol(_)))));
    }
}

/// Keeps a notification stream open to the upstream — the GET stream of a legacy session, or
/// `subscriptions/listen` for 2026-07-28, with the subscribed `resources` — and hands what it
/// carries to `signals`: list changes wake the supervisor, so the catalog follows the server at
/// once instead of at the next scheduled probe; resource updates go to the subscribers. Best effort:
/// a server without such a stream (405) is simply probed on schedule.
async fn watch(poster: Poster, era: Era, signals: Arc<Signals>, resources: Vec<String>, stop: CancellationToken) {
    // Failures in a row before giving up (the listing is still probed on schedule); a stream
    // that stayed up a while starts the count again, so a long-lived upstream keeps its stream.
    const MAX_REOPENS: u32 = 8;
    const HEALTHY: Duration = Duration::from_secs(30);
    let mut attempt = 0;
    while attempt < MAX_REOPENS {
        attempt += 1;
        let opened = tokio::select! {
            opened = open_watch(&poster, era, &resources) => opened,
            () = stop.cancelled() => return,
        };
        let response = match opened {
            Ok(Some(response)) => response,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "upstream notification stream unavailable");
                tokio::select! {
                    () = tokio::time::sleep(super::backoff(attempt + 1)) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        let opened_at = tokio::time::Instant::now();
        let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = stop.cancelled() => return,
            };
            let Some(Ok(event)) = event else { break };
            let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
                continue;
            };
            let Ok(message) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
            match (method, message.get("id")) {
                (method, None) if signals.take(method, message.get("params").unwrap_or(&Value::Null)) => {}
                // A request on this stream is unrelated to any agent call: nobody can answer.
                (method, Some(id)) if !method.is_empty() => {
                    poster.post_detached(json!({ "jsonrpc": "2.0", "id": id, "error": relay::unsupported(method) }));
                }
                _ => {}
            }
        }
        if opened_at.elapsed() >= HEALTHY {
            attempt = 0;
        }
        tokio::select! {
            () = tokio::time::sleep(super::backoff(attempt + 1)) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Opens the stream: `Ok(None)` when the server offers none.
async fn open_watch(
    poster: &Poster,
    era: Era,
    resources: &[String],
) -> Result<Option<reqwest::Response>, UpstreamError> {
    let mut headers = poster.headers.clone();
    let request = match era {
        Era::Legacy(_) => {
            headers.remove(header::CONTENT_TYPE);
            headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
            poster.http.get(poster.url.clone()).headers(headers)
        }
        Era::Modern => {
            let mut params = Map::new();
            let mut wanted =
                json!({ "toolsListChanged": true, "resourcesListChanged": true, "promptsListChanged": true });
            if !resources.is_empty() {
                wanted["resourceSubscriptions"] = json!(resources);
            }
            params.insert("notifications".into(), wanted);
            stamp_envelope(Era::Modern, &mut params);
            let body = json!({ "jsonrpc": "2.0", "id": "gatehouse-watch", "method": "subscriptions/listen", "params": params });
            headers
                .insert(HeaderName::from_static(mcp_header::METHOD), HeaderValue::from_static("subscriptions/listen"));
            poster.http.post(poster.url.clone()).headers(headers).body(body.to_string())
        }
        Era::Bare => return Ok(None),
    };
    let response = request.send().await.map_err(UpstreamError::Connect)?;
    let is_sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    match response.status() {
        s if s.is_success() && is_sse => Ok(Some(response)),
        StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_FOUND => Ok(None),
        s if s.is_success() => Ok(None),
        s => Err(UpstreamError::Status(s)),
    }
}
