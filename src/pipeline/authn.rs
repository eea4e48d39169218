//! Stage 1, authentication: who is calling. Today a static bearer token (compared in constant
//! time) or, for local development, nobody at all.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::InboundAuth;
use crate::error::GatewayError;

/// The authenticated caller. Everything downstream keys on this, never on a session id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub id: Arc<str>,
}

impl Principal {
    pub fn new(id: &str) -> Self {
        Self { id: id.into() }
    }
}

pub struct Authenticator {
    /// SHA-256 of the expected token: equal-length digests make the comparison length-blind.
    expected: Option<[u8; 32]>,
}

impl Authenticator {
    pub fn new(auth: &InboundAuth) -> Self {
        let expected = match auth {
            InboundAuth::Disabled { .. } => None,
            InboundAuth::Bearer { token, .. } => Some(Sha256::digest(token.expose().as_bytes()).into()),
        };
        Self { expected }
    }

    pub fn is_disabled(&self) -> bool {
        self.expected.is_none()
    }

    /// `authorization` is the raw `Authorization` header value, if any.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, GatewayError> {
        let Some(expected) = &self.expected else {
            return Ok(Principal::new("anonymous"));
        };
        let token = authorization
            .and_then(|h| h.get(..7).filter(|p| p.eq_ignore_ascii_case(b"bearer ")).map(|_| &h[7..]))
            .ok_or(GatewayError::Unauthenticated)?;
        let presented: [u8; 32] = Sha256::digest(token.trim_ascii()).into();
        if bool::from(presented.ct_eq(expected)) {
            Ok(Principal::new("bearer"))
        } else {
            Err(GatewayError::Unauthenticated)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn bearer(token: &str) -> Authenticator {
        Authenticator::new(&InboundAuth::Bearer { env: "T".into(), token: Secret::new(token.into()) })
    }

    #[test]
    fn accepts_the_configured_token_case_insensitive_scheme() {
        let auth = bearer("s3cret");
        assert!(auth.authenticate(Some(b"Bearer s3cret")).is_ok());
        assert!(auth.authenticate(Some(b"bearer s3cret")).is_ok());
    }

    #[test]
    fn rejects_missing_wrong_and_malformed_credentials() {
        let auth = bearer("s3cret");
        for bad in [None, Some(&b"Bearer s3cre"[..]), Some(b"Basic s3cret"), Some(b"s3cret"), Some(b"Bearer")] {
            assert!(matches!(auth.authenticate(bad), Err(GatewayError::Unauthenticated)), "{bad:?}");
        }
    }

    #[test]
    fn disabled_auth_yields_the_anonymous_principal() {
        let auth = Authenticator::new(&InboundAuth::Disabled { allow_remote: false });
        assert_eq!(auth.authenticate(None).unwrap().id.as_ref(), "anonymous");
    }
}
