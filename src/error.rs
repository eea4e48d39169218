//! `GatewayError`: every client-visible failure, and the one place it becomes a wire error.
//!
//! Each variant maps — by an exhaustive match with no catch-all arm — to a JSON-RPC code, an HTTP
//! status, a class name (`_meta["gatehouse/error"]`, SPEC §9) and a public message. Public messages
//! are built only from static text and gateway-generated values (field paths, configured namespace
//! names): never from upstream bodies, secrets, URLs, file paths or stack traces. Operator detail
//! travels in `#[source]` errors and goes to the logs.

use std::fmt;

use http::StatusCode;
use serde_json::{Value, json};

use crate::protocol::ProtocolVersion;

/// Which side of the era divide a request came from; a few mappings differ by era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireEra {
    Legacy,
    Modern,
}

/// A request field that failed to parse, named by its JSON path (`params.name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub rule: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.rule)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    // ---- JSON-RPC / MCP protocol faults --------------------------------------------------------
    #[error("body is not valid JSON")]
    Parse,
    #[error("not a JSON-RPC 2.0 message: {0}")]
    InvalidRequest(&'static str),
    #[error("JSON-RPC batches are not supported by protocol {0}")]
    BatchNotSupported(ProtocolVersion),
    #[error("method not found")]
    MethodNotFound,
    #[error("invalid params: {0}")]
    InvalidParams(FieldError),
    /// 2026-07-28: the `_meta` envelope (or a header standing in for it) is missing or wrong.
    #[error("invalid request envelope: {0}")]
    InvalidEnvelope(FieldError),
    /// Unknown — or hidden, which must look the same — tool, prompt or namespace.
    #[error("unknown tool")]
    UnknownTool { name: String },
    #[error("unknown prompt")]
    UnknownPrompt { name: String },
    /// `uri` is the caller's own (exposed) URI, echoed as `data.uri`.
    #[error("resource not found")]
    ResourceNotFound { uri: String },
    #[error("unsupported protocol version")]
    UnsupportedProtocolVersion { requested: String },
    /// 2026-07-28: the request needs a client capability it did not declare. `required` is a
    /// capabilities object rebuilt from known capability names only.
    #[error("missing required client capability")]
    MissingCapability { required: Value },
    /// 2026-07-28: an `Mcp-*` header disagrees with (or is missing for) the body.
    #[error("header {0} does not match the request body")]
    HeaderMismatch(&'static str),

    // ---- HTTP transport --------------------------------------------------------------------------
    #[error("Origin not allowed")]
    OriginForbidden,
    #[error("Host not allowed")]
    HostForbidden,
    #[error("Accept header must allow {0}")]
    NotAcceptable(&'static str),
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("request body exceeds the configured limit")]
    PayloadTooLarge,
    #[error("Mcp-Session-Id header is required")]
    SessionRequired,
    #[error("session not found or ended")]
    SessionNotFound,
    #[error("method not allowed for this protocol era")]
    HttpMethodNotAllowed,

    // ---- execution (SPEC §9 classes) -------------------------------------------------------------
    #[error("authentication required")]
    Unauthenticated,
    #[error("upstream {namespace} is unavailable")]
    UpstreamUnavailable {
        namespace: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("upstream {namespace} failed")]
    UpstreamError {
        namespace: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    #[error("upstream {namespace} did not answer within the deadline")]
    DeadlineExceeded { namespace: String },
    /// Authenticated, but not allowed to do this (an operator surface such as the audit log; a
    /// forbidden *tool* answers as an unknown one instead).
    #[error("forbidden")]
    Forbidden,
    /// The arguments break the tool's `inputSchema` (a tool-level result the model can fix).
    #[error("invalid arguments: {0}")]
    InvalidArguments(FieldError),
    /// The upstream's `structuredContent` breaks the tool's `outputSchema` (tool-level).
    #[error("upstream {namespace} returned output that breaks the tool's outputSchema: {field}")]
    InvalidOutput { namespace: String, field: FieldError },
    /// The tool's definition changed since its contract was pinned; quarantined until approved.
    #[error("contract drift")]
    ContractDrift { name: String },
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// JSON-RPC codes used by the gateway (2025 and 2026-07-28 specs).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Transport-level errors without a better code (what the reference SDKs send).
    pub const TRANSPORT: i64 = -32000;
    /// Legacy "resource not found"; retired in 2026-07-28 (use -32602).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// Gatehouse's own codes live outside the reserved -32768..-32000 range.
    pub const UNAUTHENTICATED: i64 = -31001;
    pub const UPSTREAM_UNAVAILABLE: i64 = INTERNAL_ERROR;
    pub const UPSTREAM_ERROR: i64 = -31002;
    pub const DEADLINE_EXCEEDED: i64 = -31003;
    pub const CONTRACT_DRIFT: i64 = -31004;
    pub const FORBIDDEN: i64 = -31005;
}

/// Protocol versions named in `-32022` / unsupported-version errors.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];

impl GatewayError {
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Internal(source.into())
    }

    /// Failures the model should read and act on: answered as an `isError` tool result, not a
    /// JSON-RPC error (DESIGN §3).
    pub fn is_tool_result(&self) -> bool {
        matches!(self, Self::InvalidArguments(_) | Self::InvalidOutput { .. })
    }

    /// The `isError` result carrying this failure: the public message as text, the class in
    /// `_meta`.
    pub fn tool_result(&self) -> Value {
        json!({
            "content": [{ "type": "text", "text": self.public_message() }],
            "isError": true,
            "_meta": self.public_data()["_meta"].clone(),
        })
    }

    /// The SPEC §9 class (or protocol class) carried in `_meta["gatehouse/error"]`.
    pub fn class(&self) -> &'static str {
        match self {
            Self::Parse => "parse_error",
            Self::InvalidRequest(_) | Self::BatchNotSupported(_) => "invalid_request",
            Self::MethodNotFound => "method_not_found",
            Self::InvalidParams(_) => "invalid_arguments",
            Self::InvalidEnvelope(_) => "invalid_envelope",
            // Hidden and unknown must be indistinguishable, so they share one class.
            Self::UnknownTool { .. } => "unknown_tool",
            Self::UnknownPrompt { .. } => "unknown_prompt",
            Self::ResourceNotFound { .. } => "resource_not_found",
            Self::UnsupportedProtocolVersion { .. } => "unsupported_protocol_version",
            Self::HeaderMismatch(_) => "header_mismatch",
            Self::MissingCapability { .. } => "missing_capability",
            Self::OriginForbidden | Self::HostForbidden => "forbidden",
            Self::NotAcceptable(_) | Self::UnsupportedMediaType | Self::HttpMethodNotAllowed => "invalid_request",
            Self::PayloadTooLarge => "payload_too_large",
            Self::SessionRequired | Self::SessionNotFound => "session_not_found",
            Self::Unauthenticated => "unauthenticated",
            Self::UpstreamUnavailable { .. } => "upstream_unavailable",
            Self::UpstreamError { .. } => "upstream_error",
            Self::DeadlineExceeded { .. } => "deadline_exceeded",
            Self::ContractDrift { .. } => "contract_drift",
            Self::Forbidden => "forbidden",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::InvalidOutput { .. } => "upstream_error",
            Self::Internal(_) => "internal",
        }
    }

    pub fn code(&self, era: WireEra) -> i64 {
        match self {
            Self::Parse => code::PARSE_ERROR,
            Self::InvalidRequest(_) | Self::BatchNotSupported(_) => code::INVALID_REQUEST,
            Self::MethodNotFound => code::METHOD_NOT_FOUND,
            Self::InvalidParams(_)
            | Self::InvalidEnvelope(_)
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. } => code::INVALID_PARAMS,
            Self::ResourceNotFound { .. } => match era {
                WireEra::Legacy => code::RESOURCE_NOT_FOUND,
                WireEra::Modern => code::INVALID_PARAMS,
            },
            Self::UnsupportedProtocolVersion { .. } => match era {
                WireEra::Legacy => code::INVALID_REQUEST,
                WireEra::Modern => code::UNSUPPORTED_PROTOCOL_VERSION,
            },
            Self::HeaderMismatch(_) => code::HEADER_MISMATCH,
            Self::MissingCapability { .. } => code::MISSING_CAPABILITY,
            Self::OriginForbidden
            | Self::HostForbidden
            | Self::NotAcceptable(_)
            | Self::UnsupportedMediaType
            | Self::PayloadTooLarge
            | Self::SessionRequired
            | Self::SessionNotFound
            | Self::HttpMethodNotAllowed => code::TRANSPORT,
            Self::Unauthenticated => code::UNAUTHENTICATED,
            Self::UpstreamUnavailable { .. } => code::UPSTREAM_UNAVAILABLE,
            Self::UpstreamError { .. } => code::UPSTREAM_ERROR,
            Self::DeadlineExceeded { .. } => code::DEADLINE_EXCEEDED,
            Self::ContractDrift { .. } => code::CONTRACT_DRIFT,
            Self::Forbidden => code::FORBIDDEN,
            Self::InvalidArguments(_) => code::INVALID_PARAMS,
            Self::InvalidOutput { .. } => code::UPSTREAM_ERROR,
            Self::Internal(_) => code::INTERNAL_ERROR,
        }
    }

    /// HTTP status for a Streamable HTTP response carrying this error.
    ///
    /// Legacy JSON-RPC faults travel in a 200 like any response; transport faults and every
    /// 2026-07-28 envelope fault get the 4xx the specs name.
    pub fn http_status(&self, era: WireEra) -> StatusCode {
        match self {
            Self::Parse | Self::InvalidRequest(_) | Self::BatchNotSupported(_) => StatusCode::BAD_REQUEST,
            Self::MethodNotFound => match era {
                WireEra::Legacy => StatusCode::OK,
                WireEra::Modern => StatusCode::NOT_FOUND,
            },
            Self::InvalidParams(_)
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. }
            | Self::ResourceNotFound { .. }
            | Self::UpstreamUnavailable { .. }
            | Self::UpstreamError { .. }
            | Self::DeadlineExceeded { .. }
            | Self::ContractDrift { .. }
            | Self::InvalidArguments(_)
            | Self::InvalidOutput { .. }
            | Self::Internal(_) => StatusCode::OK,
            Self::UnsupportedProtocolVersion { .. }
            | Self::HeaderMismatch(_)
            | Self::MissingCapability { .. }
            | Self::InvalidEnvelope(_) => StatusCode::BAD_REQUEST,
            Self::OriginForbidden | Self::HostForbidden | Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::SessionRequired => StatusCode::BAD_REQUEST,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::HttpMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }

    /// HTTP status on the REST surfaces (`/context/select`, later `/v1/…`), where there is no
    /// JSON-RPC envelope to carry the outcome.
    pub fn rest_status(&self) -> StatusCode {
        match self {
            Self::Parse
            | Self::InvalidRequest(_)
            | Self::BatchNotSupported(_)
            | Self::InvalidParams(_)
            | Self::InvalidEnvelope(_)
            | Self::UnsupportedProtocolVersion { .. }
            | Self::HeaderMismatch(_)
            | Self::MissingCapability { .. }
            | Self::SessionRequired => StatusCode::BAD_REQUEST,
            Self::MethodNotFound
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. }
            | Self::ResourceNotFound { .. }
            | Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::OriginForbidden | Self::HostForbidden | Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::HttpMethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::UpstreamUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpstreamError { .. } => StatusCode::BAD_GATEWAY,
            Self::DeadlineExceeded { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::ContractDrift { .. } => StatusCode::CONFLICT,
            Self::InvalidArguments(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InvalidOutput { .. } => StatusCode::BAD_GATEWAY,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The REST error body: the class, the public message and structured detail.
    pub fn rest_body(&self) -> Value {
        json!({ "error": { "class": self.class(), "message": self.public_message(), "data": self.public_data() } })
    }

    /// The message clients see. Only static text and gateway-owned values.
    pub fn public_message(&self) -> String {
        match self {
            Self::Parse => "Parse error: body is not valid JSON".into(),
            Self::InvalidRequest(why) => format!("Invalid request: {why}"),
            Self::BatchNotSupported(v) => {
                format!("Invalid request: JSON-RPC batches are not allowed in protocol {v}")
            }
            Self::MethodNotFound => "Method not found".into(),
            Self::InvalidParams(field) => format!("Invalid params: {field}"),
            Self::InvalidEnvelope(field) => format!("Invalid request envelope: {field}"),
            Self::UnknownTool { name } => format!("Unknown tool: {}", printable(name)),
            Self::UnknownPrompt { name } => format!("Unknown prompt: {}", printable(name)),
            Self::ResourceNotFound { .. } => "Resource not found".into(),
            Self::UnsupportedProtocolVersion { .. } => {
                format!("Unsupported protocol version (supported versions: {})", SUPPORTED_VERSIONS.join(", "))
            }
            Self::HeaderMismatch(header) => {
                format!("Header mismatch: {header} does not match the request body")
            }
            Self::MissingCapability { .. } => {
                "Missing required client capability (see data.requiredCapabilities)".into()
            }
            Self::OriginForbidden => "Forbidden: Origin not allowed".into(),
            Self::HostForbidden => "Forbidden: Host not allowed".into(),
            Self::Forbidden => "Forbidden: this principal may not do that".into(),
            Self::NotAcceptable(what) => format!("Not Acceptable: Accept must allow {what}"),
            Self::UnsupportedMediaType => "Unsupported Media Type: Content-Type must be application/json".into(),
            Self::PayloadTooLarge => "Payload Too Large: request body exceeds the limit".into(),
            Self::SessionRequired => "Bad Request: Mcp-Session-Id header is required".into(),
            Self::SessionNotFound => "Session not found".into(),
            Self::HttpMethodNotAllowed => "Method Not Allowed".into(),
            Self::Unauthenticated => "Unauthenticated: a valid bearer token is required".into(),
            Self::UpstreamUnavailable { namespace, .. } => {
                format!("Upstream unavailable: {namespace}")
            }
            Self::UpstreamError { namespace, .. } => format!("Upstream error: {namespace}"),
            Self::DeadlineExceeded { namespace } => {
                format!("Deadline exceeded waiting for upstream {namespace}")
            }
            Self::InvalidArguments(field) => format!("Invalid arguments: {field}"),
            Self::InvalidOutput { namespace, field } => {
                format!("Upstream error: {namespace} returned a result that breaks the tool's outputSchema ({field})")
            }
            Self::ContractDrift { name } => format!(
                "Contract drift: {} changed since its contract was pinned and awaits operator approval",
                printable(name)
            ),
            Self::Internal(_) => "Internal error".into(),
        }
    }

    /// `error.data`: the class, plus structured, gateway-owned detail.
    pub fn public_data(&self) -> Value {
        let mut data = json!({ "_meta": { "gatehouse/error": self.class() } });
        match self {
            Self::InvalidParams(field) | Self::InvalidEnvelope(field) | Self::InvalidArguments(field) => {
                data["field"] = json!(field.path)
            }
            Self::InvalidOutput { namespace, .. } => data["upstream"] = json!(namespace),
            Self::UpstreamUnavailable { namespace, .. }
            | Self::UpstreamError { namespace, .. }
            | Self::DeadlineExceeded { namespace } => data["upstream"] = json!(namespace),
            Self::UnsupportedProtocolVersion { requested } => {
                data["supported"] = json!(SUPPORTED_VERSIONS);
                data["requested"] = json!(printable(requested));
            }
            Self::HeaderMismatch(header) => data["header"] = json!(header),
            Self::ResourceNotFound { uri } if !uri.is_empty() => data["uri"] = json!(printable(uri)),
            Self::MissingCapability { required } => data["requiredCapabilities"] = required.clone(),
            Self::Parse
            | Self::Forbidden
            | Self::ContractDrift { .. }
            | Self::InvalidRequest(_)
            | Self::BatchNotSupported(_)
            | Self::MethodNotFound
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. }
            | Self::ResourceNotFound { .. }
            | Self::OriginForbidden
            | Self::HostForbidden
            | Self::NotAcceptable(_)
            | Self::UnsupportedMediaType
            | Self::PayloadTooLarge
            | Self::SessionRequired
            | Self::SessionNotFound
            | Self::HttpMethodNotAllowed
            | Self::Unauthenticated
            | Self::Internal(_) => {}
        }
        data
    }

    /// The JSON-RPC `error` object.
    pub fn to_rpc_error(&self, era: WireEra) -> Value {
        json!({
            "code": self.code(era),
            "message": self.public_message(),
            "data": self.public_data(),
        })
    }
}

/// Caller-supplied names are echoed back (they are the caller's own input), but bounded and
/// stripped of control characters so an error line cannot be used to smuggle log or UI content.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

#[cfg(test)]
mod tests;
