use super::*;

/// One row of the wire table: everything a client can observe about a variant.
struct Row {
    error: GatewayError,
    legacy_code: i64,
    modern_code: i64,
    legacy_status: StatusCode,
    modern_status: StatusCode,
    class: &'static str,
    message: &'static str,
}

fn source(text: &str) -> Option<Box<dyn std::error::Error + Send + Sync>> {
    Some(Box::new(std::io::Error::other(text.to_string())))
}

fn field(path: &str, rule: &str) -> FieldError {
    FieldError { path: path.into(), rule: rule.into() }
}

/// Numbers a variant. The match has no catch-all arm, so a new variant does not compile until
/// it gets a number here — and `table_covers_every_variant` then fails until it gets a row.
fn variant_number(e: &GatewayError) -> usize {
    match e {
        GatewayError::Parse => 0,
        GatewayError::InvalidRequest(_) => 1,
        GatewayError::BatchNotSupported(_) => 2,
        GatewayError::MethodNotFound => 3,
        GatewayError::InvalidParams(_) => 4,
        GatewayError::UnknownTool { .. } => 5,
        GatewayError::UnknownPrompt { .. } => 6,
        GatewayError::ResourceNotFound { .. } => 7,
        GatewayError::UnsupportedProtocolVersion { .. } => 8,
        GatewayError::HeaderMismatch(_) => 9,
        GatewayError::OriginForbidden => 10,
        GatewayError::HostForbidden => 11,
        GatewayError::NotAcceptable(_) => 12,
        GatewayError::UnsupportedMediaType => 13,
        GatewayError::PayloadTooLarge => 14,
        GatewayError::SessionRequired => 15,
        GatewayError::SessionNotFound => 16,
        GatewayError::HttpMethodNotAllowed => 17,
        GatewayError::Unauthenticated => 18,
        GatewayError::UpstreamUnavailable { .. } => 19,
        GatewayError::UpstreamError { .. } => 20,
        GatewayError::DeadlineExceeded { .. } => 21,
        GatewayError::Internal(_) => 22,
        GatewayError::InvalidEnvelope(_) => 23,
        GatewayError::MissingCapability { .. } => 24,
        GatewayError::ContractDrift { .. } => 25,
        GatewayError::InvalidArguments(_) => 26,
        GatewayError::InvalidOutput { .. } => 27,
        GatewayError::Forbidden => 28,
    }
}
const VARIANTS: usize = 29;

