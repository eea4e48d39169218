//! Request/response multiplexing over one message stream — what stdio and legacy HTTP+SSE
//! upstreams share: every message of every request arrives on a single stream, so responses
//! are matched by id, progress by the token this hop minted, and logs and server requests go to
//! the only request in flight (one stream cannot say more); list changes wake the supervisor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use reqwest::Url;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::relay::{self, Relay};
use super::signals::Signals;
use super::{Era, Message, UpstreamError, stamp_envelope};

/// How messages leave toward the server.
pub enum Outbound {
    /// Lines written to a child's stdin by a writer task.
    Lines(mpsc::Sender<Vec<u8>>),
    /// HTTP POSTs to the endpoint a legacy SSE stream named.
    Post(Poster),
}

/// A detached POST target: client, URL and per-hop headers. Also used by Streamable HTTP to
/// answer server requests and send cancellations after the originating request moved on.
#[derive(Clone)]
pub struct Poster {
    pub http: reqwest::Client,
    pub url: Url,
    pub headers: HeaderMap,
}

impl Poster {
    pub async fn post(&self, message: &Value) -> Result<(), UpstreamError> {
        let send = self.http.post(self.url.clone()).headers(self.headers.clone()).body(message.to_string()).send();
        let response = tokio::time::timeout(Duration::from_secs(30), send)
            .await
            .map_err(|_| UpstreamError::Timeout(Duration::from_secs(30)))?
            .map_err(UpstreamError::Connect)?;
        match response.status() {
            s if s.is_success() => Ok(()),
            s => Err(UpstreamError::Status(s)),
        }
    }

    /// Fire and forget (answers and cancellations nobody waits on).
    pub fn post_detached(&self, message: Value) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let poster = self.clone();
        handle.spawn(async move {
            if let Err(e) = poster.post(&message).await {
                tracing::debug!(error = %e, "could not deliver a message upstream");
            }
        });
    }
}

struct Pending {
    done: oneshot::Sender<Result<Box<RawValue>, UpstreamError>>,
    relay: Option<Relay>,
    /// The agent's progress token, replaced on this hop by `gatehouse-<id>`.
    progress_token: Option<Value>,
}

pub struct Mux {
    namespace: Arc<str>,
    pending: Mutex<HashMap<u64, Pending>>,
    outbound: Outbound,
    /// Cancelled when the stream ends (process exit, SSE stream closed) or on shutdown.
    pub closed: CancellationToken,
    signals: Arc<Signals>,
    garbage: AtomicU64,
}

impl Mux {
    pub fn new(namespace: Arc<str>, outbound: Outbound, closed: CancellationToken, signals: Arc<Signals>) -> Self {
        Self { namespace, pending: Mutex::new(HashMap::new()), outbound, closed, signals, garbage: AtomicU64::new(0) }
    }

    pub async fn send(&self, message: &Value) -> Result<(), UpstreamError> {
        match &self.outbound {
            Outbound::Lines(tx) => tx.send(message.to_string().into_bytes()).await.map_err(|_| UpstreamError::Exited),
            Outbound::Post(poster) => poster.post(message).await,
        }
    }

    fn send_detached(&self, message: Value) {
        match &self.outbound {
            Outbound::Lines(tx) => {
                let _ = tx.try_send(message.to_string().into_bytes());
            }
            Outbound::Post(poster) => poster.post_detached(message),
        }
    }

