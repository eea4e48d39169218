//! Authentication end to end: static tokens mapped to principals, Ed25519 JWTs verified against
//! a key file, 401s that point at the OAuth protected-resource metadata, and the principal that
//! reaches the audit log.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/fixtures");

fn jwt(claims: Value) -> String {
    let key = std::fs::read(format!("{FIXTURES}/jwt-issuer.key.pem")).unwrap();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ed_pem(&key).unwrap()).unwrap()
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn claims(sub: &str, exp_in: i64) -> Value {
    json!({"iss": "https://idp.test", "aud": "gatehouse", "sub": sub, "iat": now(), "exp": now() + exp_in, "roles": ["dev"]})
}

async fn gateway(store: &std::path::Path) -> (FakeUpstream, TestGateway, String) {
    let up = FakeUpstream::new().echo_tool("echo").start().await;
    let config = format!(
        "[gateway]\n[store]\nurl = \"sqlite://{}/gh.db\"\n\
         [[auth.tokens]]\nprincipal = \"ci-bot\"\ntoken_env = \"CI_TOKEN\"\nroles = [\"reader\"]\n\
         [auth.jwt]\nissuer = \"https://idp.test\"\naudience = \"gatehouse\"\nauthorization_servers = [\"https://idp.test\"]\n\
         keys = [{{ kid = \"k1\", file = \"{FIXTURES}/jwt-issuer.pub.pem\" }}]\n{}",
        store.display(),
        upstream_block("fake", &up.url())
    );
    let gw = TestGateway::start_with_env(&config, &[("CI_TOKEN", "ci-token-8f2")]).await;
    (up, gw, config)
}

#[tokio::test]
async fn tokens_and_jwts_become_principals_and_a_401_points_at_the_metadata() {
    let store = tempfile::tempdir().unwrap();
    let (up, mut gw, config) = gateway(store.path()).await;

    // No credentials: 401 with a challenge naming the protected-resource metadata.
    let reply = Legacy::new(&gw.url)
        .post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}))
        .await;
    assert_eq!(reply.status, 401);
    let challenge = reply.header("www-authenticate").unwrap().to_string();
    let metadata_url = challenge.split("resource_metadata=\"").nth(1).and_then(|r| r.split('"').next()).unwrap();
    assert!(metadata_url.ends_with("/.well-known/oauth-protected-resource/mcp"), "{challenge}");
    let metadata: Value =
        serde_json::from_str(&http_client().get(metadata_url).send().await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(metadata["resource"], gw.url);
    assert_eq!(metadata["authorization_servers"], json!(["https://idp.test"]));

    // A static token and a JWT each get in, as their own principal.
    let mut bot = Legacy::new(&gw.url).with_token("ci-token-8f2");
    bot.initialize().await;
    assert!(bot.call_tool("fake__echo", json!({"message": "1"})).await.get("result").is_some());
    let mut alice = Legacy::new(&gw.url).with_token(&jwt(claims("alice", 300)));
    alice.initialize().await;
    assert!(alice.call_tool("fake__echo", json!({"message": "2"})).await.get("result").is_some());
    // `gatehouse token` issues what the gateway accepts.
    let minted = std::process::Command::new(BIN)
        .args(["token", "--key", &format!("{FIXTURES}/jwt-issuer.key.pem"), "--kid", "k1"])
        .args(["--issuer", "https://idp.test", "--audience", "gatehouse", "--subject", "carol", "--role", "dev"])
        .output()
        .unwrap();
    assert!(minted.status.success(), "{}", String::from_utf8_lossy(&minted.stderr));
    let mut carol = Legacy::new(&gw.url).with_token(String::from_utf8_lossy(&minted.stdout).trim());
    carol.initialize().await;

    // Expired, or signed by another key: refused, and nothing reaches the upstream.
    let calls = up.hit_count("tools/call");
    for token in [jwt(claims("mallory", -120)), jwt(claims("mallory", 300)).replace('.', "x.")] {
        let reply = Legacy::new(&gw.url).with_token(&token).post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "fake__echo", "arguments": {}}})).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
    assert_eq!(up.hit_count("tools/call"), calls);

    // The audit log knows who called.
    gw.terminate().await;
    let path = store.path().join("gatehouse.toml");
    std::fs::write(&path, &config).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["audit", "--json", "--config"])
        .arg(&path)
        .env("CI_TOKEN", "x")
        .output()
        .unwrap();
    let principals: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["principal"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(principals, ["alice", "ci-bot"], "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn a_bad_key_file_is_a_config_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(
        &path,
        format!(
            "[gateway]\n[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\nkeys = [{{ kid = \"k1\", file = \"{FIXTURES}/README.md\" }}, {{ file = \"{FIXTURES}/jwt-issuer.pub.pem\" }}]\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(BIN).arg("check").arg("--config").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("auth.jwt.keys[0].file: neither PEM, JWK nor JWK Set"), "{err}");
    assert!(err.contains("auth.jwt.keys[1].file: a PEM key needs kid"), "{err}");
}
