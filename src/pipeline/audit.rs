//! Stage 10: one payload-free audit event per tool call, written to the store in batches off
//! the hot path. The call only enqueues; a writer task drains the queue every
//! [`FLUSH_EVERY`] (or when a batch fills) and on shutdown, so nothing queued is lost on a
//! graceful stop. Arguments are never stored, only a keyed hash of them (HMAC-SHA-256 under a
//! per-deployment secret kept in the store), so a reader of the log cannot test guesses of
//! small arguments (`{"confirm": true}`, a PIN) against it.

use std::time::Duration;

use serde_json::Value;
use sha2::Sha256;
use tokio::sync::{mpsc, oneshot};

use crate::store::{AuditEvent, Store};

const FLUSH_EVERY: Duration = Duration::from_millis(200);
const BATCH: usize = 512;
/// Events waiting for the writer; beyond this, events are dropped and counted (a wedged
/// database must not take the gateway's memory with it).
const QUEUE: usize = 65_536;

enum Message {
    Event(Box<AuditEvent>),
    Flush(oneshot::Sender<()>),
}

pub struct Audit {
    tx: mpsc::Sender<Message>,
    dropped: std::sync::atomic::AtomicU64,
    hash_key: Vec<u8>,
}

/// The store secret that keys argument hashes.
pub const HASH_KEY: &str = "audit-argument-hash";

impl Audit {
    /// Starts the writer task.
    pub fn start(store: Store, hash_key: Vec<u8>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write(store, rx));
        Self { tx, dropped: Default::default(), hash_key }
    }

    /// HMAC-SHA-256 of the arguments' canonical JSON: proves what was sent without storing it.
    pub fn arguments_hash(&self, arguments: Option<&Value>) -> Option<String> {
        use hmac::{KeyInit, Mac};
        let canonical = serde_json_canonicalizer::to_vec(arguments?).ok()?;
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&self.hash_key).ok()?;
        mac.update(&canonical);
        Some(hex::encode(mac.finalize().into_bytes()))
    }

    pub fn record(&self, event: AuditEvent) {
        if self.tx.try_send(Message::Event(Box::new(event))).is_err() {
            let n = self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::error!(dropped = n, "audit queue full: events dropped (is the store reachable?)");
            }
        }
    }

    /// Waits until everything recorded so far is in the store (shutdown, tests).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Message::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

async fn write(store: Store, mut rx: mpsc::Receiver<Message>) {
    let mut batch: Vec<AuditEvent> = Vec::with_capacity(BATCH);
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    loop {
        tokio::select! {
            message = rx.recv() => match message {
                Some(Message::Event(event)) => {
                    batch.push(*event);
                    if batch.len() >= BATCH {
                        flush(&store, &mut batch).await;
                    }
                }
                Some(Message::Flush(done)) => {
                    flush(&store, &mut batch).await;
                    let _ = done.send(());
                }
                None => {
                    flush(&store, &mut batch).await;
                    return;
                }
            },
            _ = tick.tick() => flush(&store, &mut batch).await,
        }
    }
}

async fn flush(store: &Store, batch: &mut Vec<AuditEvent>) {
    if batch.is_empty() {
        return;
    }
    // A failed write is retried a few times: a brief database outage should not lose events.
    for attempt in 0..3 {
        match store.append_audit(batch).await {
            Ok(()) => {
                batch.clear();
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, events = batch.len(), "writing audit events failed");
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
    }
    tracing::error!(events = batch.len(), "audit events lost after retries");
    batch.clear();
}
