//! Stage 1, authentication: who is calling. Static bearer tokens mapped to principals (compared
//! in constant time), Ed25519 JWTs from one issuer, or — for local development — nobody at all.
//! Never looks at the body: a caller without credentials learns nothing else.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use lru::LruCache;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{AuthConfig, InboundAuth, JwtConfig, PrincipalSpec};
use crate::error::GatewayError;

/// The authenticated caller. Everything downstream keys on this, never on a session id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub id: Arc<str>,
    pub roles: Arc<[String]>,
    pub scopes: Arc<[String]>,
}

impl Principal {
    pub fn new(id: &str) -> Self {
        Self { id: id.into(), roles: Arc::new([]), scopes: Arc::new([]) }
    }

    pub fn from_spec(spec: &PrincipalSpec) -> Self {
        Self { id: spec.id.as_str().into(), roles: spec.roles.clone().into(), scopes: spec.scopes.clone().into() }
    }
}

/// Why a credential was refused: for logs only (the wire says `unauthenticated`, nothing more).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("no credentials")]
    Missing,
    #[error("not a bearer credential")]
    NotBearer,
    #[error("unknown token")]
    UnknownToken,
    #[error("token larger than the configured bound")]
    TooLarge,
    #[error("JWT: {0}")]
    Jwt(String),
}

pub struct Authenticator {
    disabled: bool,
    /// SHA-256 of each accepted token: equal-length digests make the comparison length-blind.
    tokens: Vec<([u8; 32], Principal)>,
    jwt: Option<Jwt>,
}

struct Jwt {
    config: JwtConfig,
    keys: HashMap<String, DecodingKey>,
    validation: Validation,
    /// Tokens already verified, by SHA-256, with their expiry: agents send the same token on
    /// every call, and a signature check costs tens of microseconds.
    verified: Mutex<LruCache<[u8; 32], (Principal, i64)>>,
    /// Ids of configured principals (static tokens, stdio, `bearer`, `anonymous`): a token's
    /// `sub` may not claim one, or an identity provider's user could wear their rules.
    reserved: std::collections::HashSet<String>,
}

/// Verified tokens remembered (each until its own `exp`).
const VERIFIED_CACHE: usize = 4096;

impl Authenticator {
    pub fn new(inbound: &InboundAuth, auth: &AuthConfig) -> Self {
        let mut tokens: Vec<([u8; 32], Principal)> = auth
            .tokens
            .iter()
            .map(|t| (Sha256::digest(t.token.expose().as_bytes()).into(), Principal::from_spec(&t.principal)))
            .collect();
        if let InboundAuth::Bearer { token, .. } = inbound {
            tokens.push((Sha256::digest(token.expose().as_bytes()).into(), Principal::new("bearer")));
        }
        let jwt = auth.jwt.as_ref().map(|config| {
            let mut validation = Validation::new(Algorithm::EdDSA);
            validation.set_issuer(&[&config.issuer]);
            validation.set_audience(&[&config.audience]);
            validation.set_required_spec_claims(&["exp", "iss", "aud"]);
            validation.validate_nbf = true;
            validation.leeway = config.leeway.as_secs();
            let keys = config.keys.iter().cloned().collect();
            let verified = Mutex::new(LruCache::new(NonZeroUsize::new(VERIFIED_CACHE).unwrap_or(NonZeroUsize::MIN)));
            let mut reserved: std::collections::HashSet<String> =
                auth.tokens.iter().map(|t| t.principal.id.clone()).collect();
            reserved.extend(["bearer", "anonymous", "stdio"].map(String::from));
            reserved.insert(auth.stdio.id.clone());
            Jwt { config: config.clone(), keys, validation, verified, reserved }
        });
        Self { disabled: matches!(inbound, InboundAuth::Disabled { .. }), tokens, jwt }
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// Whether JWTs are accepted (the 401 then points at the protected-resource metadata).
    pub fn jwt(&self) -> Option<&JwtConfig> {
        self.jwt.as_ref().map(|j| &j.config)
    }

    /// `authorization` is the raw `Authorization` header value, if any.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, GatewayError> {
        if self.disabled {
            return Ok(Principal::new("anonymous"));
        }
        self.identify(authorization).map_err(|why| {
            tracing::debug!(reason = %why, "credentials refused");
            GatewayError::Unauthenticated
        })
    }

