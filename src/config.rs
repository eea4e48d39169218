//! Configuration: the TOML image (`RawConfig`, a faithful serde mirror with spans) validated into
//! `Config` (typed, defaults resolved, secrets read, no `Option` left where a value is needed).
//!
//! Every error names the key path and line and says what was expected. The environment is read
//! through an injected [`Env`], so tests never touch the process environment.

mod raw;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use reqwest::Url;

pub use raw::RawConfig;
use raw::{
    RawAuth, RawDuration, RawEmbedding, RawGateway, RawGating, RawJwt, RawPolicy, RawStore, RawToolOverride,
    RawUpstream, Sp,
};

/// Where `*_env` keys and `~` are resolved. `Process` in production, `Map` in tests.
#[derive(Debug, Clone)]
pub enum Env {
    Process,
    Map(HashMap<String, String>),
}

impl Env {
    pub fn from_pairs<const N: usize>(pairs: [(&str, &str); N]) -> Self {
        Self::Map(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    pub fn get(&self, name: &str) -> Option<String> {
        match self {
            Self::Process => std::env::var(name).ok(),
            Self::Map(map) => map.get(name).cloned(),
        }
    }
}

/// A secret value: never printed, never serialised.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub upstreams: Vec<UpstreamConfig>,
    pub rag: RagConfig,
    pub gating: GatingConfig,
    pub embedding: EmbeddingConfig,
    pub store: StoreConfig,
    pub auth: AuthConfig,
    /// `None`: no `[policy]` table — every authenticated caller may call every tool.
    pub policy: Option<PolicyConfig>,
    /// `[tools."ns__name"] mutating = …`, by exposed name.
    pub mutating: HashMap<String, bool>,
    /// `[[contracts]]`: tools pinned by the operator to an exact version and fingerprint.
    pub contracts: Vec<DeclaredContract>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredContract {
    pub namespace: String,
    pub tool: String,
    pub version: String,
    pub fingerprint: String,
}

/// `[policy]`: default deny; rules allow, and deny rules win.
#[derive(Debug, Clone, Default)]
pub struct PolicyConfig {
    pub rules: Vec<Rule>,
    /// Cedar source from `cedar_file`, and where it came from.
    pub cedar: Option<(PathBuf, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub allow: bool,
    pub principals: Vec<String>,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    pub namespaces: Vec<String>,
    pub tools: Vec<String>,
    pub access: Access,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Any,
    Read,
    Mutation,
}

/// `[auth]`: who may call (SPEC §9 stage 1).
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    pub tokens: Vec<StaticToken>,
    pub jwt: Option<JwtConfig>,
    /// The principal of the agent on stdin/stdout (`--stdio`).
    pub stdio: PrincipalSpec,
    pub resource: Option<Url>,
}

impl AuthConfig {
    pub fn has_credentials(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }
}

/// A principal as configured: its id, roles and scopes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrincipalSpec {
    pub id: String,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct StaticToken {
    pub principal: PrincipalSpec,
    pub token: Secret,
}

/// Ed25519 JWTs (`alg` EdDSA only) from one issuer.
#[derive(Clone)]
pub struct JwtConfig {
    pub issuer: String,
    pub audience: String,
    /// Verification keys by `kid`.
    pub keys: Vec<(String, jsonwebtoken::DecodingKey)>,
    pub leeway: Duration,
    pub max_token_bytes: usize,
    pub principal_claim: String,
    pub roles_claim: String,
    pub scopes_claim: String,
    pub authorization_servers: Vec<String>,
}

impl fmt::Debug for JwtConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("JwtConfig")
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("kids", &kids)
            .finish()
    }
}

/// `[store]`: where contracts and the audit log live.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `sqlite://PATH`, `sqlite::memory:` or `postgres://…` (may hold a password: never logged).
    pub url: String,
}

/// `[embedding]`: the dense half of hybrid ranking (SPEC §7). Without it, BM25 alone.
#[derive(Debug, Clone)]
pub enum EmbeddingConfig {
    None,
    /// A sentence model run in-process from `model_dir` (`scripts/fetch-model` fills it).
    Local {
        model_dir: PathBuf,
        query_cache: usize,
    },
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenAi {
        base_url: Url,
        model: String,
        api_key: Option<Secret>,
        timeout: Duration,
        query_cache: usize,
    },
}

/// Where `scripts/fetch-model` puts all-MiniLM-L6-v2.
pub const DEFAULT_MODEL_DIR: &str = ".models/all-minilm-l6-v2";

