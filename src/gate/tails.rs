//! Session-stable tails: within one conversation, tools already shown keep their place and new
//! ones are appended, so the LLM provider's cached prefix grows instead of reshuffling. When a
//! tail reaches its cap it starts over from the current task's tools.
//!
//! Conversations are keyed by (principal, conversation id) and bounded: the least recently
//! used are forgotten first.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Which conversation a request belongs to: never shared across principals.
pub type ConversationKey = (std::sync::Arc<str>, String);

struct Tail {
    /// Exposed tool names, in the order they joined.
    names: Vec<String>,
    used: Instant,
}

pub struct Tails {
    max_tail: usize,
    max_conversations: usize,
    tails: Mutex<HashMap<ConversationKey, Tail>>,
}

impl Tails {
    pub fn new(max_tail: usize, max_conversations: usize) -> Self {
        Self {
            max_tail: max_tail.max(1),
            max_conversations: max_conversations.max(1),
            tails: Mutex::new(HashMap::new()),
        }
    }

    /// Appends `picks` (not yet in the tail) and returns the tail. Past `max_tail` the tail
    /// starts over as just `picks`.
    pub fn extend(&self, key: &ConversationKey, picks: &[String]) -> Vec<String> {
        let mut tails = self.tails.lock().expect("tails lock poisoned");
        if !tails.contains_key(key) && tails.len() >= self.max_conversations {
            let oldest = tails.iter().min_by_key(|(_, t)| t.used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                tails.remove(&oldest);
            }
        }
        let tail = tails.entry(key.clone()).or_insert_with(|| Tail { names: Vec::new(), used: Instant::now() });
        tail.used = Instant::now();
        let new: Vec<&String> = picks.iter().filter(|p| !tail.names.contains(p)).collect();
        if tail.names.len() + new.len() > self.max_tail {
            tail.names = picks.iter().take(self.max_tail).cloned().collect();
        } else {
            tail.names.extend(new.into_iter().cloned());
        }
        tail.names.clone()
    }

    pub fn forget(&self, key: &ConversationKey) {
        self.tails.lock().expect("tails lock poisoned").remove(key);
    }

    pub fn len(&self) -> usize {
        self.tails.lock().expect("tails lock poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(id: &str) -> ConversationKey {
        (Arc::from("alice"), id.to_string())
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_tail_only_ever_appends_until_its_cap() {
        let tails = Tails::new(5, 10);
        let k = key("c1");
        assert_eq!(tails.extend(&k, &names(&["b", "a"])), ["b", "a"]);
        assert_eq!(tails.extend(&k, &names(&["c", "a"])), ["b", "a", "c"], "a keeps its place, c is appended");
        assert_eq!(tails.extend(&k, &names(&["a"])), ["b", "a", "c"], "nothing new, nothing moves");
        let grown = tails.extend(&k, &names(&["d", "e"]));
        assert_eq!(grown, ["b", "a", "c", "d", "e"]);
        assert_eq!(tails.extend(&k, &names(&["f", "a"])), ["f", "a"], "past the cap it starts over");
    }

    #[test]
    fn conversations_and_principals_are_separate() {
        let tails = Tails::new(8, 10);
        tails.extend(&key("c1"), &names(&["x"]));
        assert_eq!(tails.extend(&key("c2"), &names(&["y"])), ["y"]);
        let bob = (Arc::from("bob"), "c1".to_string());
        assert_eq!(tails.extend(&bob, &names(&["z"])), ["z"], "same id, other principal");
    }

    #[test]
    fn the_least_recently_used_conversation_is_forgotten_first() {
        let tails = Tails::new(8, 2);
        tails.extend(&key("old"), &names(&["x"]));
        std::thread::sleep(std::time::Duration::from_millis(2));
        tails.extend(&key("new"), &names(&["y"]));
        tails.extend(&key("newest"), &names(&["z"]));
        assert_eq!(tails.len(), 2);
        assert_eq!(tails.extend(&key("old"), &names(&["w"])), ["w"], "old was forgotten");
    }
}
