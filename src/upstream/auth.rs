//! Upstream credentials: a bearer token from the environment (read once at load) or from a token
//! file re-read on every (re)connect and after a 401, so externally renewed tokens apply.
//!
//! Each upstream has its own credential; the agent's token is never forwarded.

use std::path::PathBuf;

use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::UpstreamError;
use crate::config::UpstreamAuth;

/// Puts a credential on a request: `Authorization: Bearer …`, and the raw token again as
/// `X-Auth-Token` (Bamboo/PanDA servers read that one).
pub fn insert_credential(headers: &mut HeaderMap, auth: &HeaderValue) {
    headers.insert(header::AUTHORIZATION, auth.clone());
    if let Some(raw) = auth.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) {
        if let Ok(mut v) = HeaderValue::from_str(raw) {
            v.set_sensitive(true);
            headers.insert(HeaderName::from_static("x-auth-token"), v);
        }
    }
}

#[derive(Debug, Clone)]
pub enum TokenSource {
    None,
    Static(HeaderValue),
    File(PathBuf),
}

impl TokenSource {
    pub fn from_config(auth: &UpstreamAuth) -> Result<Self, String> {
        Ok(match auth {
            UpstreamAuth::None => Self::None,
            UpstreamAuth::Bearer { env, token } => Self::Static(
                bearer_value(token.expose())
                    .map_err(|_| format!("{env} holds characters not allowed in an HTTP header"))?,
            ),
            UpstreamAuth::TokenFile(path) => Self::File(path.clone()),
        })
    }

    /// The current `Bearer …` header value, reading the token file if there is one.
    pub async fn current(&self) -> Result<Option<HeaderValue>, UpstreamError> {
        match self {
            Self::None => Ok(None),
            Self::Static(v) => Ok(Some(v.clone())),
            Self::File(path) => {
                let fail = |reason: String| UpstreamError::TokenFile { path: path.display().to_string(), reason };
                let text = tokio::fs::read_to_string(path).await.map_err(|e| fail(e.kind().to_string()))?;
                let token = token_from_file_text(&text).ok_or_else(|| fail("no token in file".into()))?;
                bearer_value(&token).map(Some).map_err(|_| fail("token is not a valid header value".into()))
            }
        }
    }
}

/// A JSON token cache (`{"id_token": …}`, as `get-panda-token` writes) or a plain-text token.
pub fn token_from_file_text(text: &str) -> Option<String> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(trimmed).ok()?;
        return v.get("id_token").and_then(|t| t.as_str()).map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
    }
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

fn bearer_value(token: &str) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}"))?;
    v.set_sensitive(true);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_id_token_from_a_json_cache_and_plain_text_otherwise() {
        assert_eq!(token_from_file_text(r#"{"id_token": "abc", "refresh_token": "r"}"#).as_deref(), Some("abc"));
        assert_eq!(token_from_file_text("  plain-token\n").as_deref(), Some("plain-token"));
        assert_eq!(token_from_file_text(r#"{"access_token": "x"}"#), None);
        assert_eq!(token_from_file_text("\n"), None);
    }
}
