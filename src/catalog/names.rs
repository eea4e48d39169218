//! Exposed names: `<namespace><separator><name>`, made safe for LLM APIs, reversibly.
//!
//! LLM tool-calling APIs accept `^[A-Za-z0-9_-]{1,64}$`. A name outside that (too long, or with
//! dots, spaces, …) is sanitised and given a stable hash suffix of the *full original* name, so
//! the same upstream tool always gets the same exposed name and two different tools never share
//! one. Reversal is a map lookup in the catalog, never string surgery on the exposed name.

use sha2::{Digest, Sha256};

pub const MAX_NAME_LEN: usize = 64;
const HASH_HEX: usize = 6;

#[derive(Debug, Clone)]
pub struct Namer {
    separator: String,
    prefixed: bool,
}

impl Namer {
    pub fn new(separator: &str, prefixed: bool) -> Self {
        Self { separator: separator.to_string(), prefixed }
    }

    pub fn separator(&self) -> &str {
        &self.separator
    }

    pub fn prefixed(&self) -> bool {
        self.prefixed
    }

    /// The name an agent sees for an upstream tool or prompt.
    pub fn expose(&self, namespace: &str, name: &str) -> String {
        let full = if self.prefixed { format!("{namespace}{}{name}", self.separator) } else { name.to_string() };
        if self.is_safe(&full) { full } else { self.shorten(&full) }
    }

    /// The namespace a prefixed exposed name claims (used to tell "unknown" from "upstream down").
    pub fn namespace_of<'a>(&self, exposed: &'a str) -> Option<&'a str> {
        if !self.prefixed {
            return None;
        }
        exposed.split_once(self.separator.as_str()).map(|(ns, _)| ns)
    }

    /// The separator itself is allowed even when it is `.`: the operator chose it.
    fn is_safe(&self, name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || self.separator.contains(c))
    }

    fn shorten(&self, full: &str) -> String {
        let hash = hex::encode(Sha256::digest(full.as_bytes()));
        let keep = MAX_NAME_LEN - HASH_HEX - 1;
        let mut out: String = full
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || self.separator.contains(c) { c } else { '_' })
            .take(keep)
            .collect();
        out.push('_');
        out.push_str(&hash[..HASH_HEX]);
        out
    }
}

/// Resource URIs are namespaced as `<namespace>+<uri>`: still a valid URI (the scheme grammar
/// allows `+`), and reversible by splitting at the first `+` since namespaces cannot hold one.
pub fn expose_uri(namespace: &str, uri: &str, prefixed: bool) -> String {
    if prefixed { format!("{namespace}+{uri}") } else { uri.to_string() }
}

pub fn split_uri(exposed: &str) -> Option<(&str, &str)> {
    exposed.split_once('+')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names_are_prefixed_verbatim() {
        let namer = Namer::new("__", true);
        assert_eq!(namer.expose("bamboo", "bamboo_answer"), "bamboo__bamboo_answer");
        assert_eq!(Namer::new(".", true).expose("panda", "kill_task"), "panda.kill_task");
        assert_eq!(Namer::new("__", false).expose("bamboo", "echo"), "echo");
    }

    #[test]
    fn dotted_names_are_shortened_stably_and_keep_their_namespace() {
        let namer = Namer::new("__", true);
        let a = namer.expose("math", "math.factorial");
        assert_eq!(a, namer.expose("math", "math.factorial"), "stable across calls");
        assert!(a.starts_with("math__math_factorial_"), "{a}");
        assert_eq!(namer.namespace_of(&a), Some("math"));
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn long_names_fit_64_and_differ_when_originals_differ() {
        let namer = Namer::new("__", true);
        let base = "x".repeat(80);
        let a = namer.expose("ns", &format!("{base}a"));
        let b = namer.expose("ns", &format!("{base}b"));
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert_eq!(b.len(), MAX_NAME_LEN);
        assert_ne!(a, b, "same truncated prefix, different hash suffix");
    }

    #[test]
    fn uris_round_trip() {
        let exposed = expose_uri("docs", "file:///a+b.txt", true);
        assert_eq!(exposed, "docs+file:///a+b.txt");
        assert_eq!(split_uri(&exposed), Some(("docs", "file:///a+b.txt")));
    }
}
