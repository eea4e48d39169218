//! Resource subscriptions: which agents — legacy sessions (`resources/subscribe`) and
//! 2026-07-28 listen streams (`resourceSubscriptions`), each a [`Session`] here — want
//! `notifications/resources/updated` for which upstream resource. One upstream subscription
//! serves every agent that asked for it, and is dropped when the last of them leaves: by
//! unsubscribing, or because its session or stream ended. A subscriber that went away without
//! a word (its session object dropped) no longer counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::session::Session;

/// A resource as its upstream knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub upstream: usize,
    /// For per-client upstreams, the agent session whose own upstream session subscribed;
    /// `None` where all agents share the upstream session.
    pub session: Option<Arc<str>>,
    pub uri: String,
}

/// A resource's subscribers by session id. Weak: a session that ends without a word (a stdio
/// client going away) is simply skipped.
type Subscribers = Vec<(Arc<str>, Weak<Session>)>;

#[derive(Default)]
pub struct Subscriptions {
    by_resource: Mutex<HashMap<Key, Subscribers>>,
}

impl Subscriptions {
    /// Records `session`'s subscription; true when it is the resource's first subscriber, so
    /// the upstream has to be asked.
    pub fn add(&self, key: Key, session: &Arc<Session>) -> bool {
        let mut map = self.by_resource.lock().expect("subscriptions lock poisoned");
        let subscribers = map.entry(key).or_default();
        subscribers.retain(|(_, s)| s.strong_count() > 0);
        if subscribers.iter().any(|(id, _)| *id == session.id) {
            return false;
        }
        subscribers.push((session.id.clone(), Arc::downgrade(session)));
        subscribers.len() == 1
    }

    /// Removes `session`'s subscription; true when that left the resource without subscribers,
    /// so the upstream can be told.
    pub fn remove(&self, key: &Key, session: &str) -> bool {
        let mut map = self.by_resource.lock().expect("subscriptions lock poisoned");
        let Some(subscribers) = map.get_mut(key) else {
            return false;
        };
        let before = subscribers.len();
        subscribers.retain(|(id, s)| &**id != session && s.strong_count() > 0);
        let last = before > subscribers.len() && subscribers.is_empty();
        if subscribers.is_empty() {
            map.remove(key);
        }
        last
    }

    /// The live sessions subscribed to a resource.
    pub fn subscribers(&self, key: &Key) -> Vec<Arc<Session>> {
        let map = self.by_resource.lock().expect("subscriptions lock poisoned");
        map.get(key).map(|s| s.iter().filter_map(|(_, session)| session.upgrade()).collect()).unwrap_or_default()
    }

    /// Forgets an ended session; returns the resources it leaves without subscribers.
    pub fn forget(&self, session: &str) -> Vec<Key> {
        let mut map = self.by_resource.lock().expect("subscriptions lock poisoned");
        let mut orphaned = Vec::new();
        map.retain(|key, subscribers| {
            let before = subscribers.len();
            subscribers.retain(|(id, s)| &**id != session && s.strong_count() > 0);
            if subscribers.is_empty() {
                if before > 0 {
                    orphaned.push(key.clone());
                }
                return false;
            }
            true
        });
        orphaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::Principal;
    use crate::protocol::ProtocolVersion;

    fn session() -> Arc<Session> {
        Arc::new(Session::new(ProtocolVersion::V2025_11_25, Principal::new("p"), serde_json::json!({})))
    }

    fn key(uri: &str) -> Key {
        Key { upstream: 0, session: None, uri: uri.into() }
    }

    #[test]
    fn the_upstream_is_asked_once_and_released_by_the_last_subscriber() {
        let subs = Subscriptions::default();
        let (a, b) = (session(), session());
        assert!(subs.add(key("file:///x"), &a), "first subscriber");
        assert!(!subs.add(key("file:///x"), &a), "again: nothing new");
        assert!(!subs.add(key("file:///x"), &b), "second subscriber shares it");
        assert_eq!(subs.subscribers(&key("file:///x")).len(), 2);
        assert!(!subs.remove(&key("file:///x"), &a.id), "b still wants it");
        assert!(!subs.remove(&key("file:///x"), &a.id), "a was already gone");
        assert!(subs.remove(&key("file:///x"), &b.id), "the last one left");
        assert!(subs.subscribers(&key("file:///x")).is_empty());
        assert!(!subs.remove(&key("file:///never"), &a.id));
    }

    #[test]
    fn an_ended_session_releases_what_only_it_held() {
        let subs = Subscriptions::default();
        let (a, b) = (session(), session());
        subs.add(key("file:///shared"), &a);
        subs.add(key("file:///shared"), &b);
        subs.add(key("file:///mine"), &a);
        assert_eq!(subs.forget(&a.id), vec![key("file:///mine")]);
        assert_eq!(subs.subscribers(&key("file:///shared")).len(), 1);
        assert!(subs.forget(&a.id).is_empty());
    }

    #[test]
    fn a_subscriber_that_went_away_silently_does_not_hold_the_upstream() {
        let subs = Subscriptions::default();
        let (a, b) = (session(), session());
        subs.add(key("file:///x"), &a);
        subs.add(key("file:///x"), &b);
        drop(b);
        assert!(subs.remove(&key("file:///x"), &a.id), "the only live subscriber left");
        let c = session();
        subs.add(key("file:///y"), &c);
        drop(c);
        assert!(subs.add(key("file:///y"), &session()), "a dead entry does not make a new subscriber second");
    }

    #[test]
    fn dropped_sessions_are_not_delivered_to() {
        let subs = Subscriptions::default();
        let a = session();
        subs.add(key("file:///x"), &a);
        drop(a);
        assert!(subs.subscribers(&key("file:///x")).is_empty());
    }
}
