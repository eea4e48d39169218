//! What an upstream sends while it answers one request — progress, log messages, and requests
//! of its own (sampling, elicitation, roots) — handed to whoever relays them to the agent.
//!
//! The channel is bounded: an upstream that floods notifications loses the excess (logged),
//! never the gateway's memory. A server request the agent side cannot take is answered with an
//! error right away, so the upstream never waits on nobody.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// How many in-flight messages one request may queue toward the agent.
pub const RELAY_BUFFER: usize = 64;

/// The agent's answer to a relayed server request: a `result`, or a JSON-RPC `error` object.
pub type Answer = Result<Value, Value>;

#[derive(Debug)]
pub enum Inbound {
    Notification { method: String, params: Value },
    Request { method: String, params: Value, respond: oneshot::Sender<Answer> },
}

/// The sending half, carried with a request down to the upstream transport.
#[derive(Clone, Debug)]
pub struct Relay(mpsc::Sender<Inbound>);

impl Relay {
    pub fn channel() -> (Relay, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(RELAY_BUFFER);
        (Relay(tx), rx)
    }

    /// Queues a notification; drops it when the agent side is not keeping up.
    pub fn notify(&self, method: String, params: Value) -> bool {
        self.0.try_send(Inbound::Notification { method, params }).is_ok()
    }

    /// Queues a server request; `None` when nobody can take it (the caller answers with an error).
    pub fn request(&self, method: String, params: Value) -> Option<oneshot::Receiver<Answer>> {
        let (respond, answer) = oneshot::channel();
        self.0.try_send(Inbound::Request { method, params, respond }).ok()?;
        Some(answer)
    }
}

/// The JSON-RPC error object for a server request nobody on the agent side can answer.
pub fn unsupported(method: &str) -> Value {
    serde_json::json!({
        "code": -32601,
        "message": format!("the client behind this gateway does not support {method}"),
    })
}
