//! Authorization end to end: default deny, allow rules by role/namespace/access, deny rules
//! that win, listings filtered by the same decision, a forbidden tool answering exactly like an
//! unknown one, denials audited with the deciding rule, and `gatehouse policy check`.

use serde_json::{Value, json};

use crate::support::*;

fn tool(name: &str, read_only: Option<bool>) -> Value {
    let mut def = json!({"name": name, "description": format!("The {name} tool."), "inputSchema": {"type": "object"}});
    if let Some(r) = read_only {
        def["annotations"] = json!({"readOnlyHint": r});
    }
    def
}

async fn gateway(store: &std::path::Path) -> (FakeUpstream, TestGateway, String) {
    let up = FakeUpstream::new()
        .tool_def(tool("search", Some(true)), echo())
        .tool_def(tool("danger", Some(true)), echo())
        .tool_def(tool("write", None), echo())
        .start()
        .await;
    let config = format!(
        "[gateway]\n[gating]\nenabled = false\n[store]\nurl = \"sqlite://{}/gh.db\"\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE\"\nroles = [\"dev\"]\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB\"\n\
         [[policy.rules]]\nid = \"devs-read-fake\"\neffect = \"allow\"\nroles = [\"dev\"]\nnamespaces = [\"fake\"]\naccess = \"read\"\n\
         [[policy.rules]]\nid = \"no-danger\"\neffect = \"deny\"\ntools = [\"fake__danger\"]\n{}",
        store.display(),
        upstream_block("fake", &up.url())
    );
    let gw = TestGateway::start_with_env(&config, &[("ALICE", "alice-tok"), ("BOB", "bob-tok")]).await;
    (up, gw, config)
}

async fn client(gw: &TestGateway, token: &str) -> Legacy {
    let mut client = Legacy::new(&gw.url).with_token(token);
    client.initialize().await;
    client
}

fn catalog_names(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| !n.starts_with("gateway__")).collect()
}

#[tokio::test]
async fn default_deny_allow_rules_deny_wins_and_forbidden_looks_unknown() {
    let store = tempfile::tempdir().unwrap();
    let (up, mut gw, config) = gateway(store.path()).await;
    let alice = client(&gw, "alice-tok").await;
    let bob = client(&gw, "bob-tok").await;
    let mut names = Vec::new();
    for _ in 0..100 {
        names = catalog_names(alice.tool_names().await);
        if !names.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(names, ["fake__search"], "read-only, allowed, not denied");
    assert!(catalog_names(bob.tool_names().await).is_empty(), "no rule for bob: default deny");

    assert!(alice.call_tool("fake__search", json!({})).await.get("result").is_some());
    // Forbidden (a mutation; denied by name; no rule at all) answers exactly like unknown.
    for (client, name) in [(&alice, "fake__write"), (&alice, "fake__danger"), (&bob, "fake__search")] {
        let forbidden = client.call_tool(name, json!({})).await;
        let unknown = client.call_tool("fake__nosuch", json!({})).await;
        let expected = serde_json::to_string(&unknown["error"]).unwrap().replace("fake__nosuch", name);
        assert_eq!(serde_json::to_string(&forbidden["error"]).unwrap(), expected, "{name}");
    }
    assert_eq!(up.hit_count("tools/call"), 1, "denied calls never reach the upstream");

    gw.terminate().await;
    let path = store.path().join("gatehouse.toml");
    std::fs::write(&path, &config).unwrap();
    // Off the test's runtime thread: `policy check` loads the catalog from the fake upstream,
    // which this runtime serves.
    let run = |args: &[&str]| {
        let (args, path): (Vec<String>, _) = (args.iter().map(|s| s.to_string()).collect(), path.clone());
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(BIN)
                .args(&args)
                .arg("--config")
                .arg(&path)
                .env("ALICE", "x")
                .env("BOB", "y")
                .output()
                .unwrap();
            (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
        })
    };
    let (audit, _) = run(&["audit", "--json"]).await.unwrap();
    let events: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let decisions: Vec<(&str, &str, &str)> = events
        .iter()
        .filter(|e| e["tool"] != "fake__nosuch")
        .map(|e| (e["tool"].as_str().unwrap(), e["decision"].as_str().unwrap(), e["rule"].as_str().unwrap()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("fake__search", "deny", "default-deny"),
            ("fake__danger", "deny", "no-danger"),
            ("fake__write", "deny", "default-deny"),
            ("fake__search", "allow", "devs-read-fake"),
        ]
    );

    let (explained, err) =
        run(&["policy", "check", "--principal", "alice", "--role", "dev", "--tool", "fake__danger"]).await.unwrap();
    assert!(
        explained.contains("DENY: alice may not call fake__danger") && explained.contains("decided by: no-danger"),
        "{explained}{err}"
    );
    let (explained, _) =
        run(&["policy", "check", "--principal", "carol", "--role", "dev", "--tool", "fake__search"]).await.unwrap();
    assert!(explained.contains("ALLOW") && explained.contains("by its readOnlyHint"), "{explained}");
}

#[tokio::test]
async fn an_invalid_policy_is_refused_at_check_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cedar = dir.path().join("p.cedar");
    std::fs::write(&cedar, "forbid (principal, action, resource) when { resource.nmae == \"x\" };").unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, format!("[gateway]\nauth_disabled = true\n[policy]\ncedar_file = \"{}\"\n", cedar.display()))
        .unwrap();
    let out = std::process::Command::new(BIN).arg("check").arg("--config").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("invalid policy") && err.contains("nmae"), "{err}");
}

/// DESIGN §5's order pins: no credentials beats everything else, whatever the body says.
#[tokio::test]
async fn unauthenticated_beats_unknown_tools_and_invalid_arguments() {
    let store = tempfile::tempdir().unwrap();
    let (up, gw, _) = gateway(store.path()).await;
    let anonymous = Legacy::new(&gw.url);
    for (name, arguments) in
        [("fake__search", json!("not an object")), ("fake__nosuch", json!({})), ("fake__write", json!({}))]
    {
        let reply = anonymous
            .post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}))
            .await;
        assert_eq!(reply.status, 401, "{name}: {}", reply.body);
        assert_eq!(reply.json()["error"]["data"]["_meta"]["gatehouse/error"], "unauthenticated");
    }
    assert_eq!(up.hit_count("tools/call"), 0);
}
