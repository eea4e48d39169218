//! Legacy HTTP+SSE upstreams (the 2024-11-05 transport): a long-lived GET stream whose first
//! `endpoint` event names where to POST; every answer comes back as a `message` event on the
//! stream. The stream is one multiplexed channel, handled by [`Mux`] like stdio.
//!
//! The endpoint must stay on the stream's own origin: a server cannot send our credentials
//! elsewhere by naming another host.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use reqwest::Url;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::auth::TokenSource;
use super::mux::{Mux, Outbound, Poster};
use super::relay::Relay;
use super::signals::Signals;
use super::{Era, UpstreamError, initialize_params, initialized};

struct Conn {
    mux: Arc<Mux>,
    era: Era,
    capabilities: Option<Value>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
        self.mux.close();
    }
}

pub struct SseTransport {
    namespace: Arc<str>,
    url: Url,
    http: reqwest::Client,
    token: TokenSource,
    static_headers: HeaderMap,
    timeout: Duration,
    max_message_bytes: usize,
    next_id: AtomicU64,
    conn: RwLock<Option<Arc<Conn>>>,
    connecting: tokio::sync::Mutex<()>,
    signals: Arc<Signals>,
}

/// What an HTTP transport (Streamable HTTP or legacy SSE) is built from.
#[derive(Clone)]
pub struct SseSetup {
    pub namespace: Arc<str>,
    pub url: Url,
    pub http: reqwest::Client,
    pub token: TokenSource,
    pub static_headers: HeaderMap,
    pub timeout: Duration,
    pub max_message_bytes: usize,
    pub signals: Arc<Signals>,
}

impl SseTransport {
    pub fn new(setup: SseSetup) -> Self {
        Self {
            namespace: setup.namespace,
            url: setup.url,
            http: setup.http,
            token: setup.token,
            static_headers: setup.static_headers,
            timeout: setup.timeout,
            max_message_bytes: setup.max_message_bytes,
            next_id: AtomicU64::new(1),
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            signals: setup.signals,
        }
    }

    pub fn era(&self) -> Option<Era> {
        self.current().map(|c| c.era)
    }

    pub async fn ensure_connected(&self) -> Result<Option<Value>, UpstreamError> {
        Ok(self.connection().await?.capabilities.clone())
    }

    pub fn reset(&self) {
        *self.conn.write().expect("conn lock poisoned") = None;
    }

    pub async fn closed(&self) {
        match self.current() {
            Some(conn) => conn.mux.closed.cancelled().await,
            None => std::future::pending().await,
        }
    }

    pub async fn list_changed(&self) {
        self.signals.list_changed().await;
    }

    pub async fn request(
        &self,
        method: &str,
        params: Map<String, Value>,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let conn = self.connection().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        conn.mux.call(conn.era, id, method, params, relay, self.timeout).await
    }

    fn current(&self) -> Option<Arc<Conn>> {
        self.conn.read().expect("conn lock poisoned").clone().filter(|c| !c.mux.closed.is_cancelled())
    }

