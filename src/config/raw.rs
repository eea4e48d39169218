//! The serde image of the TOML file: every key the file may hold, unknown keys rejected, spans
//! kept on values that later validation may complain about.

use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::{ConfigError, DriftPolicy, LogFormat, PrefixMode, SessionMode};

/// A value with its byte span in the file, for error lines.
#[derive(Debug, Clone)]
pub struct Sp<T> {
    pub value: T,
    pub span: Range<usize>,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sp<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = toml::Spanned::<T>::deserialize(d)?;
        Ok(Sp { span: spanned.span(), value: spanned.into_inner() })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub gateway: Option<RawGateway>,
    pub upstreams: Option<Vec<RawUpstream>>,
    /// `[ranking]` is the newer name; `[rag]` is what routing-seed configs say.
    #[serde(alias = "ranking")]
    pub rag: Option<RawRag>,
    pub gating: Option<RawGating>,
    pub embedding: Option<RawEmbedding>,
    pub store: Option<RawStore>,
    pub auth: Option<RawAuth>,
    pub policy: Option<RawPolicy>,
    pub contracts: Option<Vec<RawContract>>,
    /// Per-tool overrides by exposed name: `[tools."ns__name"]`.
    pub tools: Option<BTreeMap<String, RawToolOverride>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawContract {
    pub namespace: Sp<String>,
    /// The upstream's own tool name.
    pub tool: Sp<String>,
    pub version: Sp<String>,
    pub fingerprint: Sp<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub rules: Option<Vec<RawRule>>,
    /// Extra policies in Cedar syntax, validated against Gatehouse's schema.
    pub cedar_file: Option<Sp<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub id: Option<Sp<String>>,
    pub effect: Sp<String>,
    pub principals: Option<Vec<String>>,
    pub roles: Option<Vec<String>>,
    pub scopes: Option<Vec<String>>,
    pub namespaces: Option<Vec<String>>,
    pub tools: Option<Vec<String>>,
    pub access: Option<Sp<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolOverride {
    pub mutating: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub tokens: Option<Vec<RawToken>>,
    pub jwt: Option<RawJwt>,
    pub stdio: Option<RawStdioAuth>,
    /// The public URL of the MCP endpoint, for OAuth protected-resource metadata.
    pub resource: Option<Sp<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    pub principal: Sp<String>,
    pub token_env: Sp<String>,
    pub roles: Option<Vec<String>>,
    pub scopes: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwt {
    pub issuer: Sp<String>,
    pub audience: Sp<String>,
    pub keys: Vec<RawJwtKey>,
    pub leeway: Option<Sp<RawDuration>>,
    pub max_token_bytes: Option<usize>,
    pub principal_claim: Option<String>,
    pub roles_claim: Option<String>,
    pub scopes_claim: Option<String>,
    pub authorization_servers: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJwtKey {
    /// Required for a PEM file; a JWK or JWK Set names its own.
    pub kid: Option<Sp<String>>,
    pub file: Sp<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStdioAuth {
    pub principal: Sp<String>,
    pub roles: Option<Vec<String>>,
    pub scopes: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    pub url: Option<Sp<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmbedding {
    pub provider: Option<Sp<String>>,
    pub model_dir: Option<String>,
    pub base_url: Option<Sp<String>>,
    pub model: Option<Sp<String>>,
    pub api_key_env: Option<Sp<String>>,
    pub timeout: Option<Sp<RawDuration>>,
    pub query_cache: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGating {
    pub enabled: Option<bool>,
    pub tail_k: Option<usize>,
    pub session_tail_max: Option<usize>,
    pub pin: Option<Vec<String>>,
    pub floor: Option<Sp<f64>>,
    pub max_conversations: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGateway {
    pub host: Option<Sp<String>>,
    pub port: Option<u16>,
    pub path: Option<Sp<String>>,
    pub bearer_token_env: Option<Sp<String>>,
    pub auth_disabled: Option<bool>,
    pub allow_unauthenticated_remote: Option<bool>,
    pub separator: Option<Sp<String>>,
    pub prefix_mode: Option<PrefixMode>,
    pub allowed_origins: Option<Vec<Sp<String>>>,
    pub allowed_hosts: Option<Vec<Sp<String>>>,
    pub manifest_ttl: Option<Sp<RawDuration>>,
    pub max_body_bytes: Option<usize>,
    pub max_response_bytes: Option<usize>,
    pub session_idle_timeout: Option<Sp<RawDuration>>,
    pub max_sessions: Option<usize>,
    pub cold_start_wait: Option<Sp<RawDuration>>,
    pub instructions: Option<String>,
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub namespace: Sp<String>,
    pub url: Option<Sp<String>>,
    pub command: Option<Sp<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub env_passthrough: Option<Vec<Sp<String>>>,
    pub cwd: Option<String>,
    pub session: Option<SessionMode>,
    pub drift: Option<DriftPolicy>,
    pub use_sse: Option<Sp<bool>>,
    pub bearer_token_env: Option<Sp<String>>,
    pub token_file: Option<Sp<String>>,
    pub origin: Option<Sp<String>>,
    pub tls_verify: Option<bool>,
    pub ca_bundle_env: Option<Sp<String>>,
    pub headers: Option<BTreeMap<String, Sp<String>>>,
    pub timeout: Option<Sp<RawDuration>>,
    pub ping_interval: Option<Sp<RawDuration>>,
    pub probe_interval: Option<Sp<RawDuration>>,
    pub pin: Option<Vec<String>>,
    pub expose_versions: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRag {
    pub enabled: Option<bool>,
    pub persist_dir: Option<String>,
}

impl<'de> Deserialize<'de> for PrefixMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "always" => Ok(Self::Always),
            "conditional" => Ok(Self::Conditional),
            "never" => Ok(Self::Never),
            other => Err(serde::de::Error::custom(format!(
                "expected \"always\", \"conditional\" or \"never\", got {other:?}"
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for SessionMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "shared" => Ok(Self::Shared),
            "per_client" => Ok(Self::PerClient),
            other => Err(serde::de::Error::custom(format!("expected \"shared\" or \"per_client\", got {other:?}"))),
        }
    }
}

impl<'de> Deserialize<'de> for DriftPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "quarantine" => Ok(Self::Quarantine),
            "warn" => Ok(Self::Warn),
            "accept" => Ok(Self::Accept),
            other => {
                Err(serde::de::Error::custom(format!("expected \"quarantine\", \"warn\" or \"accept\", got {other:?}")))
            }
        }
    }
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(serde::de::Error::custom(format!("expected \"text\" or \"json\", got {other:?}"))),
        }
    }
}

/// `"30s"`, `"12m"`, `"500ms"`, `"1h"`, or a bare integer meaning seconds.
#[derive(Debug, Clone)]
pub enum RawDuration {
    Seconds(u64),
    Text(String),
}

/// Not `#[serde(untagged)]`: its "data did not match any variant" error says nothing useful.
impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = RawDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"500ms\", \"30s\", \"12m\" or \"1h\", or whole seconds")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<RawDuration, E> {
                Ok(RawDuration::Seconds(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<RawDuration, E> {
                u64::try_from(n)
                    .map(RawDuration::Seconds)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(n), &self))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(s.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl RawDuration {
    pub fn to_duration(&self) -> Result<Duration, String> {
        let text = match self {
            Self::Seconds(s) => return Ok(Duration::from_secs(*s)),
            Self::Text(t) => t.trim(),
        };
        let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let expected = || format!("expected a duration such as \"500ms\", \"30s\", \"12m\" or \"1h\", got {text:?}");
        let number: f64 = number.parse().map_err(|_| expected())?;
        let scale = match unit.trim() {
            "ms" => 0.001,
            "s" | "" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(expected()),
        };
        Duration::try_from_secs_f64(number * scale).map_err(|_| expected())
    }
}

/// The field name `serde_spanned` deserialises a spanned value through (crate-private there).
const SPANNED_VALUE_SEGMENT: &str = ".$__serde_spanned_private_value";

impl RawConfig {
    /// Parses TOML, reporting the failing key path (`upstreams[1].url`) and line.
    pub fn parse(text: &str) -> Result<RawConfig, ConfigError> {
        let de = toml::de::Deserializer::parse(text).map_err(|e| toml_error(text, "(file)".into(), &e))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            // `Sp<T>` goes through `toml::Spanned`, whose private field would otherwise show up
            // in the path (`upstreams[0].origin.$__serde_spanned_private_value`).
            let path = e.path().to_string().replace(SPANNED_VALUE_SEGMENT, "");
            let path = if path == "." { "(top level)".into() } else { path };
            toml_error(text, path, e.inner())
        })
    }
}

fn toml_error(text: &str, path: String, e: &toml::de::Error) -> ConfigError {
    let line = e.span().map(|s| super::line_of(text, s.start));
    ConfigError { path, line, message: e.message().trim().to_string() }
}