fn table() -> Vec<Row> {
    use StatusCode as S;
    vec![
        Row {
            error: GatewayError::Parse,
            legacy_code: -32700,
            modern_code: -32700,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "parse_error",
            message: "Parse error: body is not valid JSON",
        },
        Row {
            error: GatewayError::InvalidRequest("empty batch"),
            legacy_code: -32600,
            modern_code: -32600,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "invalid_request",
            message: "Invalid request: empty batch",
        },
        Row {
            error: GatewayError::BatchNotSupported(ProtocolVersion::V2025_06_18),
            legacy_code: -32600,
            modern_code: -32600,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "invalid_request",
            message: "Invalid request: JSON-RPC batches are not allowed in protocol 2025-06-18",
        },
        Row {
            error: GatewayError::MethodNotFound,
            legacy_code: -32601,
            modern_code: -32601,
            legacy_status: S::OK,
            modern_status: S::NOT_FOUND,
            class: "method_not_found",
            message: "Method not found",
        },
        Row {
            error: GatewayError::InvalidParams(field("params.name", "required")),
            legacy_code: -32602,
            modern_code: -32602,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "invalid_arguments",
            message: "Invalid params: params.name: required",
        },
        Row {
            error: GatewayError::InvalidEnvelope(field("params._meta.x", "required: an object")),
            legacy_code: -32602,
            modern_code: -32602,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "invalid_envelope",
            message: "Invalid request envelope: params._meta.x: required: an object",
        },
        Row {
            error: GatewayError::MissingCapability { required: json!({"elicitation": {}}) },
            legacy_code: -32021,
            modern_code: -32021,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "missing_capability",
            message: "Missing required client capability (see data.requiredCapabilities)",
        },
        Row {
            error: GatewayError::UnknownTool { name: "alpha__echo".into() },
            legacy_code: -32602,
            modern_code: -32602,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "unknown_tool",
            message: "Unknown tool: alpha__echo",
        },
        Row {
            error: GatewayError::UnknownPrompt { name: "alpha__greet".into() },
            legacy_code: -32602,
            modern_code: -32602,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "unknown_prompt",
            message: "Unknown prompt: alpha__greet",
        },
        Row {
            error: GatewayError::ResourceNotFound { uri: String::new() },
            legacy_code: -32002,
            modern_code: -32602,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "resource_not_found",
            message: "Resource not found",
        },
        Row {
            error: GatewayError::UnsupportedProtocolVersion { requested: "1999-01-01".into() },
            legacy_code: -32600,
            modern_code: -32022,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "unsupported_protocol_version",
            message: "Unsupported protocol version (supported versions: 2026-07-28, 2025-11-25, \
                      2025-06-18, 2025-03-26)",
        },
        Row {
            error: GatewayError::HeaderMismatch("Mcp-Method"),
            legacy_code: -32020,
            modern_code: -32020,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "header_mismatch",
            message: "Header mismatch: Mcp-Method does not match the request body",
        },
        Row {
            error: GatewayError::OriginForbidden,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::FORBIDDEN,
            modern_status: S::FORBIDDEN,
            class: "forbidden",
            message: "Forbidden: Origin not allowed",
        },
        Row {
            error: GatewayError::HostForbidden,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::FORBIDDEN,
            modern_status: S::FORBIDDEN,
            class: "forbidden",
            message: "Forbidden: Host not allowed",
        },
        Row {
            error: GatewayError::NotAcceptable("text/event-stream"),
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::NOT_ACCEPTABLE,
            modern_status: S::NOT_ACCEPTABLE,
            class: "invalid_request",
            message: "Not Acceptable: Accept must allow text/event-stream",
        },
        Row {
            error: GatewayError::UnsupportedMediaType,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::UNSUPPORTED_MEDIA_TYPE,
            modern_status: S::UNSUPPORTED_MEDIA_TYPE,
            class: "invalid_request",
            message: "Unsupported Media Type: Content-Type must be application/json",
        },
        Row {
            error: GatewayError::PayloadTooLarge,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::PAYLOAD_TOO_LARGE,
            modern_status: S::PAYLOAD_TOO_LARGE,
            class: "payload_too_large",
            message: "Payload Too Large: request body exceeds the limit",
        },
        Row {
            error: GatewayError::SessionRequired,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::BAD_REQUEST,
            modern_status: S::BAD_REQUEST,
            class: "session_not_found",
            message: "Bad Request: Mcp-Session-Id header is required",
        },
        Row {
            error: GatewayError::SessionNotFound,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::NOT_FOUND,
            modern_status: S::NOT_FOUND,
            class: "session_not_found",
            message: "Session not found",
        },
        Row {
            error: GatewayError::HttpMethodNotAllowed,
            legacy_code: -32000,
            modern_code: -32000,
            legacy_status: S::METHOD_NOT_ALLOWED,
            modern_status: S::METHOD_NOT_ALLOWED,
            class: "invalid_request",
            message: "Method Not Allowed",
        },
        Row {
            error: GatewayError::Unauthenticated,
            legacy_code: -31001,
            modern_code: -31001,
            legacy_status: S::UNAUTHORIZED,
            modern_status: S::UNAUTHORIZED,
            class: "unauthenticated",
            message: "Unauthenticated: a valid bearer token is required",
        },
        Row {
            error: GatewayError::UpstreamUnavailable {
                namespace: "panda".into(),
                source: source("connection refused"),
            },
            legacy_code: -32603,
            modern_code: -32603,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "upstream_unavailable",
            message: "Upstream unavailable: panda",
        },
        Row {
            error: GatewayError::UpstreamError { namespace: "panda".into(), source: None },
            legacy_code: -31002,
            modern_code: -31002,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "upstream_error",
            message: "Upstream error: panda",
        },
        Row {
            error: GatewayError::DeadlineExceeded { namespace: "bamboo".into() },
            legacy_code: -31003,
            modern_code: -31003,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "deadline_exceeded",
            message: "Deadline exceeded waiting for upstream bamboo",
        },
        Row {
            error: GatewayError::InvalidArguments(field("arguments/count", "must be of type integer")),
            legacy_code: -32602,
            modern_code: -32602,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "invalid_arguments",
            message: "Invalid arguments: arguments/count: must be of type integer",
        },
        Row {
            error: GatewayError::InvalidOutput {
                namespace: "panda".into(),
                field: field("structuredContent/n", "must be of type number"),
            },
            legacy_code: -31002,
            modern_code: -31002,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "upstream_error",
            message: "Upstream error: panda returned a result that breaks the tool's outputSchema (structuredContent/n: must be of type number)",
        },
        Row {
            error: GatewayError::Forbidden,
            legacy_code: -31005,
            modern_code: -31005,
            legacy_status: S::FORBIDDEN,
            modern_status: S::FORBIDDEN,
            class: "forbidden",
            message: "Forbidden: this principal may not do that",
        },
        Row {
            error: GatewayError::ContractDrift { name: "panda__search".into() },
            legacy_code: -31004,
            modern_code: -31004,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "contract_drift",
            message: "Contract drift: panda__search changed since its contract was pinned and awaits operator approval",
        },
        Row {
            error: GatewayError::internal("disk full"),
            legacy_code: -32603,
            modern_code: -32603,
            legacy_status: S::OK,
            modern_status: S::OK,
            class: "internal",
            message: "Internal error",
        },
    ]
}

