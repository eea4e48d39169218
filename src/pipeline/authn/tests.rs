//! Static tokens and the JWT attack suite: every forged, stale, misdirected or malformed token
//! is refused, and only a well-formed EdDSA token from the configured issuer gets through.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;
use crate::config::{Secret, StaticToken};

const ISSUER_KEY: &[u8] = include_bytes!("../../../tests/it/fixtures/jwt-issuer.key.pem");
const ISSUER_PUB: &[u8] = include_bytes!("../../../tests/it/fixtures/jwt-issuer.pub.pem");
const OTHER_KEY: &[u8] = include_bytes!("../../../tests/it/fixtures/jwt-other.key.pem");

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn jwt_config() -> JwtConfig {
    JwtConfig {
        issuer: "https://idp.test".into(),
        audience: "gatehouse".into(),
        keys: vec![("k1".into(), DecodingKey::from_ed_pem(ISSUER_PUB).unwrap())],
        leeway: Duration::from_secs(30),
        max_token_bytes: 4096,
        principal_claim: "sub".into(),
        roles_claim: "roles".into(),
        scopes_claim: "scope".into(),
        authorization_servers: Vec::new(),
    }
}

fn authenticator() -> Authenticator {
    let auth = AuthConfig {
        tokens: vec![StaticToken {
            principal: PrincipalSpec { id: "ci-bot".into(), roles: vec!["reader".into()], scopes: vec![] },
            token: Secret::new("static-token-1".into()),
        }],
        jwt: Some(jwt_config()),
        ..AuthConfig::default()
    };
    Authenticator::new(&InboundAuth::Table, &auth)
}

fn good_claims() -> Value {
    json!({"iss": "https://idp.test", "aud": "gatehouse", "sub": "alice", "iat": now(), "exp": now() + 300,
           "roles": ["admin"], "scope": "tools:read tools:write"})
}

fn sign(claims: &Value, kid: Option<&str>, key: &[u8]) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = kid.map(str::to_string);
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ed_pem(key).unwrap()).unwrap()
}

fn refusal(auth: &Authenticator, token: &str) -> Refusal {
    let header = format!("Bearer {token}");
    auth.identify(Some(header.as_bytes())).expect_err("must be refused")
}

#[test]
fn a_valid_eddsa_token_yields_its_principal_roles_and_scopes() {
    let auth = authenticator();
    let header = format!("Bearer {}", sign(&good_claims(), Some("k1"), ISSUER_KEY));
    let p = auth.authenticate(Some(header.as_bytes())).unwrap();
    assert_eq!(&*p.id, "alice");
    assert_eq!(&*p.roles, ["admin"]);
    assert_eq!(&*p.scopes, ["tools:read", "tools:write"]);
}

#[test]
fn static_tokens_map_to_their_principals() {
    let auth = authenticator();
    let p = auth.authenticate(Some(b"Bearer static-token-1")).unwrap();
    assert_eq!((&*p.id, &*p.roles), ("ci-bot", &["reader".to_string()][..]));
    assert_eq!(refusal(&auth, "static-token-2"), Refusal::UnknownToken);
    assert_eq!(auth.identify(None), Err(Refusal::Missing));
    assert_eq!(auth.identify(Some(b"Basic static-token-1")), Err(Refusal::NotBearer));
    assert_eq!(auth.identify(Some(b"Bearer ")), Err(Refusal::NotBearer));
}

#[test]
fn alg_none_is_refused() {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT","kid":"k1"}"#);
    let claims = URL_SAFE_NO_PAD.encode(good_claims().to_string());
    assert!(matches!(refusal(&authenticator(), &format!("{header}.{claims}.")), Refusal::Jwt(_)));
}

#[test]
fn hs256_signed_with_the_public_key_as_secret_is_refused() {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let token = jsonwebtoken::encode(&header, &good_claims(), &EncodingKey::from_secret(ISSUER_PUB).unwrap()).unwrap();
    let Refusal::Jwt(why) = refusal(&authenticator(), &token) else { panic!() };
    assert!(why.contains("not allowed"), "{why}");
}

#[test]
fn unknown_or_missing_kid_and_a_foreign_signature_are_refused() {
    let auth = authenticator();
    assert!(
        matches!(refusal(&auth, &sign(&good_claims(), Some("k2"), ISSUER_KEY)), Refusal::Jwt(w) if w.contains("unknown kid"))
    );
    assert!(matches!(refusal(&auth, &sign(&good_claims(), None, ISSUER_KEY)), Refusal::Jwt(w) if w.contains("no kid")));
    assert!(matches!(refusal(&auth, &sign(&good_claims(), Some("k1"), OTHER_KEY)), Refusal::Jwt(_)));
}

#[test]
fn stale_future_and_misdirected_tokens_are_refused() {
    let auth = authenticator();
    let with = |patch: Value| {
        let mut claims = good_claims();
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                claims.as_object_mut().unwrap().remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        sign(&claims, Some("k1"), ISSUER_KEY)
    };
    for (case, patch) in [
        ("expired", json!({"exp": now() - 3600})),
        ("no exp", json!({"exp": null})),
        ("issued in the future", json!({"iat": now() + 3600})),
        ("no iat", json!({"iat": null})),
        ("not yet valid", json!({"nbf": now() + 3600})),
        ("wrong audience", json!({"aud": "someone-else"})),
        ("wrong issuer", json!({"iss": "https://evil.test"})),
        ("no subject", json!({"sub": null})),
    ] {
        assert!(matches!(refusal(&auth, &with(patch)), Refusal::Jwt(_)), "{case}");
    }
    // Within the leeway is fine.
    assert!(auth.identify(Some(format!("Bearer {}", with(json!({"iat": now() + 10}))).as_bytes())).is_ok());
}

#[test]
fn oversized_and_garbage_tokens_are_refused_before_any_crypto() {
    let auth = authenticator();
    let mut big = good_claims();
    big["pad"] = json!("x".repeat(5000));
    assert_eq!(refusal(&auth, &sign(&big, Some("k1"), ISSUER_KEY)), Refusal::TooLarge);
    for garbage in ["a.b.c", "..", "eyJ.eyJ.", "%%%.%%%.%%%", "eyJhbGciOiJFZERTQSJ9.bm90IGpzb24.c2ln"] {
        assert!(matches!(refusal(&auth, garbage), Refusal::Jwt(_)), "{garbage}");
    }
    assert!(matches!(auth.identify(Some(b"Bearer \xff\xfe.\xfd.\xfc")), Err(Refusal::Jwt(_))));
}

#[test]
fn a_token_cannot_claim_a_configured_principal() {
    let auth = authenticator();
    for sub in ["ci-bot", "bearer", "stdio", "anonymous"] {
        let mut claims = good_claims();
        claims["sub"] = json!(sub);
        assert!(
            matches!(refusal(&auth, &sign(&claims, Some("k1"), ISSUER_KEY)), Refusal::Jwt(w) if w.contains("configured principal")),
            "{sub}"
        );
    }
}

#[test]
fn disabled_auth_yields_the_anonymous_principal() {
    let auth = Authenticator::new(&InboundAuth::Disabled { allow_remote: false }, &AuthConfig::default());
    assert_eq!(auth.authenticate(None).unwrap().id.as_ref(), "anonymous");
}