    async fn connection(&self) -> Result<Arc<Conn>, UpstreamError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let conn = Arc::new(self.connect().await?);
        *self.conn.write().expect("conn lock poisoned") = Some(conn.clone());
        Ok(conn)
    }

    fn headers(&self, auth: Option<&HeaderValue>) -> HeaderMap {
        let mut headers = self.static_headers.clone();
        if let Some(auth) = auth {
            super::auth::insert_credential(&mut headers, auth);
        }
        headers
    }

    async fn connect(&self) -> Result<Conn, UpstreamError> {
        let auth = self.token.current().await?;
        let mut headers = self.headers(auth.as_ref());
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        let open = self.http.get(self.url.clone()).headers(headers).send();
        let response = tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| UpstreamError::Timeout(self.timeout))?
            .map_err(UpstreamError::Connect)?;
        match response.status() {
            StatusCode::UNAUTHORIZED => return Err(UpstreamError::Unauthorized),
            s if !s.is_success() => return Err(UpstreamError::Status(s)),
            _ => {}
        }
        let is_sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !is_sse {
            return Err(UpstreamError::Protocol("the SSE endpoint did not answer with text/event-stream".into()));
        }

        let (endpoint_tx, endpoint_rx) = oneshot::channel();
        let (mux_tx, mux_rx) = oneshot::channel();
        let reader = tokio::spawn(read_stream(response, self.url.clone(), self.max_message_bytes, endpoint_tx, mux_rx));
        let endpoint = match tokio::time::timeout(self.timeout, endpoint_rx).await {
            Ok(Ok(Ok(endpoint))) => endpoint,
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => {
                return Err(UpstreamError::Protocol("the SSE stream ended before its endpoint event".into()));
            }
            Err(_) => return Err(UpstreamError::Timeout(self.timeout)),
        };
        let mut post_headers = self.headers(auth.as_ref());
        post_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let poster = Poster { http: self.http.clone(), url: endpoint, headers: post_headers };
        let mux = Arc::new(Mux::new(
            self.namespace.clone(),
            Outbound::Post(poster),
            CancellationToken::new(),
            self.signals.clone(),
        ));
        let _ = mux_tx.send(mux.clone());
        let mut conn = Conn { mux, era: Era::Bare, capabilities: None, reader: reader.abort_handle() };

        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        match conn.mux.call(Era::Bare, id, "initialize", initialize_params(), None, self.timeout).await {
            Ok(result) => {
                let (version, capabilities) = initialized(&result)?;
                conn.era = Era::Legacy(version);
                conn.capabilities = Some(capabilities);
                conn.mux.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await?;
                tracing::info!(namespace = %self.namespace, version = %version, "legacy HTTP+SSE upstream initialized");
                Ok(conn)
            }
            Err(UpstreamError::Rpc { code: -32601, .. }) => Ok(conn),
            Err(e) => Err(e),
        }
    }
}

/// Reads the GET stream: the `endpoint` event first, then every `message` into the mux.
async fn read_stream(
    response: reqwest::Response,
    base: Url,
    max: usize,
    endpoint: oneshot::Sender<Result<Url, UpstreamError>>,
    mux: oneshot::Receiver<Arc<Mux>>,
) {
    // Bound what a single event may buffer: bytes since the last newline.
    let mut since_newline = 0usize;
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        match chunk.iter().rposition(|b| *b == b'\n') {
            Some(at) => since_newline = chunk.len() - at - 1,
            None => since_newline += chunk.len(),
        }
        if since_newline > max {
            return Err(std::io::Error::other("SSE event exceeds the size limit"));
        }
        Ok::<Bytes, std::io::Error>(chunk)
    });
    let mut events = sse_stream::SseStream::from_bytes_stream(bytes);
    // Nothing before the endpoint event means anything.
    loop {
        match events.next().await {
            Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => {
                let data = event.data.unwrap_or_default();
                let _ = endpoint.send(same_origin(&base, data.trim()));
                break;
            }
            Some(Ok(_)) => {}
            // Dropping `endpoint` tells the connecting side the stream ended.
            _ => return,
        }
    }
    let Ok(mux) = mux.await else { return };
    while let Some(event) = events.next().await {
        let Ok(event) = event else { break };
        if event.event.as_deref().is_none_or(|e| e == "message") {
            if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
                mux.deliver(data.as_bytes());
            }
        }
    }
    tracing::warn!("legacy SSE stream from the upstream ended");
    mux.close();
}

/// Resolves the `endpoint` event against the stream URL and keeps it on the same origin.
fn same_origin(base: &Url, endpoint: &str) -> Result<Url, UpstreamError> {
    let url = base.join(endpoint).map_err(|_| UpstreamError::Protocol("the SSE endpoint event is not a URL".into()))?;
    if url.origin() == base.origin() {
        Ok(url)
    } else {
        Err(UpstreamError::Protocol("the SSE endpoint event points at another origin".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_relative_and_stay_on_origin() {
        let base = Url::parse("http://127.0.0.1:3001/sse").unwrap();
        assert_eq!(
            same_origin(&base, "/message?sessionId=abc").unwrap().as_str(),
            "http://127.0.0.1:3001/message?sessionId=abc"
        );
        assert!(same_origin(&base, "http://127.0.0.1:3001/m").is_ok());
        assert!(same_origin(&base, "http://evil.example.com/m").is_err());
        assert!(same_origin(&base, "https://127.0.0.1:3001/m").is_err());
    }
}
