//! Operations endpoints: `/healthz` (liveness plus per-upstream state, unauthenticated, never
//! secrets), `/readyz`, `/metrics` (Prometheus text).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::json;

use super::Front;
use crate::upstream::State as UpstreamState;

pub async fn healthz(State(front): State<Arc<Front>>) -> Response {
    let upstreams: Vec<_> = front.upstreams.iter().map(|u| u.health()).collect();
    let all_up = upstreams.iter().all(|h| h.state == UpstreamState::Up);
    let snapshot = front.catalog.snapshot();
    let body = json!({
        "service": "gatehouse",
        "version": env!("CARGO_PKG_VERSION"),
        "status": if all_up { "ok" } else { "degraded" },
        "sessions": front.sessions.len(),
        "tools": snapshot.tools.len(),
        "upstreams": upstreams,
        "ranking": front.gate.indexing_of(snapshot.version),
        "warnings": snapshot.warnings,
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `/.well-known/oauth-protected-resource`: where agents learn which authorization servers
/// issue tokens for this gateway (RFC 9728). Public, like the metadata it describes.
pub async fn protected_resource(State(front): State<Arc<Front>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], front.resource_metadata().to_string()).into_response()
}

/// Ready when at least one upstream serves tools (or none is configured).
pub async fn readyz(State(front): State<Arc<Front>>) -> Response {
    let ready = front.upstreams.is_empty() || front.upstreams.iter().any(|u| u.state() == UpstreamState::Up);
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, if ready { "ready\n" } else { "no upstream is up\n" }).into_response()
}

pub async fn metrics(State(front): State<Arc<Front>>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], front.metrics.render())
        .into_response()
}

/// `/metrics.json`: the headline gating numbers plus the current core hash.
pub async fn metrics_json(State(front): State<Arc<Front>>) -> Response {
    let mut body = front.metrics.json();
    body["namespaces"] = json!(front.catalog.snapshot().fingerprints.keys().map(|k| k.to_string()).collect::<Vec<_>>());
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `POST /context/select`: the core/tail split for context items (SPEC §8). Same admission
/// (Origin, Host, authentication) as the MCP endpoint.
pub async fn context_select(
    State(front): State<Arc<Front>>,
    headers: http::HeaderMap,
    body: axum::body::Body,
) -> Response {
    use crate::error::{FieldError, GatewayError};
    let rest_error = |e: GatewayError| super::rest::error(&front, &e);
    if let Err(e) = front.admit(&headers) {
        return rest_error(e);
    }
    let bytes = match axum::body::to_bytes(body, front.settings.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => return rest_error(GatewayError::PayloadTooLarge),
    };
    let request: crate::gate::context::Request = match crate::protocol::jsonrpc::parse_at(&bytes, "body") {
        Ok(r) => r,
        Err(e) => return rest_error(e),
    };
    let (k, floor) = (front.gate.settings.tail_k, front.gate.settings.floor);
    match tokio::task::spawn_blocking(move || crate::gate::context::select(request, k, floor)).await {
        Ok(Ok(selection)) => axum::Json(selection).into_response(),
        Ok(Err(rule)) => rest_error(GatewayError::InvalidParams(FieldError { path: "body".into(), rule })),
        Err(e) => rest_error(GatewayError::internal(e)),
    }
}
