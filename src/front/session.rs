//! Legacy (initialize-based) agent sessions: id, negotiated version, owner, and the GET stream
//! that carries server-to-client notifications.
//!
//! A session is bound to the principal that created it: another caller presenting the id gets
//! the same 404 as for an unknown id. Idle sessions expire; when the table is full the least
//! recently used session is evicted rather than refusing new clients.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::pipeline::Principal;
use crate::protocol::ProtocolVersion;
use crate::upstream::relay;

/// Frames buffered per GET stream; a client that stops reading loses notifications, not memory.
const STREAM_BUFFER: usize = 64;

pub struct Session {
    pub id: Arc<str>,
    pub version: ProtocolVersion,
    pub principal: Principal,
    pub client_capabilities: Value,
    initialized: AtomicBool,
    last_seen: Mutex<Instant>,
    stream: Mutex<Option<mpsc::Sender<Bytes>>>,
    streams_opened: AtomicU64,
    /// Server-to-client requests relayed to this agent, by the id we gave them, awaiting the
    /// agent's answer.
    pending: Mutex<HashMap<String, oneshot::Sender<relay::Answer>>>,
    next_request: AtomicU64,
    /// Requests in flight, by the agent's id, so `notifications/cancelled` can stop them.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// The level set with `logging/setLevel`, passed to 2026-07-28 upstreams per request.
    log_level: Mutex<Option<String>>,
}

impl Session {
    pub fn new(version: ProtocolVersion, principal: Principal, client_capabilities: Value) -> Self {
        Self {
            id: new_session_id().into(),
            version,
            principal,
            client_capabilities,
            initialized: AtomicBool::new(false),
            last_seen: Mutex::new(Instant::now()),
            stream: Mutex::new(None),
            streams_opened: AtomicU64::new(0),
            pending: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(0),
            inflight: Mutex::new(HashMap::new()),
            log_level: Mutex::new(None),
        }
    }

    pub fn set_log_level(&self, level: &str) {
        *self.log_level.lock().expect("session lock poisoned") = Some(level.to_string());
    }

    /// The agent's log level; legacy servers may log without one, so `info` when unset.
    pub fn log_level(&self) -> String {
        self.log_level.lock().expect("session lock poisoned").clone().unwrap_or_else(|| "info".into())
    }

    /// Whether the agent declared `capability` (e.g. `sampling`) at initialize.
    pub fn declared(&self, capability: &str) -> bool {
        self.client_capabilities.get(capability).is_some_and(|c| !c.is_null())
    }

    /// Registers a relayed server request; returns the id to send it under.
    pub fn expect_answer(&self, respond: oneshot::Sender<relay::Answer>) -> String {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("gatehouse-{n}");
        let mut pending = self.pending.lock().expect("session lock poisoned");
        // Answers that never came: their senders are closed; drop them before they pile up.
        pending.retain(|_, tx| !tx.is_closed());
        pending.insert(id.clone(), respond);
        id
    }

    /// Routes the agent's answer (`result` or `error`) to the relayed request it answers.
    /// Returns false for an id we are not waiting on.
    pub fn answer(&self, id: &str, answer: relay::Answer) -> bool {
        let tx = self.pending.lock().expect("session lock poisoned").remove(id);
        tx.is_some_and(|tx| tx.send(answer).is_ok())
    }

    /// Tracks a request so it can be cancelled; the guard forgets it when the request ends.
    pub fn track(self: &Arc<Self>, request_id: &str) -> (CancellationToken, InflightGuard) {
        let token = CancellationToken::new();
        self.inflight.lock().expect("session lock poisoned").insert(request_id.to_string(), token.clone());
        (token, InflightGuard { session: self.clone(), request_id: request_id.to_string() })
    }

    /// `notifications/cancelled`: stops the named request if it is still running.
    pub fn cancel(&self, request_id: &str) -> bool {
        let token = self.inflight.lock().expect("session lock poisoned").remove(request_id);
        token.map(|t| t.cancel()).is_some()
    }

    pub fn touch(&self) {
        *self.last_seen.lock().expect("session lock poisoned") = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_seen.lock().expect("session lock poisoned").elapsed()
    }

    pub fn mark_initialized(&self) {
        self.initialized.store(true, Ordering::Relaxed);
    }

    /// Opens the session's stream of server-to-client messages (the GET stream over HTTP, stdout
    /// on stdio), replacing (and so ending) an older one: one stream per session means a
    /// notification is never delivered twice. Messages are JSON; the transport frames them.
    pub fn open_stream(&self) -> (String, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let n = self.streams_opened.fetch_add(1, Ordering::Relaxed) + 1;
        *self.stream.lock().expect("session lock poisoned") = Some(tx);
        (format!("g{n}"), rx)
    }