#[test]
fn table_covers_every_variant() {
    let mut seen = [false; VARIANTS];
    for row in table() {
        let n = variant_number(&row.error);
        assert!(!seen[n], "two rows for variant {n} ({:?})", row.error);
        seen[n] = true;
    }
    let missing: Vec<usize> = (0..VARIANTS).filter(|n| !seen[*n]).collect();
    assert!(missing.is_empty(), "variants without a row: {missing:?}");
}

#[test]
fn every_variant_maps_to_its_code_status_class_and_message() {
    for row in table() {
        let e = &row.error;
        assert_eq!(e.code(WireEra::Legacy), row.legacy_code, "legacy code of {e:?}");
        assert_eq!(e.code(WireEra::Modern), row.modern_code, "modern code of {e:?}");
        assert_eq!(e.http_status(WireEra::Legacy), row.legacy_status, "legacy status of {e:?}");
        assert_eq!(e.http_status(WireEra::Modern), row.modern_status, "modern status of {e:?}");
        assert_eq!(e.class(), row.class, "class of {e:?}");
        assert_eq!(e.public_message(), row.message, "message of {e:?}");
    }
}

#[test]
fn rpc_error_object_carries_code_message_and_class_in_both_eras() {
    for row in table() {
        for (era, code) in [(WireEra::Legacy, row.legacy_code), (WireEra::Modern, row.modern_code)] {
            let rpc = row.error.to_rpc_error(era);
            assert_eq!(rpc["code"], json!(code), "{:?} in {era:?}", row.error);
            assert_eq!(rpc["message"], json!(row.message), "{:?}", row.error);
            assert_eq!(rpc["data"]["_meta"]["gatehouse/error"], json!(row.error.class()), "{:?}", row.error);
            let keys: Vec<&String> = rpc.as_object().expect("an object").keys().collect();
            assert_eq!(keys, ["code", "message", "data"], "no extra top-level keys");
        }
    }
}

#[test]
fn gateway_codes_stay_outside_the_reserved_json_rpc_range() {
    // -32768..=-32000 is reserved by JSON-RPC; Gatehouse's own causes must not squat in it.
    for row in table() {
        if matches!(
            row.error,
            GatewayError::Unauthenticated
                | GatewayError::UpstreamError { .. }
                | GatewayError::DeadlineExceeded { .. }
                | GatewayError::ContractDrift { .. }
                | GatewayError::Forbidden
        ) {
            assert!(!(-32768..=-32000).contains(&row.legacy_code), "{:?}", row.error);
        }
    }
}

