//! `Pipeline::call_tool`: the ordered stages every `tools/call` passes, visible in one place.
//!
//! Today's stages: the caller was authenticated at the edge (stage 1, [`authn`]), the tool is
//! resolved in the catalog (stage 2: hidden and unknown look the same), then dispatched to the
//! owning upstream (stage 8). Contracts, validation, policy, mutation safety, idempotency,
//! reliability and audit slot in between, in SPEC §9 order, without changing callers.

pub mod authn;

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, Miss, Route};
use crate::contracts::Contracts;
use crate::error::{FieldError, GatewayError};
use crate::upstream::{Upstream, UpstreamError, Via};
pub use authn::{Authenticator, Principal};

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
}

impl Pipeline {
    pub fn new(catalog: Arc<Catalog>, upstreams: Arc<[Arc<Upstream>]>, contracts: Arc<Contracts>) -> Self {
        Self { catalog, upstreams, contracts }
    }

    pub async fn call_tool(&self, req: CallRequest<'_>) -> Result<Box<RawValue>, GatewayError> {
        let _principal = req.principal; // 1: authenticated before the body was read
        let route = self.resolve_tool(req.name)?; // 2: unknown and hidden are indistinguishable;
        //    a drifted definition is refused
        let mut params = req.params; // 8: dispatch under the upstream's own name
        params.insert("name".into(), json!(&*route.name));
        self.forward(&route, "tools/call", params, req.via).await
    }

    fn resolve_tool(&self, name: &str) -> Result<Route, GatewayError> {
        let snapshot = self.catalog.snapshot();
        match snapshot.tool(name) {
            Ok(tool) if !self.contracts.admits(tool) => Err(GatewayError::ContractDrift { name: name.to_string() }),
            Ok(tool) => Ok(tool.route.clone()),
            Err(miss) => Err(miss_error(miss, || GatewayError::UnknownTool { name: name.to_string() })),
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