    /// Queues a JSON-RPC notification on the session's stream. Returns false if there is no
    /// open stream or the client is not keeping up.
    pub fn notify(&self, message: &[u8]) -> bool {
        let guard = self.stream.lock().expect("session lock poisoned");
        guard.as_ref().is_some_and(|tx| tx.try_send(Bytes::copy_from_slice(message)).is_ok())
    }
}

/// Removes a request from the in-flight table when it finishes, however it finishes.
pub struct InflightGuard {
    session: Arc<Session>,
    request_id: String,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.session.inflight.lock().expect("session lock poisoned").remove(&self.request_id);
    }
}

/// 32 random bytes from the OS-seeded CSPRNG, hex-encoded: visible ASCII, unguessable.
fn new_session_id() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

pub struct Sessions {
    map: RwLock<HashMap<Arc<str>, Arc<Session>>>,
    idle_timeout: Duration,
    max: usize,
    ended: mpsc::UnboundedSender<Arc<str>>,
}

impl Sessions {
    /// `ended` receives the id of every session that ends, however it ends (DELETE, idle
    /// expiry, eviction), so per-client upstream sessions can be closed with it.
    pub fn new(idle_timeout: Duration, max: usize, ended: mpsc::UnboundedSender<Arc<str>>) -> Self {
        Self { map: RwLock::new(HashMap::new()), idle_timeout, max: max.max(1), ended }
    }

    pub fn insert(&self, session: Session) -> Arc<Session> {
        let session = Arc::new(session);
        let mut map = self.map.write().expect("sessions lock poisoned");
        if map.len() >= self.max {
            self.retain_live(&mut map);
        }
        if map.len() >= self.max {
            let oldest = map.iter().max_by_key(|(_, s)| s.idle_for()).map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                tracing::warn!(max = self.max, "session table full; evicting the least recently used session");
                map.remove(&id);
                let _ = self.ended.send(id);
            }
        }
        map.insert(session.id.clone(), session.clone());
        session
    }

    /// The session, if it exists, is not idle-expired, and belongs to `principal`.
    pub fn get(&self, id: &str, principal: &Principal) -> Option<Arc<Session>> {
        let session = self.map.read().expect("sessions lock poisoned").get(id).cloned()?;
        if session.principal != *principal {
            return None;
        }
        if session.idle_for() >= self.idle_timeout {
            self.remove(id);
            return None;
        }
        session.touch();
        Some(session)
    }

    pub fn remove(&self, id: &str) -> bool {
        let removed = self.map.write().expect("sessions lock poisoned").remove_entry(id);
        removed.map(|(id, _)| self.ended.send(id)).is_some()
    }

    pub fn all(&self) -> Vec<Arc<Session>> {
        self.map.read().expect("sessions lock poisoned").values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.map.read().expect("sessions lock poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops idle sessions (called periodically); returns how many.
    pub fn sweep(&self) -> usize {
        let mut map = self.map.write().expect("sessions lock poisoned");
        self.retain_live(&mut map)
    }

    fn retain_live(&self, map: &mut HashMap<Arc<str>, Arc<Session>>) -> usize {
        let before = map.len();
        map.retain(|id, s| {
            let live = s.idle_for() < self.idle_timeout;
            if !live {
                let _ = self.ended.send(id.clone());
            }
            live
        });
        before - map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session(principal: &str) -> Session {
        Session::new(ProtocolVersion::V2025_11_25, Principal::new(principal), json!({}))
    }

    #[test]
    fn ids_are_64_hex_chars_and_unique() {
        let a = session("p");
        let b = session("p");
        assert_eq!(a.id.len(), 64);
        assert!(a.id.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn another_principal_cannot_use_a_session() {
        let sessions = Sessions::new(Duration::from_secs(60), 10, mpsc::unbounded_channel().0);
        let s = sessions.insert(session("alice"));
        assert!(sessions.get(&s.id, &Principal::new("alice")).is_some());
        assert!(sessions.get(&s.id, &Principal::new("mallory")).is_none());
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_used() {
        let sessions = Sessions::new(Duration::from_secs(60), 2, mpsc::unbounded_channel().0);
        let first = sessions.insert(session("p"));
        std::thread::sleep(Duration::from_millis(5));
        let second = sessions.insert(session("p"));
        second.touch();
        sessions.insert(session("p"));
        assert_eq!(sessions.len(), 2);
        assert!(sessions.get(&first.id, &Principal::new("p")).is_none());
        assert!(sessions.get(&second.id, &Principal::new("p")).is_some());
    }

    #[test]
    fn a_new_stream_replaces_the_old_one() {
        let s = session("p");
        let (_, mut old) = s.open_stream();
        let (_, mut new) = s.open_stream();
        assert!(s.notify(b"{}"));
        assert!(old.try_recv().is_err(), "old stream is closed");
        assert_eq!(new.try_recv().unwrap(), Bytes::from_static(b"{}"), "the message itself; transports frame it");
    }
}