    /// Sends a request and waits (up to `timeout`) for its response.
    pub async fn call(
        self: &Arc<Self>,
        era: Era,
        id: u64,
        method: &str,
        mut params: Map<String, Value>,
        relay: Option<&Relay>,
        timeout: Duration,
    ) -> Result<Box<RawValue>, UpstreamError> {
        stamp_envelope(era, &mut params);
        // One stream serves every agent: progress tokens are made unique on this hop.
        let progress_token = params
            .get_mut("_meta")
            .and_then(Value::as_object_mut)
            .and_then(|meta| meta.insert("progressToken".into(), json!(format!("gatehouse-{id}"))));
        let (done, answer) = oneshot::channel();
        let pending = Pending { done, relay: relay.cloned(), progress_token };
        self.pending.lock().expect("pending lock poisoned").insert(id, pending);
        let mut guard = Abandon { mux: self.clone(), id, cancel: matches!(era, Era::Legacy(_)) };
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })).await?;
        let outcome = tokio::time::timeout(timeout, answer).await;
        guard.cancel = guard.cancel && outcome.is_err();
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(UpstreamError::Exited),
            Err(_) => Err(UpstreamError::Timeout(timeout)),
        }
    }

    /// Routes one incoming message. Junk is counted and logged sparingly, never fatal.
    pub fn deliver(self: &Arc<Self>, bytes: &[u8]) {
        match serde_json::from_slice::<Message>(bytes) {
            Ok(message) => self.route(message),
            Err(_) => {
                let n = self.garbage.fetch_add(1, Ordering::Relaxed) + 1;
                // Rate-limited: a server printing junk must not flood the log either.
                if n.is_power_of_two() {
                    tracing::warn!(namespace = %self.namespace, messages = n, "upstream sent messages that are not JSON-RPC");
                }
            }
        }
    }

    /// The stream ended: every waiting request fails now rather than at its deadline.
    pub fn close(&self) {
        self.closed.cancel();
        let pending: Vec<Pending> =
            self.pending.lock().expect("pending lock poisoned").drain().map(|(_, p)| p).collect();
        for p in pending {
            let _ = p.done.send(Err(UpstreamError::Exited));
        }
    }

    fn route(self: &Arc<Self>, message: Message) {
        let params = message.params.unwrap_or_else(|| json!({}));
        match (message.method, message.id) {
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { return };
                let Some(pending) = self.pending.lock().expect("pending lock poisoned").remove(&id) else {
                    return;
                };
                let outcome = match (message.result, message.error) {
                    (Some(result), None) => Ok(result),
                    (_, Some(e)) => Err(UpstreamError::Rpc { code: e.code, message: e.message, data: e.data }),
                    (None, None) => Err(UpstreamError::Protocol("response has neither result nor error".into())),
                };
                let _ = pending.done.send(outcome);
            }
            (Some(method), None) => self.notification(method, params),
            (Some(method), Some(id)) => self.server_request(id, method, params),
            (None, None) => {}
        }
    }

    fn notification(&self, method: String, mut params: Value) {
        if self.signals.take(&method, &params) {
            return;
        }
        match method.as_str() {
            "notifications/progress" => {
                let ours =
                    params.get("progressToken").and_then(Value::as_str).and_then(|t| t.strip_prefix("gatehouse-"));
                let Some(id) = ours.and_then(|n| n.parse::<u64>().ok()) else {
                    return;
                };
                let pending = self.pending.lock().expect("pending lock poisoned");
                if let Some(Pending { relay: Some(relay), progress_token: Some(token), .. }) = pending.get(&id) {
                    params["progressToken"] = token.clone();
                    relay.notify(method, params);
                }
            }
            _ => {
                if let Some(relay) = self.only_relay() {
                    relay.notify(method, params);
                }
            }
        }
    }

    /// A request of the server's own: answered by the agent of the only request in flight, or
    /// refused (a single stream cannot say which agent it is for).
    fn server_request(self: &Arc<Self>, id: Value, method: String, params: Value) {
        if method == "ping" {
            self.send_detached(json!({ "jsonrpc": "2.0", "id": id, "result": {} }));
            return;
        }
        let answer = self.only_relay().and_then(|r| r.request(method.clone(), params));
        let mux = self.clone();
        tokio::spawn(async move {
            let refusal = || json!({ "jsonrpc": "2.0", "id": id, "error": relay::unsupported(&method) });
            let reply = match answer {
                Some(answer) => match answer.await {
                    Ok(Ok(result)) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                    Ok(Err(error)) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
                    Err(_) => refusal(),
                },
                None => refusal(),
            };
            let _ = mux.send(&reply).await;
        });
    }

    fn only_relay(&self) -> Option<Relay> {
        let pending = self.pending.lock().expect("pending lock poisoned");
        let mut relays = pending.values().filter_map(|p| p.relay.as_ref());
        match (relays.next(), relays.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    }
}

/// Forgets a request that ended without its answer; for a legacy server, says so.
struct Abandon {
    mux: Arc<Mux>,
    id: u64,
    cancel: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let was_pending = self.mux.pending.lock().expect("pending lock poisoned").remove(&self.id).is_some();
        if was_pending && self.cancel {
            self.mux.send_detached(json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": { "requestId": self.id, "reason": "the agent cancelled or the deadline passed" },
            }));
        }
    }
}
