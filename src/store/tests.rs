//! One contract suite, run on SQLite always and on PostgreSQL when `TEST_DATABASE_URL` is set
//! (`.ci/run` sets it), each run in its own fresh schema.

use super::*;

async fn sqlite() -> Store {
    Store::open("sqlite::memory:").await.expect("in-memory sqlite")
}

/// A store in a new PostgreSQL schema, dropped by the caller through the returned guard name.
async fn postgres() -> Option<(Store, String, String)> {
    let Ok(url) = std::env::var("TEST_DATABASE_URL") else {
        eprintln!("store: TEST_DATABASE_URL not set; the PostgreSQL half of the suite is skipped");
        return None;
    };
    let schema = format!("gatehouse_test_{}", hex::encode(rand::random::<[u8; 6]>()));
    let admin = PgPool::connect(&url).await.expect("TEST_DATABASE_URL reachable");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    let scoped = format!("{url}{separator}options=-c%20search_path%3D{schema}");
    Some((Store::open(&scoped).await.expect("postgres store"), url, schema))
}

async fn drop_schema(url: &str, schema: &str) {
    let admin = PgPool::connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await.unwrap();
}

fn contract(tool: &str, fingerprint: &str) -> Contract {
    Contract {
        namespace: "ns".into(),
        tool: tool.into(),
        exposed: format!("ns__{tool}"),
        version: "1.0.0".into(),
        fingerprint: fingerprint.into(),
        definition: format!("{{\"name\":\"{tool}\"}}"),
        drift: None,
        pinned_ms: 1_000,
        updated_ms: 1_000,
    }
}

fn event(at_ms: i64, principal: &str, tool: &str, outcome: &str) -> AuditEvent {
    AuditEvent {
        at_ms,
        principal: principal.into(),
        tool: tool.into(),
        contract_version: Some("1.0.0".into()),
        fingerprint: Some("f".into()),
        decision: if outcome == "forbidden" { "deny" } else { "allow" }.into(),
        rule: None,
        outcome: outcome.into(),
        latency_us: 42,
        args_hash: Some("a".into()),
        trace_id: None,
    }
}

async fn contracts_suite(store: &Store) {
    assert!(store.pin(&contract("echo", "f1")).await.unwrap());
    assert!(!store.pin(&contract("echo", "other")).await.unwrap(), "the first pin stands");
    store.pin(&contract("add", "f2")).await.unwrap();
    let all = store.contracts().await.unwrap();
    assert_eq!(all.iter().map(|c| c.exposed.as_str()).collect::<Vec<_>>(), ["ns__add", "ns__echo"]);
    assert_eq!(store.contract("ns__echo").await.unwrap().unwrap(), contract("echo", "f1"));
    assert!(store.contract("ns__nope").await.unwrap().is_none());

    let drift = Drift { fingerprint: "f1b".into(), definition: "{\"name\":\"echo\",\"x\":1}".into() };
    store.record_drift("ns", "echo", &drift, 2_000).await.unwrap();
    let drifted = store.contract("ns__echo").await.unwrap().unwrap();
    assert_eq!((drifted.fingerprint.as_str(), drifted.drift.as_ref()), ("f1", Some(&drift)));
    assert_eq!(store.contracts_changed_ms().await.unwrap(), 2_000);
    // The same drift again is not a change.
    store.record_drift("ns", "echo", &drift, 3_000).await.unwrap();
    assert_eq!(store.contracts_changed_ms().await.unwrap(), 2_000);

    assert!(store.repin(("ns", "echo"), "2.0.0", &drift, 4_000).await.unwrap());
    let approved = store.contract("ns__echo").await.unwrap().unwrap();
    assert_eq!((approved.version.as_str(), approved.fingerprint.as_str(), approved.drift), ("2.0.0", "f1b", None));
    assert!(!store.repin(("ns", "nope"), "2.0.0", &drift, 4_000).await.unwrap());
    store.rename("ns", "echo", "echo").await.unwrap();
    assert_eq!(store.contract_of("ns", "echo").await.unwrap().unwrap().exposed, "echo");
    assert!(store.contract("ns__echo").await.unwrap().is_none());
}

