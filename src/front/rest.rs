//! REST ingress: `POST /v1/tools/{name}:call` runs the same pipeline as an MCP `tools/call`
//! (same authentication, contracts, validation, audit), and `GET /v1/audit` reads the audit
//! log. Errors use the one taxonomy with HTTP statuses (`GatewayError::rest_status`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::Front;
use crate::error::{FieldError, GatewayError};
use crate::pipeline::CallRequest;
use crate::protocol::jsonrpc;
use crate::store::AuditQuery;
use crate::upstream::Via;

/// A REST error: the taxonomy's status and body, plus the OAuth challenge on 401.
pub fn error(front: &Front, e: &GatewayError) -> Response {
    if matches!(e, GatewayError::Internal(_)) {
        tracing::warn!(error = %e, source = ?std::error::Error::source(e), "REST request failed");
    }
    let mut response = (e.rest_status(), axum::Json(e.rest_body())).into_response();
    if matches!(e, GatewayError::Unauthenticated) {
        if let Ok(value) = HeaderValue::from_str(&front.challenge()) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta", default)]
    meta: Option<Map<String, Value>>,
}

/// `POST /v1/tools/{name}:call` with `{"arguments": {…}}`: the tool's result as JSON.
pub async fn call_tool(
    State(front): State<Arc<Front>>,
    Path(spec): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let principal = match front.admit(&headers) {
        Ok(p) => p,
        Err(e) => return error(&front, &e),
    };
    // `{name}:call` is one path segment; anything else under /v1/tools is not a route.
    let Some(name) = spec.strip_suffix(":call") else { return error(&front, &GatewayError::MethodNotFound) };
    let bytes = match axum::body::to_bytes(body, front.settings.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => return error(&front, &GatewayError::PayloadTooLarge),
    };
    let body: CallBody = if bytes.iter().all(u8::is_ascii_whitespace) {
        CallBody { arguments: None, meta: None }
    } else {
        match jsonrpc::parse_at(&bytes, "body") {
            Ok(body) => body,
            Err(e) => return error(&front, &e),
        }
    };
    front.warm_up().await;
    let mut params = Map::new();
    params.insert("arguments".into(), Value::Object(body.arguments.unwrap_or_default()));
    if let Some(meta) = body.meta {
        params.insert("_meta".into(), Value::Object(meta));
    }
    let call = CallRequest { principal: &principal, name, params, via: Via { relay: None, session: None } };
    match front.pipeline.call_tool(call).await {
        Ok(raw) => ([(header::CONTENT_TYPE, "application/json")], raw.get().to_string()).into_response(),
        Err(e) => error(&front, &e),
    }
}

/// Roles that may read the audit log over HTTP.
pub const AUDITOR_ROLE: &str = "auditor";
pub const ADMIN_ROLE: &str = "admin";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditParams {
    principal: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    /// Milliseconds since the Unix epoch.
    since_ms: Option<i64>,
    limit: Option<i64>,
}

/// `GET /v1/audit?principal=&tool=&outcome=&since_ms=&limit=`: events, newest first.
pub async fn audit(
    State(front): State<Arc<Front>>,
    headers: HeaderMap,
    params: Result<Query<AuditParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let principal = match front.admit(&headers) {
        Ok(p) => p,
        Err(e) => return error(&front, &e),
    };
    // The log names every caller and tool: operators only.
    if !front.auth.is_disabled() && !principal.roles.iter().any(|r| r == AUDITOR_ROLE || r == ADMIN_ROLE) {
        return error(&front, &GatewayError::Forbidden);
    }
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => {
            let rule = format!("expected principal, tool, outcome, since_ms, limit ({})", e.body_text());
            return error(&front, &GatewayError::InvalidParams(FieldError { path: "query".into(), rule }));
        }
    };
    let limit = p.limit.unwrap_or(100);
    if !(1..=10_000).contains(&limit) {
        let rule = "expected 1 to 10000".to_string();
        return error(&front, &GatewayError::InvalidParams(FieldError { path: "query.limit".into(), rule }));
    }
    // Drain what is queued first, so a caller reads its own writes.
    front.pipeline.audit.flush().await;
    let query = AuditQuery { principal: p.principal, tool: p.tool, outcome: p.outcome, since_ms: p.since_ms, limit };
    match front.contracts.store().audit(&query).await {
        Ok(events) => (StatusCode::OK, axum::Json(serde_json::json!({ "events": events }))).into_response(),
        Err(e) => error(&front, &GatewayError::internal(e)),
    }
}