    fn identify(&self, authorization: Option<&[u8]>) -> Result<Principal, Refusal> {
        let header = authorization.ok_or(Refusal::Missing)?;
        let token = header
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case(b"bearer "))
            .map(|_| header[7..].trim_ascii())
            .filter(|t| !t.is_empty())
            .ok_or(Refusal::NotBearer)?;
        // Every static token is compared, so timing does not tell which one nearly matched.
        let presented: [u8; 32] = Sha256::digest(token).into();
        let mut found = None;
        for (digest, principal) in &self.tokens {
            if bool::from(presented.ct_eq(digest)) {
                found = Some(principal);
            }
        }
        if let Some(principal) = found {
            return Ok(principal.clone());
        }
        match &self.jwt {
            Some(jwt) if token.iter().filter(|b| **b == b'.').count() == 2 => jwt.verify_cached(token, presented),
            _ => Err(Refusal::UnknownToken),
        }
    }
}

impl Jwt {
    /// [`Jwt::verify`], remembering a success until the token's `exp` (minus nothing: the
    /// leeway only ever extends validity at the issuer's discretion, so it is not applied here).
    fn verify_cached(&self, token: &[u8], digest: [u8; 32]) -> Result<Principal, Refusal> {
        let now = now_secs();
        if let Some((principal, exp)) = self.verified.lock().expect("token cache poisoned").get(&digest) {
            if now < *exp {
                return Ok(principal.clone());
            }
        }
        let (principal, exp) = self.verify(token)?;
        self.verified.lock().expect("token cache poisoned").put(digest, (principal.clone(), exp));
        Ok(principal)
    }

    /// The principal and the token's `exp`.
    fn verify(&self, token: &[u8]) -> Result<(Principal, i64), Refusal> {
        // Bound the work an attacker can ask for before any parsing or crypto.
        if token.len() > self.config.max_token_bytes {
            return Err(Refusal::TooLarge);
        }
        let token = std::str::from_utf8(token).map_err(|_| Refusal::Jwt("not UTF-8".into()))?;
        let header = jsonwebtoken::decode_header(token).map_err(|e| Refusal::Jwt(format!("header: {e}")))?;
        // The algorithm is ours to choose, never the token's: EdDSA only.
        if header.alg != Algorithm::EdDSA {
            return Err(Refusal::Jwt(format!("algorithm {:?} not allowed", header.alg)));
        }
        let kid = header.kid.ok_or_else(|| Refusal::Jwt("no kid".into()))?;
        let key = self.keys.get(&kid).ok_or_else(|| Refusal::Jwt(format!("unknown kid {kid:?}")))?;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.validation)
            .map_err(|e| Refusal::Jwt(e.to_string()))?
            .claims;
        // jsonwebtoken does not check iat: a token issued in the future is refused here.
        let now = now_secs();
        let iat = claims.get("iat").and_then(Value::as_i64).ok_or_else(|| Refusal::Jwt("no iat".into()))?;
        if iat > now + self.config.leeway.as_secs() as i64 {
            return Err(Refusal::Jwt("issued in the future".into()));
        }
        let id = claims
            .get(&self.config.principal_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Refusal::Jwt(format!("no {} claim", self.config.principal_claim)))?;
        if self.reserved.contains(id) {
            return Err(Refusal::Jwt(format!("sub {id:?} names a configured principal")));
        }
        let exp = claims.get("exp").and_then(Value::as_i64).unwrap_or(now);
        let principal = Principal {
            id: id.into(),
            roles: strings(claims.get(&self.config.roles_claim)).into(),
            scopes: strings(claims.get(&self.config.scopes_claim)).into(),
        };
        Ok((principal, exp))
    }
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64
}

/// A claim that is a list of strings, or one space-separated string (OAuth `scope`).
fn strings(claim: Option<&Value>) -> Vec<String> {
    match claim {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
