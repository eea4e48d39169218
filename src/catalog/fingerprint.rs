//! Fingerprints: SHA-256 over RFC 8785 (JCS) canonical JSON, so key order and number formatting
//! in an upstream's output never change a fingerprint — only a real definition change does.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The parts of a tool definition that make its contract (SPEC §3). `_meta`, icons and other
/// presentation fields are left out on purpose: they may change without changing behaviour.
const CONTRACT_FIELDS: [&str; 6] = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"];

/// Largest integer JSON can carry without loss in every peer (IEEE-754 double).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Hex SHA-256 of the canonical form of a tool's contract fields.
///
/// Integers beyond ±2^53 are not representable identically by every JSON implementation, so
/// such a definition gets a fingerprint that can never match a previous one — treated as a
/// change rather than silently equal.
pub fn tool_fingerprint(tool: &Value) -> String {
    let mut contract = Map::new();
    for field in CONTRACT_FIELDS {
        if let Some(v) = tool.get(field) {
            contract.insert(field.to_string(), v.clone());
        }
    }
    let contract = Value::Object(contract);
    if has_unsafe_integer(&contract) {
        return format!("unsafe-integer:{}", hex::encode(Sha256::digest(contract.to_string())));
    }
    match serde_json_canonicalizer::to_vec(&contract) {
        Ok(bytes) => hex::encode(Sha256::digest(&bytes)),
        Err(_) => format!("uncanonical:{}", hex::encode(Sha256::digest(contract.to_string()))),
    }
}

/// One fingerprint for a namespace: the hash of its tools' fingerprints in name order.
pub fn combine<'a>(mut fingerprints: Vec<(&'a str, &'a str)>) -> String {
    fingerprints.sort_unstable();
    let mut hasher = Sha256::new();
    for (name, fp) in fingerprints {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(fp.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

fn has_unsafe_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.as_u64().is_some_and(|u| u > MAX_SAFE_INTEGER)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > MAX_SAFE_INTEGER)
        }
        Value::Array(items) => items.iter().any(has_unsafe_integer),
        Value::Object(map) => map.values().any(has_unsafe_integer),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_number_spelling_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"name":"t","inputSchema":{"type":"object","maximum":1.0}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"inputSchema":{"maximum":1,"type":"object"},"name":"t"}"#).unwrap();
        assert_eq!(tool_fingerprint(&a), tool_fingerprint(&b));
    }

    #[test]
    fn a_schema_change_changes_the_fingerprint_but_meta_does_not() {
        let base = json!({"name": "t", "inputSchema": {"type": "object"}});
        let with_meta = json!({"name": "t", "inputSchema": {"type": "object"}, "_meta": {"x": 1}});
        let changed = json!({"name": "t", "inputSchema": {"type": "object", "required": ["a"]}});
        assert_eq!(tool_fingerprint(&base), tool_fingerprint(&with_meta));
        assert_ne!(tool_fingerprint(&base), tool_fingerprint(&changed));
    }

    #[test]
    fn rfc8785_vector_for_numbers() {
        // From RFC 8785 §3.2.2.3: canonical number serialisation.
        let v: Value = serde_json::from_str(r#"{"n":[1E30,4.50,2e-3,0.000001]}"#).unwrap();
        let canon = serde_json_canonicalizer::to_string(&v).unwrap();
        assert_eq!(canon, r#"{"n":[1e+30,4.5,0.002,0.000001]}"#);
    }

    #[test]
    fn integers_beyond_2_pow_53_never_fingerprint_equal_to_safe_ones() {
        let big = json!({"name": "t", "inputSchema": {"maximum": 9007199254740993u64}});
        assert!(tool_fingerprint(&big).starts_with("unsafe-integer:"));
    }

    #[test]
    fn namespace_fingerprint_ignores_listing_order() {
        assert_eq!(combine(vec![("a", "1"), ("b", "2")]), combine(vec![("b", "2"), ("a", "1")]));
        assert_ne!(combine(vec![("a", "1")]), combine(vec![("a", "2")]));
    }
}
