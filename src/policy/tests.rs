use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::catalog::Route;

fn tool(namespace: &str, name: &str, read_only: Option<bool>) -> Tool {
    let mut definition = json!({"name": name, "inputSchema": {"type": "object"}});
    if let Some(r) = read_only {
        definition["annotations"] = json!({"readOnlyHint": r});
    }
    Tool {
        exposed: format!("{namespace}__{name}").into(),
        route: Route { upstream: 0, namespace: namespace.into(), name: name.into() },
        definition: Arc::new(definition),
        fingerprint: "f".into(),
    }
}

fn principal(id: &str, roles: &[&str], scopes: &[&str]) -> Principal {
    Principal {
        id: id.into(),
        roles: roles.iter().map(|s| s.to_string()).collect::<Vec<_>>().into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect::<Vec<_>>().into(),
    }
}

fn rule(id: &str, allow: bool) -> Rule {
    Rule {
        id: id.into(),
        allow,
        principals: vec![],
        roles: vec![],
        scopes: vec![],
        namespaces: vec![],
        tools: vec![],
        access: Access::Any,
    }
}

fn policy(rules: Vec<Rule>) -> Policy {
    Policy::new(Some(&PolicyConfig { rules, cedar: None }), HashMap::new()).unwrap()
}

#[test]
fn without_a_policy_table_everything_is_allowed_and_with_one_nothing_is_by_default() {
    let open = Policy::new(None, HashMap::new()).unwrap();
    assert!(!open.is_active());
    assert_eq!(open.decide(&principal("a", &[], &[]), &tool("gh", "x", None)).rule, "no-policy");
    let closed = policy(vec![]);
    assert_eq!(
        closed.decide(&principal("a", &[], &[]), &tool("gh", "x", None)),
        Decision { allowed: false, rule: "default-deny".into() }
    );
}

#[test]
fn rules_match_on_principal_role_scope_namespace_tool_and_access() {
    let p = policy(vec![
        Rule {
            roles: vec!["dev".into()],
            namespaces: vec!["gh".into()],
            access: Access::Read,
            ..rule("dev-reads-gh", true)
        },
        Rule { principals: vec!["ci".into()], tools: vec!["gh__merge".into()], ..rule("ci-merges", true) },
        Rule { scopes: vec!["tools:all".into()], ..rule("all-scope", true) },
    ]);
    let dev = principal("alice", &["dev"], &[]);
    assert!(p.decide(&dev, &tool("gh", "search", Some(true))).allowed, "read-only tool");
    assert!(!p.decide(&dev, &tool("gh", "merge", None)).allowed, "no readOnlyHint: a mutation");
    assert!(!p.decide(&dev, &tool("jira", "search", Some(true))).allowed, "other namespace");
    let ci = principal("ci", &[], &[]);
    assert_eq!(p.decide(&ci, &tool("gh", "merge", None)), Decision { allowed: true, rule: "ci-merges".into() });
    assert!(!p.decide(&ci, &tool("gh", "close", None)).allowed);
    assert!(p.decide(&principal("x", &[], &["tools:all"]), &tool("any", "thing", None)).allowed);
}

#[test]
fn deny_beats_allow_and_names_the_rule() {
    let p = policy(vec![
        rule("everyone", true),
        Rule { namespaces: vec!["prod".into()], access: Access::Mutation, ..rule("no-prod-writes", false) },
    ]);
    let anyone = principal("a", &["admin"], &[]);
    assert_eq!(
        p.decide(&anyone, &tool("prod", "drop", None)),
        Decision { allowed: false, rule: "no-prod-writes".into() }
    );
    assert!(p.decide(&anyone, &tool("prod", "read", Some(true))).allowed);
}

#[test]
fn the_operator_override_decides_read_vs_mutation() {
    let mut overrides = HashMap::new();
    overrides.insert("gh__search".to_string(), true);
    overrides.insert("gh__refresh".to_string(), false);
    let rules = PolicyConfig { rules: vec![Rule { access: Access::Read, ..rule("reads", true) }], cedar: None };
    let p = Policy::new(Some(&rules), overrides).unwrap();
    let a = principal("a", &[], &[]);
    assert!(!p.decide(&a, &tool("gh", "search", Some(true))).allowed, "override says mutating");
    assert!(p.decide(&a, &tool("gh", "refresh", None)).allowed, "override says read");
}

#[test]
fn cedar_files_join_the_rules_and_invalid_policies_fail_at_load() {
    let cedar = r#"forbid (principal, action, resource) when { resource.name like "*__delete*" };"#;
    let config = PolicyConfig { rules: vec![rule("everyone", true)], cedar: Some(("p.cedar".into(), cedar.into())) };
    let p = Policy::new(Some(&config), HashMap::new()).unwrap();
    let a = principal("a", &[], &[]);
    assert!(p.decide(&a, &tool("fs", "read", None)).allowed);
    assert!(!p.decide(&a, &tool("fs", "delete_file", None)).allowed);

    let typo = PolicyConfig {
        rules: vec![],
        cedar: Some(("p.cedar".into(), "forbid (principal, action, resource) when { resource.nmae == \"x\" };".into())),
    };
    let Err(e) = Policy::new(Some(&typo), HashMap::new()) else {
        panic!("a forbid on a missing attribute must not load")
    };
    assert!(e.contains("do not validate"), "{e}");
}

#[test]
fn names_with_quotes_cannot_break_out_of_a_rule() {
    let p = policy(vec![Rule { principals: vec!["a\" || true || \"".into()], ..rule("quoted", true) }]);
    assert!(!p.decide(&principal("b", &[], &[]), &tool("x", "y", None)).allowed);
    assert!(p.decide(&principal("a\" || true || \"", &[], &[]), &tool("x", "y", None)).allowed);
}