async fn audit_suite(store: &Store) {
    store
        .append_audit(&[
            event(10, "alice", "ns__echo", "ok"),
            event(20, "bob", "ns__echo", "forbidden"),
            event(30, "alice", "ns__add", "invalid_arguments"),
        ])
        .await
        .unwrap();
    let all = store.audit(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    assert_eq!(all.iter().map(|e| e.at_ms).collect::<Vec<_>>(), [30, 20, 10], "newest first");
    assert_eq!(all[2], event(10, "alice", "ns__echo", "ok"), "round-trips every field");
    let alice = AuditQuery { principal: Some("alice".into()), limit: 10, ..AuditQuery::default() };
    assert_eq!(store.audit(&alice).await.unwrap().len(), 2);
    let q =
        AuditQuery { tool: Some("ns__echo".into()), outcome: Some("ok".into()), limit: 10, ..AuditQuery::default() };
    assert_eq!(store.audit(&q).await.unwrap().len(), 1);
    let since = AuditQuery { since_ms: Some(20), limit: 10, ..AuditQuery::default() };
    assert_eq!(store.audit(&since).await.unwrap().len(), 2);
    assert_eq!(store.audit(&AuditQuery { limit: 1, ..AuditQuery::default() }).await.unwrap().len(), 1);
}

async fn embeddings_suite(store: &Store) {
    let a = (vec![1u8; 32], 1.5f32.to_le_bytes().to_vec());
    let b = (vec![2u8; 32], 2.5f32.to_le_bytes().to_vec());
    store.put_embeddings("m1", &[a.clone(), b.clone()]).await.unwrap();
    store.put_embeddings("m1", &[(a.0.clone(), vec![0; 4])]).await.unwrap(); // the first vector stays
    store.put_embeddings("m2", &[a.clone()]).await.unwrap();
    let mut m1 = store.embeddings("m1").await.unwrap();
    m1.sort();
    assert_eq!(m1, [a, b]);
    assert_eq!(store.embeddings("m2").await.unwrap().len(), 1, "per model");
    assert!(store.embeddings("m3").await.unwrap().is_empty());
}

async fn secrets_suite(store: &Store) {
    let first = store.secret("k").await.unwrap();
    assert_eq!(first.len(), 32);
    assert_eq!(store.secret("k").await.unwrap(), first, "created once, then the same");
    assert_ne!(store.secret("other").await.unwrap(), first);
}

#[tokio::test]
async fn secrets_on_sqlite() {
    secrets_suite(&sqlite().await).await;
}

#[tokio::test]
async fn embeddings_on_sqlite() {
    embeddings_suite(&sqlite().await).await;
}

#[tokio::test]
async fn contracts_on_sqlite() {
    contracts_suite(&sqlite().await).await;
}

#[tokio::test]
async fn audit_on_sqlite() {
    audit_suite(&sqlite().await).await;
}

#[tokio::test]
async fn contracts_and_audit_on_postgres() {
    let Some((store, url, schema)) = postgres().await else { return };
    contracts_suite(&store).await;
    audit_suite(&store).await;
    embeddings_suite(&store).await;
    secrets_suite(&store).await;
    drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn a_file_store_keeps_its_state_across_opens_and_migrations_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
    Store::open(&url).await.unwrap().pin(&contract("echo", "f1")).await.unwrap();
    let reopened = Store::open(&url).await.unwrap();
    assert_eq!(reopened.contracts().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_bad_url_is_a_clear_error() {
    let Err(e) = Store::open("mysql://x").await else { panic!("accepted mysql") };
    assert!(e.to_string().contains("expected sqlite://PATH"), "{e}");
}
