//! `Pipeline::call_tool`: the ordered stages every `tools/call` passes, visible in one place.
//!
//! Stages today, in SPEC §9 order: 1 the caller was authenticated at the edge ([`authn`]);
//! 2 the tool is resolved in the catalog (hidden and unknown look the same) and its contract
//! checked (a drifted definition is refused); 3 arguments validated ([`validate`]); 8 dispatch
//! to the owning upstream; 9 `structuredContent` validated; 10 one audit event ([`audit`]),
//! whatever happened. Policy, mutation safety, idempotency and reliability slot in between
//! without changing callers.

pub mod audit;
pub mod authn;
pub mod validate;

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, Miss, Route, Tool};
use crate::contracts::{Contracts, Standing};
use crate::error::{FieldError, GatewayError};
use crate::policy::{Decision, Policy};
use crate::store::AuditEvent;
use crate::upstream::{Upstream, UpstreamError, Via};
use audit::Audit;
pub use authn::{Authenticator, Principal};
use std::time::Instant;
use validate::Validator;

/// One tool call as the front door hands it over.
pub struct CallRequest<'a> {
    pub principal: &'a Principal,
    /// The exposed tool name.
    pub name: &'a str,
    /// The agent's `params` minus `name` (arguments, `_meta`, …).
    pub params: Map<String, Value>,
    /// How the call reaches the upstream: relay for what it sends meanwhile, agent session.
    pub via: Via<'a>,
}

pub struct Pipeline {
    catalog: Arc<Catalog>,
    upstreams: Arc<[Arc<Upstream>]>,
    contracts: Arc<Contracts>,
    policy: Arc<Policy>,
    validator: Validator,
    pub audit: Audit,
}

/// What the stages learned, for the audit event (written whatever the outcome).
#[derive(Default)]
struct Trail {
    contract: Option<(String, Arc<str>)>,
    decision: Option<Decision>,
}

/// A call in flight: its audit event is recorded when this is dropped, so a cancelled call
/// (the future dropped mid-await) is audited too.
struct Pending<'a> {
    audit: &'a Audit,
    started: Instant,
    principal: String,
    tool: String,
    args_hash: Option<String>,
    trail: Trail,
    /// None until the stages finish: dropped before that means cancelled.
    outcome: Option<&'static str>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let trail = std::mem::take(&mut self.trail);
        let (contract_version, fingerprint) =
            trail.contract.map_or((None, None), |(v, f)| (Some(v), Some(f.to_string())));
        let (decision, rule) = match trail.decision {
            Some(d) => (if d.allowed { "allow" } else { "deny" }, Some(d.rule)),
            // Refused before a decision (unknown tool, upstream down).
            None => ("none", None),
        };
        self.audit.record(AuditEvent {
            at_ms: crate::store::now_ms(),
            principal: std::mem::take(&mut self.principal),
            tool: std::mem::take(&mut self.tool),
            contract_version,
            fingerprint,
            decision: decision.into(),
            rule,
            outcome: self.outcome.unwrap_or("cancelled").into(),
            latency_us: self.started.elapsed().as_micros() as i64,
            args_hash: self.args_hash.take(),
            trace_id: None,
        });
    }
}

/// The requested name as the audit log keeps it: printable and bounded, since an unknown name
/// is whatever the caller sent.
fn bounded_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(128).collect()
}

impl Pipeline {
    /// Starts the audit writer (needs a runtime).
    pub fn new(
        catalog: Arc<Catalog>,
        upstreams: Arc<[Arc<Upstream>]>,
        contracts: Arc<Contracts>,
        policy: Arc<Policy>,
        audit_key: Vec<u8>,
    ) -> Self {
        let audit = Audit::start(contracts.store().clone(), audit_key);
        Self { catalog, upstreams, contracts, policy, validator: Validator::default(), audit }
    }

    /// Runs the stages, then audits the call whatever happened (stage 10 always runs) — even
    /// when the caller goes away mid-call and this future is dropped (outcome `cancelled`).
    pub async fn call_tool(&self, req: CallRequest<'_>) -> Result<Box<RawValue>, GatewayError> {
        let mut pending = Pending {
            audit: &self.audit,
            started: Instant::now(),
            principal: req.principal.id.to_string(),
            tool: bounded_name(req.name),
            args_hash: self.audit.arguments_hash(req.params.get("arguments")),
            trail: Trail::default(),
            outcome: None,
        };
        let result = self.run_stages(req, &mut pending.trail).await;
        pending.outcome = Some(result.as_ref().map_or_else(GatewayError::class, |_| "ok"));
        drop(pending);
        result
    }

    async fn run_stages(&self, req: CallRequest<'_>, trail: &mut Trail) -> Result<Box<RawValue>, GatewayError> {
        let principal = req.principal; // 1: authenticated before the body was read
        let tool = self.resolve_tool(req.name)?;
        // 4, decided here: a tool this principal may not call must look unknown to every later
        // stage (a contract or validation error would reveal that it exists).
        let decision = self.policy.decide(principal, &tool);
        let allowed = decision.allowed;
        trail.decision = Some(decision);
        if !allowed {
            return Err(GatewayError::UnknownTool { name: req.name.to_string() });
        }
        let version = self.check_contract(&tool)?; // 2: a drifted definition is refused
        trail.contract = Some((version, tool.fingerprint.clone()));
        let empty = Value::Object(Map::new());
        let arguments = req.params.get("arguments").unwrap_or(&empty);
        self.validator.input(&tool, arguments).map_err(GatewayError::InvalidArguments)?; // 3
        let mut params = req.params; // 8: dispatch under the upstream's own name
        params.insert("name".into(), json!(&*tool.route.name));
        let raw = self.forward(&tool.route, "tools/call", params, req.via).await?;
        // 9: only tools that declare an outputSchema pay for parsing their result.
        if tool.definition.get("outputSchema").is_some() {
            let result: Value = serde_json::from_str(raw.get()).map_err(GatewayError::internal)?;
            self.validator.output(&tool, &result).map_err(|field| {
                tracing::warn!(tool = %tool.exposed, %field, "upstream result breaks the tool's outputSchema");
                GatewayError::InvalidOutput { namespace: tool.route.namespace.to_string(), field }
            })?;
        }
        Ok(raw)
    }