/// `[gating]`: which tools an agent sees (SPEC §6).
#[derive(Debug, Clone)]
pub struct GatingConfig {
    /// `false`: every `tools/list` gets the plain full catalog.
    pub enabled: bool,
    /// At most this many task-relevant tools follow the core.
    pub tail_k: usize,
    /// A conversation's tail grows up to this many tools, then starts over.
    pub session_tail_max: usize,
    /// Exposed tool names always in the core (besides each upstream's `pin`).
    pub pin: Vec<String>,
    /// Minimum relevance (0..1) for a tool to enter the tail: no padding with noise.
    pub floor: f32,
    /// Conversations whose tails are remembered; the least recently used go first.
    pub max_conversations: usize,
}

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub host: String,
    pub port: u16,
    /// The MCP endpoint path, e.g. `/mcp`.
    pub path: String,
    pub auth: InboundAuth,
    pub separator: String,
    pub prefix_mode: PrefixMode,
    /// Extra allowed `Origin` values (loopback origins are always allowed), lower-cased.
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` names besides loopback and the bind host, lower-cased.
    pub allowed_hosts: Vec<String>,
    pub manifest_ttl: Duration,
    pub max_body_bytes: usize,
    pub max_response_bytes: usize,
    pub session_idle_timeout: Duration,
    pub max_sessions: usize,
    /// How long a request waits for the first catalog at cold start before answering with what
    /// has loaded so far.
    pub cold_start_wait: Duration,
    pub instructions: Option<String>,
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundAuth {
    Disabled {
        allow_remote: bool,
    },
    Bearer {
        env: String,
        token: Secret,
    },
    /// Credentials come from the `[auth]` table only (tokens, JWTs).
    Table,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMode {
    Always,
    /// Prefix only when more than one upstream is configured.
    Conditional,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// How to reach an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Streamable HTTP at `url`, or the legacy HTTP+SSE transport when `use_sse` (also the
    /// automatic fallback when a server refuses a Streamable HTTP `initialize`).
    Http { url: Url, use_sse: bool },
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio(StdioCommand),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioCommand {
    pub command: String,
    pub args: Vec<String>,
    /// The child's whole environment: a few basics (`PATH`, `HOME`, `LANG`, …), the variables
    /// named in `env_passthrough`, then `env`. The gateway's own secrets are not inherited.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

/// What a changed tool definition (contract drift) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DriftPolicy {
    /// Hidden and refused (`contract_drift`) until an operator approves it.
    #[default]
    Quarantine,
    /// Served, with a warning logged and the drift recorded for review.
    Warn,
    /// Re-pinned at once at the next major version.
    Accept,
}

/// Whether agents share one upstream session (or process), or each gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    Shared,
    /// One upstream session per agent session: for stateful servers, and so that a server's
    /// own requests (sampling, elicitation) always reach the right agent.
    PerClient,
}

#[derive(Clone)]
pub struct UpstreamConfig {
    pub namespace: String,
    pub endpoint: Endpoint,
    pub session: SessionMode,
    pub drift: DriftPolicy,
    pub auth: UpstreamAuth,
    pub origin: Option<HeaderValue>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub tls_verify: bool,
    pub ca_bundle: Option<PathBuf>,
    pub timeout: Duration,
    pub ping_interval: Duration,
    pub probe_interval: Duration,
    pub pin: Vec<String>,
    /// Expose each tool under its exact contract version (`name@1.2.0`, LLM-safe:
    /// `name_v1_2_0`); a call must name the current version.
    pub expose_versions: bool,
}

/// Hand-written so a URL password (sent as Basic auth) and static header values (often API keys)
/// never reach a log through `{:?}`.
impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoint = match &self.endpoint {
            Endpoint::Http { url, .. } => {
                let mut url = url.clone();
                if url.password().is_some() {
                    let _ = url.set_password(Some("redacted"));
                }
                url.to_string()
            }
            // Environment values may be secrets: names only.
            Endpoint::Stdio(c) => format!(
                "{} {:?} (env: {:?})",
                c.command,
                c.args,
                c.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>()
            ),
        };
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("UpstreamConfig")
            .field("namespace", &self.namespace)
            .field("endpoint", &endpoint)
            .field("auth", &self.auth)
            .field("origin", &self.origin)
            .field("headers", &header_names)
            .field("tls_verify", &self.tls_verify)
            .field("ca_bundle", &self.ca_bundle)
            .field("timeout", &self.timeout)
            .field("ping_interval", &self.ping_interval)
            .field("probe_interval", &self.probe_interval)
            .field("pin", &self.pin)
            .finish()
    }
}

impl UpstreamConfig {
    /// The HTTP endpoint, if this upstream is reached over HTTP.
    pub fn url(&self) -> Option<&Url> {
        match &self.endpoint {
            Endpoint::Http { url, .. } => Some(url),
            Endpoint::Stdio(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    None,
    Bearer {
        env: String,
        token: Secret,
    },
    /// Re-read on every (re)connect and after a 401: external tools renew it.
    TokenFile(PathBuf),
}

#[derive(Debug, Clone)]
pub struct RagConfig {
    pub enabled: bool,
    pub persist_dir: Option<PathBuf>,
}

/// One problem in a config file, located by key path and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.path, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// All problems found in one file (validation does not stop at the first).
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors {
    pub file: Option<PathBuf>,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.as_deref().map(Path::display);
        let n = self.errors.len();
        match file {
            Some(file) => writeln!(f, "invalid configuration {file} ({n} problem(s)):")?,
            None => writeln!(f, "invalid configuration ({n} problem(s)):")?,
        }
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

pub const DEFAULT_SEPARATOR: &str = "__";
/// The default relevance floor of the tail: keeps 93% of gold BM25 hits on the BFCL tuning half
/// and drops 20% of the others (`gatehouse bench tune-floor`).
pub const DEFAULT_FLOOR: f32 = 0.1;
/// Gatehouse's own tools live here; no upstream may take it.
pub const RESERVED_NAMESPACE: &str = "gateway";

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path, env: &Env) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
            file: Some(path.to_path_buf()),
            errors: vec![ConfigError {
                path: "(file)".into(),
                line: None,
                message: format!("cannot read the file: {e}"),
            }],
        })?;
        Self::parse(&text, env).map_err(|mut e| {
            e.file = Some(path.to_path_buf());
            e
        })
    }

    pub fn parse(text: &str, env: &Env) -> Result<Config, ConfigErrors> {
        let raw = RawConfig::parse(text).map_err(|e| ConfigErrors { file: None, errors: vec![e] })?;
        let mut v = Validator { text, env, errors: Vec::new() };
        let config = v.config(raw);
        if v.errors.is_empty() { Ok(config) } else { Err(ConfigErrors { file: None, errors: v.errors }) }
    }

    /// Whether exposed names carry the namespace prefix.
    pub fn prefixed(&self) -> bool {
        match self.gateway.prefix_mode {
            PrefixMode::Always => true,
            PrefixMode::Conditional => self.upstreams.len() > 1,
            PrefixMode::Never => false,
        }
    }
}

/// Collects errors while building the typed config, so one run reports every problem.
struct Validator<'a> {
    text: &'a str,
    env: &'a Env,
    errors: Vec<ConfigError>,
}

impl Validator<'_> {
    fn error(&mut self, path: impl Into<String>, span: Option<Range<usize>>, message: impl Into<String>) {
        let line = span.map(|s| line_of(self.text, s.start));
        self.errors.push(ConfigError { path: path.into(), line, message: message.into() });
    }

    fn config(&mut self, raw: RawConfig) -> Config {
        let auth = self.auth(raw.auth.unwrap_or_default());
        let gateway = self.gateway(raw.gateway.unwrap_or_default(), auth.has_credentials());
        let upstreams = self.upstreams(raw.upstreams.unwrap_or_default(), &gateway.separator);
        if gateway.prefix_mode == PrefixMode::Never && upstreams.len() > 1 {
            tracing::info!(
                "prefix_mode = \"never\" with {} upstreams: a tool name offered by two upstreams is \
                 reported as a collision when the catalog loads",
                upstreams.len()
            );
        }
        let rag = raw.rag.unwrap_or_default();
        let rag = RagConfig {
            enabled: rag.enabled.unwrap_or(true),
            persist_dir: rag.persist_dir.map(|p| self.expand_home(&p)),
        };
        let gating = self.gating(raw.gating.unwrap_or_default());
        let embedding = self.embedding(raw.embedding.unwrap_or_default());
        let store = self.store(raw.store.unwrap_or_default());
        let policy = raw.policy.map(|p| self.policy(p));
        let mutating = raw
            .tools
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, o): (String, RawToolOverride)| Some((name, o.mutating?)))
            .collect();
        let contracts = self.contracts(raw.contracts.unwrap_or_default(), &upstreams);
        Config { gateway, upstreams, rag, gating, embedding, store, auth, policy, mutating, contracts }
    }

    fn gateway(&mut self, g: RawGateway, auth_table: bool) -> GatewayConfig {
        let host = g.host.map_or_else(|| "127.0.0.1".to_string(), |h| h.value);
        let path = match g.path {
            Some(p) if !p.value.starts_with('/') || p.value.contains(['?', '#', ' ']) => {
                self.error("gateway.path", Some(p.span), "expected an absolute path such as \"/mcp\"");
                p.value
            }
            Some(p) => p.value,
            None => "/mcp".into(),
        };

        let separator = match g.separator {
            Some(s)
                if s.value.is_empty()
                    || s.value.len() > 3
                    || !s.value.chars().all(|c| matches!(c, '.' | '_' | '-')) =>
            {
                self.error(
                    "gateway.separator",
                    Some(s.span),
                    format!("expected 1-3 characters from '.', '_', '-' (\"__\" or \".\"), got {:?}", s.value),
                );
                DEFAULT_SEPARATOR.into()
            }
            Some(s) => s.value,
            None => DEFAULT_SEPARATOR.into(),
        };

        let auth_disabled = g.auth_disabled.unwrap_or(false);
        let allow_remote = g.allow_unauthenticated_remote.unwrap_or(false);
        let auth = match (g.bearer_token_env, auth_disabled) {
            (_, true) => {
                if !allow_remote && !is_loopback_host(&host) {
                    self.error(
                        "gateway.auth_disabled",
                        None,
                        format!(
                            "auth_disabled = true refuses to bind the non-loopback host {host:?}; bind \
                             127.0.0.1, configure bearer_token_env, or set allow_unauthenticated_remote = true"
                        ),
                    );
                }
                InboundAuth::Disabled { allow_remote }
            }
            (Some(env), false) => match self.secret_env("gateway.bearer_token_env", &env) {
                Some(token) => InboundAuth::Bearer { env: env.value, token },
                None => InboundAuth::Disabled { allow_remote: false },
            },
            (None, false) if auth_table => InboundAuth::Table,
            (None, false) => {
                self.error(
                    "gateway",
                    None,
                    "no inbound authentication configured: set bearer_token_env = \"NAME\" (a variable \
                     holding the token), configure [[auth.tokens]] or [auth.jwt], or set auth_disabled = true \
                     (local development only)",
                );
                InboundAuth::Disabled { allow_remote: false }
            }
        };

        let lower_list = |items: Option<Vec<Sp<String>>>| -> Vec<String> {
            items.unwrap_or_default().into_iter().map(|o| o.value.trim_end_matches('/').to_ascii_lowercase()).collect()
        };
        let allowed_origins = lower_list(g.allowed_origins);
        let allowed_hosts = lower_list(g.allowed_hosts);

        GatewayConfig {
            port: g.port.unwrap_or(8090),
            path,
            auth,
            separator,
            prefix_mode: g.prefix_mode.unwrap_or(PrefixMode::Always),
            allowed_origins,
            allowed_hosts,
            manifest_ttl: self.duration("gateway.manifest_ttl", g.manifest_ttl, Duration::from_secs(30)),
            max_body_bytes: g.max_body_bytes.unwrap_or(4 * 1024 * 1024),
            max_response_bytes: g.max_response_bytes.unwrap_or(16 * 1024 * 1024),
            session_idle_timeout: self.duration(
                "gateway.session_idle_timeout",
                g.session_idle_timeout,
                Duration::from_secs(30 * 60),
            ),
            max_sessions: g.max_sessions.unwrap_or(10_000),
            cold_start_wait: self.duration("gateway.cold_start_wait", g.cold_start_wait, Duration::from_secs(10)),
            instructions: g.instructions,
            log_format: g.log_format.unwrap_or(LogFormat::Text),
            host,
        }
    }

    fn gating(&mut self, g: RawGating) -> GatingConfig {
        let floor = match g.floor {
            Some(f) if !(0.0..=1.0).contains(&f.value) => {
                self.error(
                    "gating.floor",
                    Some(f.span),
                    format!("expected a relevance between 0 and 1, got {}", f.value),
                );
                DEFAULT_FLOOR
            }
            Some(f) => f.value as f32,
            None => DEFAULT_FLOOR,
        };
        GatingConfig {
            enabled: g.enabled.unwrap_or(true),
            tail_k: g.tail_k.unwrap_or(8),
            session_tail_max: g.session_tail_max.unwrap_or(32).max(1),
            pin: g.pin.unwrap_or_default(),
            floor,
            max_conversations: g.max_conversations.unwrap_or(10_000).max(1),
        }
    }

    fn auth(&mut self, a: RawAuth) -> AuthConfig {
        let mut tokens = Vec::new();
        for (i, t) in a.tokens.unwrap_or_default().into_iter().enumerate() {
            let at = format!("auth.tokens[{i}]");
            if t.principal.value.trim().is_empty() {
                self.error(format!("{at}.principal"), Some(t.principal.span.clone()), "expected a principal id");
            }
            if let Some(token) = self.secret_env(&format!("{at}.token_env"), &t.token_env) {
                let principal = PrincipalSpec {
                    id: t.principal.value,
                    roles: t.roles.unwrap_or_default(),
                    scopes: t.scopes.unwrap_or_default(),
                };
                tokens.push(StaticToken { principal, token });
            }
        }
        let jwt = a.jwt.and_then(|j| self.jwt(j));
        let stdio = a.stdio.map_or_else(
            || PrincipalSpec { id: "stdio".into(), ..PrincipalSpec::default() },
            |s| PrincipalSpec {
                id: s.principal.value,
                roles: s.roles.unwrap_or_default(),
                scopes: s.scopes.unwrap_or_default(),
            },
        );
        let resource = a.resource.and_then(|r| match Url::parse(&r.value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => Some(url),
            _ => {
                self.error(
                    "auth.resource",
                    Some(r.span),
                    format!("expected the endpoint's absolute URL, got {:?}", r.value),
                );
                None
            }
        });
        AuthConfig { tokens, jwt, stdio, resource }
    }

    fn jwt(&mut self, j: RawJwt) -> Option<JwtConfig> {
        let mut keys = Vec::new();
        if j.keys.is_empty() {
            self.error(
                "auth.jwt.keys",
                Some(j.issuer.span.clone()),
                "expected at least one key: { kid = \"…\", file = \"key.pem\" }",
            );
        }
        for (i, k) in j.keys.iter().enumerate() {
            let at = format!("auth.jwt.keys[{i}]");
            let path = self.expand_home(&k.file.value);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.error(
                        format!("{at}.file"),
                        Some(k.file.span.clone()),
                        format!("cannot read {}: {e}", path.display()),
                    );
                    continue;
                }
            };
            match parse_verification_keys(&bytes, k.kid.as_ref().map(|k| k.value.as_str())) {
                Ok(found) => keys.extend(found),
                Err(rule) => self.error(format!("{at}.file"), Some(k.file.span.clone()), rule),
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (kid, _) in &keys {
            if !seen.insert(kid.clone()) {
                self.error("auth.jwt.keys", None, format!("duplicate kid {kid:?}"));
            }
        }
        let leeway = self.duration("auth.jwt.leeway", j.leeway, Duration::from_secs(60));
        Some(JwtConfig {
            issuer: j.issuer.value,
            audience: j.audience.value,
            keys,
            leeway,
            max_token_bytes: j.max_token_bytes.unwrap_or(8 * 1024),
            principal_claim: j.principal_claim.unwrap_or_else(|| "sub".into()),
            roles_claim: j.roles_claim.unwrap_or_else(|| "roles".into()),
            scopes_claim: j.scopes_claim.unwrap_or_else(|| "scope".into()),
            authorization_servers: j.authorization_servers.unwrap_or_default(),
        })
    }

    fn contracts(&mut self, raw: Vec<raw::RawContract>, upstreams: &[UpstreamConfig]) -> Vec<DeclaredContract> {
        let mut out = Vec::new();
        for (i, c) in raw.into_iter().enumerate() {
            let at = format!("contracts[{i}]");
            if !upstreams.iter().any(|u| u.namespace == c.namespace.value) {
                self.error(
                    format!("{at}.namespace"),
                    Some(c.namespace.span.clone()),
                    format!("no upstream has namespace {:?}", c.namespace.value),
                );
            }
            if semver::Version::parse(&c.version.value).is_err() {
                self.error(
                    format!("{at}.version"),
                    Some(c.version.span.clone()),
                    format!("expected an exact SemVer version such as \"1.2.0\", got {:?}", c.version.value),
                );
            }
            let fp = c.fingerprint.value.to_ascii_lowercase();
            if fp.len() != 64 || !fp.chars().all(|ch| ch.is_ascii_hexdigit()) {
                self.error(
                    format!("{at}.fingerprint"),
                    Some(c.fingerprint.span.clone()),
                    "expected 64 hex digits (SHA-256; `gatehouse contracts list --json` shows them)",
                );
            }
            out.push(DeclaredContract {
                namespace: c.namespace.value,
                tool: c.tool.value,
                version: c.version.value,
                fingerprint: fp,
            });
        }
        out
    }

    fn policy(&mut self, p: RawPolicy) -> PolicyConfig {
        let mut rules = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for (i, r) in p.rules.unwrap_or_default().into_iter().enumerate() {
            let at = format!("policy.rules[{i}]");
            let id = r.id.as_ref().map_or_else(|| format!("rule-{i}"), |id| id.value.clone());
            if !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) || id.is_empty() {
                self.error(
                    format!("{at}.id"),
                    r.id.as_ref().map(|i| i.span.clone()),
                    "expected letters, digits, '-', '_', '.'",
                );
            } else if !ids.insert(id.clone()) {
                self.error(
                    format!("{at}.id"),
                    r.id.as_ref().map(|i| i.span.clone()),
                    format!("duplicate rule id {id:?}"),
                );
            }
            let allow = match r.effect.value.as_str() {
                "allow" => true,
                "deny" => false,
                other => {
                    self.error(
                        format!("{at}.effect"),
                        Some(r.effect.span.clone()),
                        format!("expected \"allow\" or \"deny\", got {other:?}"),
                    );
                    false
                }
            };
            let access = match r.access.as_ref().map(|a| a.value.as_str()) {
                None | Some("any") => Access::Any,
                Some("read") => Access::Read,
                Some("mutation") => Access::Mutation,
                Some(other) => {
                    self.error(
                        format!("{at}.access"),
                        r.access.as_ref().map(|a| a.span.clone()),
                        format!("expected \"read\", \"mutation\" or \"any\", got {other:?}"),
                    );
                    Access::Any
                }
            };
            let lists = [&r.principals, &r.roles, &r.scopes, &r.namespaces, &r.tools];
            if lists.iter().flat_map(|l| l.iter().flatten()).any(|v| v.chars().any(char::is_control)) {
                self.error(at.clone(), Some(r.effect.span.clone()), "names must not contain control characters");
            }
            rules.push(Rule {
                id,
                allow,
                principals: r.principals.unwrap_or_default(),
                roles: r.roles.unwrap_or_default(),
                scopes: r.scopes.unwrap_or_default(),
                namespaces: r.namespaces.unwrap_or_default(),
                tools: r.tools.unwrap_or_default(),
                access,
            });
        }
        let cedar = p.cedar_file.and_then(|f| {
            let path = self.expand_home(&f.value);
            match std::fs::read_to_string(&path) {
                Ok(text) => Some((path, text)),
                Err(e) => {
                    self.error("policy.cedar_file", Some(f.span), format!("cannot read {}: {e}", path.display()));
                    None
                }
            }
        });
        PolicyConfig { rules, cedar }
    }

    fn store(&mut self, s: RawStore) -> StoreConfig {
        match s.url {
            Some(url)
                if url.value.starts_with("sqlite:")
                    || url.value.starts_with("postgres://")
                    || url.value.starts_with("postgresql://") =>
            {
                let url = match url.value.strip_prefix("sqlite://~/") {
                    Some(rest) => format!("sqlite://{}", self.expand_home(&format!("~/{rest}")).display()),
                    None => url.value,
                };
                StoreConfig { url }
            }
            Some(url) => {
                self.error(
                    "store.url",
                    Some(url.span),
                    "expected sqlite://PATH, sqlite::memory: or postgres://USER@HOST:PORT/DATABASE",
                );
                StoreConfig { url: String::new() }
            }
            None => StoreConfig { url: format!("sqlite://{}", self.default_data_dir().join("gatehouse.db").display()) },
        }
    }

    /// `$XDG_DATA_HOME/gatehouse`, else `~/.local/share/gatehouse`, else `./.gatehouse`.
    fn default_data_dir(&self) -> PathBuf {
        match (self.env.get("XDG_DATA_HOME"), self.env.get("HOME")) {
            (Some(xdg), _) if !xdg.is_empty() => Path::new(&xdg).join("gatehouse"),
            (_, Some(home)) if !home.is_empty() => Path::new(&home).join(".local/share/gatehouse"),
            _ => PathBuf::from(".gatehouse"),
        }
    }

    fn embedding(&mut self, e: RawEmbedding) -> EmbeddingConfig {
        let query_cache = e.query_cache.unwrap_or(1024).max(1);
        let provider = e.provider.as_ref().map_or("none", |p| p.value.as_str());
        let misplaced = |v: &mut Self, key: &str, set: bool| {
            if set {
                v.error(format!("embedding.{key}"), None, format!("{key} does not apply to provider {provider:?}"));
            }
        };
        match provider {
            "none" => EmbeddingConfig::None,
            "local" => {
                misplaced(self, "base_url", e.base_url.is_some());
                misplaced(self, "model", e.model.is_some());
                misplaced(self, "api_key_env", e.api_key_env.is_some());
                if !cfg!(feature = "local-embeddings") {
                    self.error(
                        "embedding.provider",
                        e.provider.as_ref().map(|p| p.span.clone()),
                        "this build has no local model (cargo feature local-embeddings); use \"openai\" or \"none\"",
                    );
                }
                let model_dir = self.expand_home(e.model_dir.as_deref().unwrap_or(DEFAULT_MODEL_DIR));
                EmbeddingConfig::Local { model_dir, query_cache }
            }
            "openai" => {
                misplaced(self, "model_dir", e.model_dir.is_some());
                let base_url = match &e.base_url {
                    None => {
                        self.error(
                            "embedding.base_url",
                            e.provider.as_ref().map(|p| p.span.clone()),
                            "provider \"openai\" needs base_url, e.g. \"https://api.openai.com/v1/\"",
                        );
                        None
                    }
                    Some(raw) => match Url::parse(&raw.value) {
                        // HTTPS, except to this machine (a local embedding server).
                        Ok(url)
                            if url.scheme() == "https"
                                || (url.scheme() == "http" && url.host_str().is_some_and(is_loopback_host)) =>
                        {
                            Some(url)
                        }
                        _ => {
                            self.error(
                                "embedding.base_url",
                                Some(raw.span.clone()),
                                format!("expected an https URL (http only to localhost), got {:?}", raw.value),
                            );
                            None
                        }
                    },
                };
                let model = match &e.model {
                    Some(m) if !m.value.trim().is_empty() => m.value.clone(),
                    other => {
                        self.error(
                            "embedding.model",
                            other.as_ref().map(|m| m.span.clone()),
                            "provider \"openai\" needs a model name, e.g. \"text-embedding-3-small\"",
                        );
                        String::new()
                    }
                };
                let api_key = e.api_key_env.as_ref().and_then(|name| self.secret_env("embedding.api_key_env", name));
                let timeout = self.duration("embedding.timeout", e.timeout, Duration::from_secs(10));
                match base_url {
                    // Embeddings are joined onto the base: make sure it ends in '/'.
                    Some(mut base_url) => {
                        if !base_url.path().ends_with('/') {
                            base_url.set_path(&format!("{}/", base_url.path()));
                        }
                        EmbeddingConfig::OpenAi { base_url, model, api_key, timeout, query_cache }
                    }
                    None => EmbeddingConfig::None,
                }
            }
            other => {
                self.error(
                    "embedding.provider",
                    e.provider.as_ref().map(|p| p.span.clone()),
                    format!("expected \"local\", \"openai\" or \"none\", got {other:?}"),
                );
                EmbeddingConfig::None
            }
        }
    }

    fn upstreams(&mut self, raw: Vec<RawUpstream>, separator: &str) -> Vec<UpstreamConfig> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, u) in raw.into_iter().enumerate() {
            let at = format!("upstreams[{i}]");
            let ns = &u.namespace;
            if let Some(rule) = namespace_problem(&ns.value, separator) {
                self.error(format!("{at}.namespace"), Some(ns.span.clone()), rule);
            } else if let Some(first) = seen.insert(ns.value.clone(), i) {
                self.error(
                    format!("{at}.namespace"),
                    Some(ns.span.clone()),
                    format!("duplicate namespace {:?} (already used by upstreams[{first}])", ns.value),
                );
            }
            if let Some(config) = self.upstream(&at, u) {
                out.push(config);
            }
        }
        out
    }

    fn upstream(&mut self, at: &str, u: RawUpstream) -> Option<UpstreamConfig> {
        let endpoint = self.endpoint(at, &u);
        let auth = match (u.bearer_token_env, u.token_file) {
            (Some(env), Some(file)) => {
                self.error(
                    format!("{at}.token_file"),
                    Some(file.span),
                    format!("set either bearer_token_env ({:?}) or token_file, not both", env.value),
                );
                UpstreamAuth::None
            }
            (Some(env), None) => match self.secret_env(&format!("{at}.bearer_token_env"), &env) {
                Some(token) => UpstreamAuth::Bearer { env: env.value, token },
                None => UpstreamAuth::None,
            },
            (None, Some(file)) => UpstreamAuth::TokenFile(self.expand_home(&file.value)),
            (None, None) => UpstreamAuth::None,
        };

        let origin = u.origin.and_then(|o| match HeaderValue::from_str(&o.value) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(format!("{at}.origin"), Some(o.span), "expected a value usable as an HTTP header");
                None
            }
        });
        let headers = self.headers(at, u.headers.unwrap_or_default());

        let ca_bundle = u.ca_bundle_env.and_then(|name| {
            let value = self.env.get(&name.value);
            if value.is_none() {
                self.error(
                    format!("{at}.ca_bundle_env"),
                    Some(name.span),
                    format!("environment variable {:?} is not set (it should hold a CA bundle path)", name.value),
                );
            }
            value.map(PathBuf::from)
        });

        let config = UpstreamConfig {
            namespace: u.namespace.value,
            endpoint: endpoint?,
            session: u.session.unwrap_or(SessionMode::Shared),
            drift: u.drift.unwrap_or_default(),
            auth,
            origin,
            headers,
            tls_verify: u.tls_verify.unwrap_or(true),
            ca_bundle,
            timeout: self.duration(&format!("{at}.timeout"), u.timeout, Duration::from_secs(30)),
            ping_interval: self.duration(&format!("{at}.ping_interval"), u.ping_interval, Duration::from_secs(45)),
            probe_interval: self.duration(
                &format!("{at}.probe_interval"),
                u.probe_interval,
                Duration::from_secs(12 * 60),
            ),
            pin: u.pin.unwrap_or_default(),
            expose_versions: u.expose_versions.unwrap_or(false),
        };
        Some(config)
    }

    /// `url` (Streamable HTTP) or `command` (stdio child): exactly one.
    fn endpoint(&mut self, at: &str, u: &RawUpstream) -> Option<Endpoint> {
        let stdio_only = [
            ("args", u.args.is_some()),
            ("env", u.env.is_some()),
            ("env_passthrough", u.env_passthrough.is_some()),
            ("cwd", u.cwd.is_some()),
        ];
        match (&u.url, &u.command) {
            (Some(url), Some(command)) => {
                self.error(
                    format!("{at}.command"),
                    Some(command.span.clone()),
                    format!("set either url ({:?}) or command, not both", url.value),
                );
                None
            }
            (None, None) => {
                self.error(
                    format!("{at}.url"),
                    Some(u.namespace.span.clone()),
                    "required: the upstream's MCP endpoint URL (or `command` for a stdio server)",
                );
                None
            }
            (Some(url), None) => {
                for (key, set) in stdio_only {
                    if set {
                        self.error(
                            format!("{at}.{key}"),
                            Some(url.span.clone()),
                            format!("{key} only applies to stdio upstreams (`command`)"),
                        );
                    }
                }
                match Url::parse(&url.value) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {
                        let use_sse = u.use_sse.as_ref().is_some_and(|s| s.value);
                        Some(Endpoint::Http { url: parsed, use_sse })
                    }
                    _ => {
                        self.error(
                            format!("{at}.url"),
                            Some(url.span.clone()),
                            format!("expected an absolute http(s) URL, got {:?}", url.value),
                        );
                        None
                    }
                }
            }
            (None, Some(command)) => {
                if command.value.trim().is_empty() {
                    self.error(format!("{at}.command"), Some(command.span.clone()), "expected a program name or path");
                    return None;
                }
                let mut env: Vec<(String, String)> = Vec::new();
                for basic in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "SHELL", "TERM"] {
                    if let Some(value) = self.env.get(basic) {
                        env.push((basic.to_string(), value));
                    }
                }
                for name in u.env_passthrough.clone().unwrap_or_default() {
                    match self.env.get(&name.value) {
                        Some(value) => env.push((name.value, value)),
                        None => self.error(
                            format!("{at}.env_passthrough"),
                            Some(name.span),
                            format!("environment variable {:?} is not set", name.value),
                        ),
                    }
                }
                for (key, value) in u.env.clone().unwrap_or_default() {
                    env.retain(|(k, _)| *k != key);
                    env.push((key, value));
                }
                Some(Endpoint::Stdio(StdioCommand {
                    command: command.value.clone(),
                    args: u.args.clone().unwrap_or_default(),
                    env,
                    cwd: u.cwd.as_ref().map(|c| self.expand_home(c)),
                }))
            }
        }
    }

    fn headers(&mut self, at: &str, raw: BTreeMap<String, Sp<String>>) -> Vec<(HeaderName, HeaderValue)> {
        // Headers the gateway derives per hop; a static value would break sessions or leak auth.
        const RESERVED: [&str; 6] =
            ["mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name", "content-type", "accept"];
        let mut out = Vec::new();
        for (name, value) in raw {
            let path = format!("{at}.headers.{name}");
            let parsed_name = HeaderName::from_bytes(name.as_bytes());
            let parsed_value = HeaderValue::from_str(&value.value);
            match (parsed_name, parsed_value) {
                (Ok(n), _) if RESERVED.contains(&n.as_str()) => {
                    self.error(path, Some(value.span), "this header is set by the gateway itself");
                }
                (Ok(n), Ok(v)) => out.push((n, v)),
                (Err(_), _) => self.error(path, Some(value.span), "not a valid HTTP header name"),
                (_, Err(_)) => self.error(path, Some(value.span), "not a valid HTTP header value"),
            }
        }
        out
    }

    fn secret_env(&mut self, path: &str, name: &Sp<String>) -> Option<Secret> {
        match self.env.get(&name.value) {
            Some(v) if !v.trim().is_empty() => Some(Secret(v.trim().to_string())),
            Some(_) => {
                self.error(path, Some(name.span.clone()), format!("environment variable {:?} is empty", name.value));
                None
            }
            None => {
                self.error(path, Some(name.span.clone()), format!("environment variable {:?} is not set", name.value));
                None
            }
        }
    }

    fn duration(&mut self, path: &str, raw: Option<Sp<RawDuration>>, default: Duration) -> Duration {
        let Some(raw) = raw else { return default };
        match raw.value.to_duration() {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                self.error(path, Some(raw.span), "must be greater than zero");
                default
            }
            Err(rule) => {
                self.error(path, Some(raw.span), rule);
                default
            }
        }
    }

    fn expand_home(&self, path: &str) -> PathBuf {
        match (path.strip_prefix("~/"), self.env.get("HOME")) {
            (Some(rest), Some(home)) => Path::new(&home).join(rest),
            _ => PathBuf::from(path),
        }
    }
}

fn namespace_problem(ns: &str, separator: &str) -> Option<String> {
    if ns.is_empty() || ns.len() > 48 {
        return Some("expected 1-48 characters".into());
    }
    if !ns.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Some(format!("expected only letters, digits, '_' and '-', got {ns:?}"));
    }
    if ns.contains(separator) {
        return Some(format!(
            "namespace {ns:?} contains the separator {separator:?}; rename it or change gateway.separator"
        ));
    }
    // `a_` + `__` + `b` would read back as namespace `a`: the split must be unambiguous.
    if ns.ends_with(|c| separator.contains(c)) {
        return Some(format!("namespace {ns:?} ends with a character of the separator {separator:?}"));
    }
    if ns == RESERVED_NAMESPACE {
        return Some(format!("namespace {RESERVED_NAMESPACE:?} is reserved for Gatehouse's own tools"));
    }
    None
}

pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Ed25519 verification keys from a file: a PEM public key (`kid` required), a JWK, or a JWK
/// Set (each key's own `kid`). Only OKP/Ed25519 keys are accepted.
fn parse_verification_keys(
    bytes: &[u8],
    kid: Option<&str>,
) -> Result<Vec<(String, jsonwebtoken::DecodingKey)>, String> {
    use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
    if bytes.starts_with(b"-----BEGIN") {
        let kid = kid.ok_or("a PEM key needs kid = \"…\" beside file")?;
        let key = jsonwebtoken::DecodingKey::from_ed_pem(bytes)
            .map_err(|e| format!("not an Ed25519 public key in PEM: {e}"))?;
        return Ok(vec![(kid.to_string(), key)]);
    }
    let jwks: Vec<Jwk> = match serde_json::from_slice::<JwkSet>(bytes) {
        Ok(set) => set.keys,
        Err(_) => vec![serde_json::from_slice::<Jwk>(bytes).map_err(|e| format!("neither PEM, JWK nor JWK Set: {e}"))?],
    };
    let mut out = Vec::new();
    for jwk in jwks {
        let AlgorithmParameters::OctetKeyPair(params) = &jwk.algorithm else {
            return Err("only Ed25519 (kty OKP, crv Ed25519) keys are accepted".into());
        };
        if params.curve != EllipticCurve::Ed25519 {
            return Err("only Ed25519 (kty OKP, crv Ed25519) keys are accepted".into());
        }
        let id = jwk.common.key_id.clone().or(kid.map(str::to_string)).ok_or("a JWK needs a kid")?;
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwk).map_err(|e| format!("JWK {id}: {e}"))?;
        out.push((id, key));
    }
    Ok(out)
}

/// A database URL without its password, for logs and `check`.
pub fn redact_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("redacted"));
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

#[cfg(test)]
mod tests;

/// The resolved plan `gatehouse check` prints: what would run, with secrets named, not shown.
pub fn plan(config: &Config, path: &Path) -> String {
    use std::fmt::Write as _;
    let g = &config.gateway;
    let mut out = String::new();
    let _ = writeln!(out, "config: {} (valid)", path.display());
    let _ = writeln!(out, "listen: http://{}:{}{}", g.host, g.port, g.path);
    let mut auth = match &g.auth {
        InboundAuth::Disabled { .. } => vec!["disabled (auth_disabled = true; local development only)".to_string()],
        InboundAuth::Bearer { env, .. } => vec![format!("bearer token from ${env} (principal \"bearer\")")],
        InboundAuth::Table => Vec::new(),
    };
    if !config.auth.tokens.is_empty() {
        let ids: Vec<&str> = config.auth.tokens.iter().map(|t| t.principal.id.as_str()).collect();
        auth.push(format!("{} static token(s) for {}", ids.len(), ids.join(", ")));
    }
    if let Some(jwt) = &config.auth.jwt {
        let kids: Vec<&str> = jwt.keys.iter().map(|(k, _)| k.as_str()).collect();
        auth.push(format!("EdDSA JWTs from {} for {} (keys {})", jwt.issuer, jwt.audience, kids.join(", ")));
    }
    let _ = writeln!(out, "auth: {}", auth.join("; "));
    let mode = match g.prefix_mode {
        PrefixMode::Always => "always",
        PrefixMode::Conditional => "conditional",
        PrefixMode::Never => "never",
    };
    let _ = writeln!(
        out,
        "names: prefix_mode = {mode} ({}), separator {:?}",
        if config.prefixed() { "prefixed" } else { "bare" },
        g.separator
    );
    let _ = writeln!(out, "catalog refresh: every {:?}", g.manifest_ttl);
    let _ = writeln!(out, "upstreams ({}):", config.upstreams.len());
    for u in &config.upstreams {
        let auth = match &u.auth {
            UpstreamAuth::None => "no credential".to_string(),
            UpstreamAuth::Bearer { env, .. } => format!("bearer from ${env}"),
            UpstreamAuth::TokenFile(p) => format!("token file {}", p.display()),
        };
        let target = match &u.endpoint {
            Endpoint::Http { url, .. } => {
                let mut url = url.clone();
                let _ = url.set_password(None);
                let _ = url.set_username("");
                let kind = match u.endpoint {
                    Endpoint::Http { use_sse: true, .. } => "legacy-sse",
                    _ => "streamable-http",
                };
                format!("{kind} {url}")
            }
            Endpoint::Stdio(c) => format!("stdio `{} {}`", c.command, c.args.join(" ")),
        };
        let _ = writeln!(
            out,
            "  - {:<12} {target}  ({auth}; timeout {:?}{})",
            u.namespace,
            u.timeout,
            if u.tls_verify { "" } else { "; TLS NOT VERIFIED" }
        );
    }
    let _ = writeln!(out, "search index: {}", if config.rag.enabled { "enabled" } else { "disabled" });
    let ranker = match &config.embedding {
        EmbeddingConfig::None => "BM25 (no embedder configured)".to_string(),
        EmbeddingConfig::Local { model_dir, .. } => format!("hybrid: BM25 + local model in {}", model_dir.display()),
        EmbeddingConfig::OpenAi { base_url, model, .. } => format!("hybrid: BM25 + {model} at {base_url}"),
    };
    let _ = writeln!(out, "ranking: {ranker}");
    let _ = writeln!(out, "store: {}", redact_url(&config.store.url));
    out
}
