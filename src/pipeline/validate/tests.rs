use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::catalog::Route;

fn tool(fingerprint: &str, definition: Value) -> Tool {
    Tool {
        exposed: "ns__t".into(),
        route: Route { upstream: 0, namespace: "ns".into(), name: "t".into() },
        definition: Arc::new(definition),
        fingerprint: fingerprint.into(),
    }
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"count": {"type": "integer", "minimum": 1}, "name": {"type": "string"}},
           "required": ["name"], "additionalProperties": false})
}

#[test]
fn violations_name_the_path_and_rule_but_never_the_value() {
    let v = Validator::default();
    let t = tool("f1", json!({"name": "t", "inputSchema": schema()}));
    assert_eq!(v.input(&t, &json!({"name": "x", "count": 2})), Ok(()));
    let e = v.input(&t, &json!({"name": "x", "count": "SECRET-42"})).unwrap_err();
    assert_eq!((e.path.as_str(), e.rule.as_str()), ("arguments/count", "must be of type integer"));
    let e = v.input(&t, &json!({"name": "x", "count": 0})).unwrap_err();
    assert_eq!((e.path.as_str(), e.rule.as_str()), ("arguments/count", "violates \"minimum\""));
    let e = v.input(&t, &json!({"count": 1})).unwrap_err();
    assert_eq!(e.rule, "missing required property \"name\"");
    let e = v.input(&t, &json!({"name": "x", "token": "SECRET-42"})).unwrap_err();
    assert_eq!(e.rule, "unexpected properties: token");
    for e in [v.input(&t, &json!({"name": "x", "count": "SECRET-42"})).unwrap_err()] {
        assert!(!format!("{e}").contains("SECRET"), "{e}");
    }
}

#[test]
fn other_dialects_work_and_unsupported_ones_are_a_clear_error() {
    let v = Validator::default();
    let draft7 = tool(
        "f7",
        json!({"inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["a"]}}),
    );
    assert!(v.input(&draft7, &json!({})).is_err());
    assert!(v.input(&draft7, &json!({"a": 1})).is_ok());
    let custom = tool("fx", json!({"inputSchema": {"$schema": "https://example.com/my-dialect", "type": "object"}}));
    let e = v.input(&custom, &json!({})).unwrap_err();
    assert!(e.rule.contains("unsupported dialect (https://example.com/my-dialect)"), "{e}");
}

#[test]
fn remote_refs_are_never_fetched() {
    let v = Validator::default();
    let remote = tool("fr", json!({"inputSchema": {"$ref": "http://169.254.169.254/latest/meta-data"}}));
    let e = v.input(&remote, &json!({})).unwrap_err();
    assert!(e.rule.contains("the tool's schema is invalid"), "{e}");
}

#[test]
fn structured_content_is_checked_against_the_output_schema() {
    let v = Validator::default();
    let t = tool(
        "fo",
        json!({"outputSchema": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}}),
    );
    assert!(v.output(&t, &json!({"content": [], "structuredContent": {"n": 1}})).is_ok());
    assert_eq!(v.output(&t, &json!({"structuredContent": {"n": "x"}})).unwrap_err().path, "structuredContent/n");
    assert!(v.output(&t, &json!({"content": []})).is_err(), "missing structuredContent");
    assert!(v.output(&t, &json!({"isError": true, "content": []})).is_ok(), "errors are not checked");
    let plain = tool("fp", json!({"name": "t"}));
    assert!(v.output(&plain, &json!({"structuredContent": 5})).is_ok());
}
