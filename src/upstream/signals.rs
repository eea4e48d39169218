//! What an upstream announces outside any request: one of its lists changed (the supervisor
//! re-lists at once instead of at the next probe), or a resource an agent subscribed to was
//! updated (the front door relays it to the agents that subscribed). Each transport of an
//! upstream — the shared one, or one per agent session — reports through its own `Signals`.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{Notify, broadcast};

/// How many resource updates may wait for the front door before the oldest are dropped (an
/// update says only "read it again", so a lagging reader loses nothing it cannot recover).
pub const UPDATE_BUFFER: usize = 256;

/// `notifications/resources/updated` from an upstream, in the upstream's own URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUpdate {
    pub upstream: usize,
    /// The agent session whose own upstream session sent it (per-client upstreams), if any.
    pub session: Option<Arc<str>>,
    pub uri: String,
}

pub struct Signals {
    list_changed: Notify,
    updates: broadcast::Sender<ResourceUpdate>,
    upstream: usize,
    session: Option<Arc<str>>,
}

impl Signals {
    pub fn new(upstream: usize, session: Option<Arc<str>>, updates: broadcast::Sender<ResourceUpdate>) -> Arc<Self> {
        Arc::new(Self { list_changed: Notify::new(), updates, upstream, session })
    }

    /// Takes the notifications this module is for; false for any other.
    pub fn take(&self, method: &str, params: &Value) -> bool {
        match method {
            "notifications/tools/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/prompts/list_changed" => self.list_changed.notify_one(),
            "notifications/resources/updated" => {
                if let Some(uri) = params.get("uri").and_then(Value::as_str) {
                    // No receiver (nobody subscribed through this gateway) is not an error.
                    let _ = self.updates.send(ResourceUpdate {
                        upstream: self.upstream,
                        session: self.session.clone(),
                        uri: uri.to_string(),
                    });
                }
            }
            _ => return false,
        }
        true
    }

    /// Resolves when the server announces that one of its lists changed.
    pub async fn list_changed(&self) {
        self.list_changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resource_updates_carry_their_upstream_and_agent_session() {
        let (tx, mut rx) = broadcast::channel(UPDATE_BUFFER);
        let signals = Signals::new(3, Some("s1".into()), tx);
        assert!(signals.take("notifications/resources/updated", &json!({ "uri": "file:///a" })));
        assert_eq!(
            rx.try_recv().unwrap(),
            ResourceUpdate { upstream: 3, session: Some("s1".into()), uri: "file:///a".into() }
        );
        assert!(signals.take("notifications/resources/updated", &json!({})), "taken, but nothing to relay");
        assert!(rx.try_recv().is_err());
        assert!(!signals.take("notifications/progress", &json!({})), "others are not for this module");
    }

    #[tokio::test]
    async fn a_list_change_wakes_whoever_waits_even_if_it_came_first() {
        let (tx, _) = broadcast::channel(1);
        let signals = Signals::new(0, None, tx);
        assert!(signals.take("notifications/prompts/list_changed", &json!({})));
        tokio::time::timeout(std::time::Duration::from_secs(5), signals.list_changed()).await.unwrap();
    }
}