    fn resolve_tool(&self, name: &str) -> Result<Tool, GatewayError> {
        let snapshot = self.catalog.snapshot();
        match snapshot.tool(name) {
            Ok(tool) => Ok(tool.clone()),
            // An exact-version name (`expose_versions`) resolves only to that version.
            Err(miss) => match self.contracts.resolve_versioned(&snapshot, name) {
                Some(tool) => Ok(tool.clone()),
                None => Err(miss_error(miss, || GatewayError::UnknownTool { name: name.to_string() })),
            },
        }
    }

    /// The contract version the call runs under, or `contract_drift`.
    fn check_contract(&self, tool: &Tool) -> Result<String, GatewayError> {
        match self.contracts.standing(tool) {
            Standing::Drifted { allowed: false, .. } => {
                Err(GatewayError::ContractDrift { name: tool.exposed.to_string() })
            }
            Standing::Current { version } | Standing::Drifted { version, .. } => Ok(version),
            Standing::FirstUse => Ok(crate::contracts::FIRST_VERSION.to_string()),
        }
    }

    /// Sends a request to the upstream a route names and maps its failure to the taxonomy.
    pub async fn forward(
        &self,
        route: &Route,
        method: &str,
        params: Map<String, Value>,
        via: Via<'_>,
    ) -> Result<Box<RawValue>, GatewayError> {
        let upstream = &self.upstreams[route.upstream];
        upstream.request(method, params, via).await.map_err(|e| upstream_error(&route.namespace, e))
    }

    /// Subscribes to (or unsubscribes from) updates of a routed resource.
    pub async fn subscribe(&self, route: &Route, on: bool, via: Via<'_>) -> Result<(), GatewayError> {
        let upstream = &self.upstreams[route.upstream];
        upstream.subscribe(&route.name, on, via).await.map_err(|e| upstream_error(&route.namespace, e))
    }
}

/// A name that did not route: unknown, or owned by a configured upstream that is down.
pub fn miss_error(miss: Miss, unknown: impl FnOnce() -> GatewayError) -> GatewayError {
    match miss {
        Miss::Unknown => unknown(),
        Miss::Down(namespace) => GatewayError::UpstreamUnavailable { namespace: namespace.to_string(), source: None },
    }
}

/// The explicit conversion from upstream failures to client-visible classes. The upstream's
/// own message is logged, never relayed.
fn upstream_error(namespace: &str, e: UpstreamError) -> GatewayError {
    tracing::warn!(namespace, class = e.class(), error = %e, "upstream request failed");
    let namespace = namespace.to_string();
    match e {
        UpstreamError::Connect(_)
        | UpstreamError::TokenFile { .. }
        | UpstreamError::Spawn(_)
        | UpstreamError::Exited => GatewayError::UpstreamUnavailable { namespace, source: Some(Box::new(e)) },
        UpstreamError::Timeout(_) => GatewayError::DeadlineExceeded { namespace },
        UpstreamError::Rpc { code: -32602, .. } => GatewayError::InvalidParams(FieldError {
            path: "params".into(),
            rule: format!("rejected by upstream {namespace}"),
        }),
        UpstreamError::Rpc { code: -32601, .. } => GatewayError::MethodNotFound,
        UpstreamError::Rpc { code: -32021, data, .. } => GatewayError::MissingCapability {
            required: known_capabilities(data.as_ref().and_then(|d| d.get("requiredCapabilities"))),
        },
        UpstreamError::Rpc { code: -32002, .. } => GatewayError::ResourceNotFound { uri: String::new() },
        UpstreamError::Rpc { .. }
        | UpstreamError::Status(_)
        | UpstreamError::SessionExpired
        | UpstreamError::Unauthorized
        | UpstreamError::TooLarge(_)
        | UpstreamError::Protocol(_) => GatewayError::UpstreamError { namespace, source: Some(Box::new(e)) },
    }
}

/// Rebuilds an upstream's `requiredCapabilities` from capability names we know, so no other
/// upstream content reaches the agent.
fn known_capabilities(required: Option<&Value>) -> Value {
    const KNOWN: [&str; 5] = ["sampling", "elicitation", "roots", "tasks", "extensions"];
    let mut out = Map::new();
    if let Some(required) = required.and_then(Value::as_object) {
        for name in KNOWN {
            if let Some(value) = required.get(name) {
                let inner = match (name, value.as_object()) {
                    // Extension ids are `vendor/name` tokens; anything else is dropped.
                    ("extensions", Some(ext)) => Value::Object(
                        ext.keys()
                            .filter(|k| {
                                k.len() <= 128 && k.chars().all(|c| c.is_ascii_alphanumeric() || "./-_".contains(c))
                            })
                            .map(|k| (k.clone(), json!({})))
                            .collect(),
                    ),
                    _ => json!({}),
                };
                out.insert(name.to_string(), inner);
            }
        }
    }
    Value::Object(out)
}