#[test]
fn public_data_carries_only_gateway_owned_detail() {
    let params = GatewayError::InvalidParams(field("params.arguments.x", "expected u32"));
    assert_eq!(
        params.public_data(),
        json!({ "_meta": { "gatehouse/error": "invalid_arguments" }, "field": "params.arguments.x" })
    );

    for e in [
        GatewayError::UpstreamUnavailable { namespace: "panda".into(), source: None },
        GatewayError::UpstreamError { namespace: "panda".into(), source: None },
        GatewayError::DeadlineExceeded { namespace: "panda".into() },
    ] {
        assert_eq!(e.public_data()["upstream"], json!("panda"), "{e:?}");
    }

    let version = GatewayError::UnsupportedProtocolVersion { requested: "2099-01-01".into() };
    let data = version.public_data();
    assert_eq!(data["requested"], json!("2099-01-01"));
    assert_eq!(data["supported"], json!(SUPPORTED_VERSIONS));

    let header = GatewayError::HeaderMismatch("Mcp-Name");
    assert_eq!(header.public_data()["header"], json!("Mcp-Name"));

    // Variants without structured detail carry the class and nothing else.
    for row in table() {
        if matches!(
            row.error,
            GatewayError::InvalidParams(_)
                | GatewayError::InvalidEnvelope(_)
                | GatewayError::InvalidArguments(_)
                | GatewayError::InvalidOutput { .. }
                | GatewayError::UpstreamUnavailable { .. }
                | GatewayError::UpstreamError { .. }
                | GatewayError::DeadlineExceeded { .. }
                | GatewayError::UnsupportedProtocolVersion { .. }
                | GatewayError::HeaderMismatch(_)
                | GatewayError::MissingCapability { .. }
        ) {
            continue;
        }
        assert_eq!(row.error.public_data(), json!({ "_meta": { "gatehouse/error": row.class } }), "{:?}", row.error);
    }
}

#[test]
fn source_detail_never_reaches_the_wire() {
    let detail = "connect to postgres://user:pw@host/db failed; see /etc/secret/token";
    let errors = [
        GatewayError::UpstreamError { namespace: "panda".into(), source: source(detail) },
        GatewayError::UpstreamUnavailable { namespace: "panda".into(), source: source(detail) },
        GatewayError::internal(std::io::Error::other(detail)),
    ];
    for e in &errors {
        for era in [WireEra::Legacy, WireEra::Modern] {
            let wire = e.to_rpc_error(era).to_string();
            for secret in ["postgres://", "user:pw", "pw@host", "/etc/secret"] {
                assert!(!wire.contains(secret), "{secret:?} leaked in {wire}");
            }
        }
        // Not even the Display text (which ends up in client-facing logs of some callers).
        assert!(!e.to_string().contains("/etc/secret"), "{e}");
        // The detail is kept for operators, one `source()` away.
        let kept = std::error::Error::source(e).expect("a source").to_string();
        assert_eq!(kept, detail);
    }
}

#[test]
fn unknown_names_are_echoed_without_control_characters() {
    let e = GatewayError::UnknownTool { name: "evil\n\r\u{1b}[31mred\u{0}\u{7f}\u{85}tool\ttab".into() };
    let message = e.public_message();
    assert_eq!(message, "Unknown tool: evil[31mredtooltab");
    assert!(!message.chars().any(char::is_control), "{message:?}");

    let prompt = GatewayError::UnknownPrompt { name: "line1\nline2".into() };
    assert_eq!(prompt.public_message(), "Unknown prompt: line1line2");

    let version = GatewayError::UnsupportedProtocolVersion { requested: "2025\n-01-01".into() };
    assert_eq!(version.public_data()["requested"], json!("2025-01-01"));
}

#[test]
fn unknown_names_are_bounded_in_characters_not_bytes() {
    let e = GatewayError::UnknownTool { name: "x".repeat(100_000) };
    let message = e.public_message();
    assert_eq!(message, format!("Unknown tool: {}", "x".repeat(200)));

    // Multi-byte characters are counted as characters and never split mid-character.
    let wide = GatewayError::UnknownTool { name: "é".repeat(1_000) };
    let message = wide.public_message();
    let echoed = message.strip_prefix("Unknown tool: ").expect("the prefix");
    assert_eq!(echoed.chars().count(), 200);
    assert!(echoed.chars().all(|c| c == 'é'));

    // Control characters do not count against the bound.
    let padded = GatewayError::UnknownTool { name: format!("{}{}", "\n".repeat(500), "y".repeat(300)) };
    assert_eq!(padded.public_message(), format!("Unknown tool: {}", "y".repeat(200)));
}

#[test]
fn field_error_displays_as_path_and_rule() {
    assert_eq!(field("params.arguments.x", "expected u32").to_string(), "params.arguments.x: expected u32");
}
