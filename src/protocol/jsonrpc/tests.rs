// A failed unwrap is a test failure with a backtrace; that is all a test needs.
#![allow(clippy::unwrap_used)]

use super::*;

use crate::error::WireEra;
use proptest::prelude::*;
use serde::Deserialize;

// ---- helpers ------------------------------------------------------------------------------------

fn single(body: &str) -> Message {
    match parse_body(body.as_bytes()) {
        Ok(Incoming::Single(message)) => message,
        other => panic!("expected one message from {body}, got {other:?}"),
    }
}

fn rejected(body: &str) -> Rejected {
    match parse_body(body.as_bytes()) {
        Err(rejected) => rejected,
        Ok(other) => panic!("expected a rejection of {body}, got {other:?}"),
    }
}

/// The echoed id as the peer wrote it, for comparison.
fn echoed(rejected: &Rejected) -> Option<&str> {
    rejected.id.as_ref().map(|id| id.raw().get())
}

fn invalid_request_reason(error: &GatewayError) -> &'static str {
    match error {
        GatewayError::InvalidRequest(why) => why,
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

// ---- classification ---------------------------------------------------------------------------

#[test]
fn a_request_keeps_its_id_method_and_params_bytes() {
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"b": 1,  "a":[2]}}"#;
    let Message::Request(request) = single(body) else { panic!("not a request") };
    assert_eq!(request.id.raw().get(), "7");
    assert_eq!(request.id.to_value(), json!(7));
    assert_eq!(request.method, "tools/call");
    // Passed through byte for byte: key order and whitespace as the peer sent them.
    assert_eq!(request.params.as_deref().map(RawValue::get), Some(r#"{"b": 1,  "a":[2]}"#));
}

#[test]
fn string_and_negative_ids_are_kept_verbatim() {
    let Message::Request(a) = single(r#"{"jsonrpc":"2.0","id":"req-\u0041","method":"ping"}"#) else {
        panic!("not a request")
    };
    assert_eq!(a.id.raw().get(), r#""req-\u0041""#);
    assert_eq!(a.id.to_value(), json!("req-A"));
    assert!(a.params.is_none());

    let Message::Request(b) = single(r#"{"jsonrpc":"2.0","id":-3,"method":"ping"}"#) else { panic!("not a request") };
    assert_eq!(b.id.raw().get(), "-3");
    assert_eq!(b.id, RequestId(RawValue::from_string("-3".into()).unwrap()));
    assert_ne!(b.id, RequestId::from_u64(3));
}

#[test]
fn whitespace_around_members_does_not_matter() {
    let body = "{\n  \"jsonrpc\" : \"2.0\" ,\n  \"id\" :\t 5 ,\n  \"method\" : \"ping\"\r\n}\n";
    let Message::Request(request) = single(body) else { panic!("not a request") };
    assert_eq!(request.id.raw().get(), "5");
    assert_eq!(request.method, "ping");
}

#[test]
fn a_message_without_an_id_is_a_notification() {
    let Message::Notification(n) =
        single(r#" {"jsonrpc":"2.0","method":"notifications/initialized","params":{"x":1}} "#)
    else {
        panic!("not a notification")
    };
    assert_eq!(n.method, "notifications/initialized");
    assert_eq!(n.params.as_deref().map(RawValue::get), Some(r#"{"x":1}"#));
}

#[test]
fn null_params_count_as_absent() {
    let Message::Request(r) = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":null}"#) else {
        panic!("not a request")
    };
    assert!(r.params.is_none());
}

#[test]
fn responses_carry_exactly_one_of_result_and_error() {
    let Message::Response(ok) = single(r#"{"jsonrpc":"2.0","id":"s1","result":{"ok":true}}"#) else {
        panic!("not a response")
    };
    assert_eq!(ok.id.raw().get(), r#""s1""#);
    assert_eq!(ok.result.as_deref().map(RawValue::get), Some(r#"{"ok":true}"#));
    assert!(ok.error.is_none());

    // A null result is still a result.
    let Message::Response(null) = single(r#"{"jsonrpc":"2.0","id":2,"result":null}"#) else { panic!("not a response") };
    assert_eq!(null.result.as_deref().map(RawValue::get), Some("null"));

    let Message::Response(failed) =
        single(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found"}}"#)
    else {
        panic!("not a response")
    };
    assert!(failed.result.is_none());
    assert!(failed.error.is_some());

    let both = rejected(r#"{"jsonrpc":"2.0","id":4,"result":{},"error":{"code":1}}"#);
    assert_eq!(invalid_request_reason(&both.error), "expected a request, notification or response");
    assert_eq!(echoed(&both), Some("4"));

    let neither = rejected(r#"{"jsonrpc":"2.0","id":5}"#);
    assert!(matches!(neither.error, GatewayError::InvalidRequest(_)));
    assert_eq!(echoed(&neither), Some("5"));
}

#[test]
fn a_batch_is_judged_member_by_member() {
    let body = r#"
        [
          {"jsonrpc":"2.0","id":1,"method":"tools/list"},
          {"jsonrpc":"2.0","method":"notifications/cancelled"},
          {"jsonrpc":"2.0","id":9,"result":{}},
          {"jsonrpc":"1.0","id":2,"method":"x"},
          42
        ]"#;
    let Ok(Incoming::Batch(items)) = parse_body(body.as_bytes()) else { panic!("not a batch") };
    assert_eq!(items.len(), 5);
    assert!(matches!(&items[0], Ok(Message::Request(r)) if r.method == "tools/list"));
    assert!(matches!(&items[1], Ok(Message::Notification(_))));
    assert!(matches!(&items[2], Ok(Message::Response(_))));
    let Err(bad_version) = &items[3] else { panic!("accepted jsonrpc 1.0") };
    assert_eq!(echoed(bad_version), Some("2"));
    let Err(number) = &items[4] else { panic!("accepted a number") };
    assert_eq!(invalid_request_reason(&number.error), "expected a JSON object");
    assert!(number.id.is_none());
}

#[test]
fn empty_and_broken_batches_are_rejected_whole() {
    let empty = rejected(" [ ] ");
    assert_eq!(invalid_request_reason(&empty.error), "empty batch");
    assert!(empty.id.is_none());

    let broken = rejected(r#"[{"jsonrpc":"2.0","id":1,"method":"a"},"#);
    assert!(matches!(broken.error, GatewayError::Parse), "{broken:?}");
}

#[test]
fn an_array_of_numbers_is_a_batch_of_invalid_requests() {
    let Ok(Incoming::Batch(items)) = parse_body(b"[1,2,3]") else { panic!("not a batch") };
    assert_eq!(items.len(), 3);
    for item in &items {
        let Err(r) = item else { panic!("accepted a number: {item:?}") };
        assert_eq!(invalid_request_reason(&r.error), "expected a JSON object");
    }
}

#[test]
fn invalid_json_is_a_parse_error_without_an_id() {
    for body in [
        "",
        "   ",
        "not json",
        "{",
        r#"{"jsonrpc":"2.0","id":1,"method":"x""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x"} trailing"#,
        r#"{"jsonrpc":"2.0","id":1,'method':"x"}"#,
        "[",
        "\u{feff}{}",
    ] {
        let r = rejected(body);
        assert!(matches!(r.error, GatewayError::Parse), "{body:?} gave {:?}", r.error);
        assert!(r.id.is_none(), "{body:?}");
    }
    // Invalid UTF-8 inside a string is not JSON either.
    let r = parse_body(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}").unwrap_err();
    assert!(matches!(r.error, GatewayError::Parse), "{:?}", r.error);
}

#[test]
fn valid_json_that_is_not_a_message_is_an_invalid_request() {
    // (body, reason, id echoed)
    let cases: [(&str, &str, Option<&str>); 13] = [
        (r#""hello""#, "expected a JSON object", None),
        ("null", "expected a JSON object", None),
        ("17", "expected a JSON object", None),
        ("{}", "jsonrpc must be \"2.0\"", None),
        (r#"{"id":7,"method":"ping"}"#, "jsonrpc must be \"2.0\"", Some("7")),
        (r#"{"jsonrpc":"1.0","id":"abc","method":"ping"}"#, "jsonrpc must be \"2.0\"", Some(r#""abc""#)),
        (r#"{"jsonrpc":2.0,"id":8,"method":"ping"}"#, "jsonrpc must be \"2.0\"", Some("8")),
        (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, "id must be a string or an integer", None),
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, "id must be a string or an integer", None),
        (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, "id must be a string or an integer", None),
        (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, "id must be a string or an integer", None),
        (r#"{"jsonrpc":"2.0","id":3,"method":5}"#, "method must be a string", Some("3")),
        (r#"{"jsonrpc":"2.0","method":["ping"]}"#, "method must be a string", None),
    ];
    for (body, reason, id) in cases {
        let r = rejected(body);
        assert_eq!(invalid_request_reason(&r.error), reason, "{body}");
        assert_eq!(echoed(&r), id, "{body}");
    }
}

#[test]
fn ids_beyond_i64_and_exponent_ids_are_rejected() {
    for id in ["18446744073709551616", "1e3", "1.0", "-0.0"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let r = rejected(&body);
        assert_eq!(invalid_request_reason(&r.error), "id must be a string or an integer", "{id}");
    }
}

#[test]
fn params_that_are_not_an_object_are_invalid_params_with_the_id() {
    for params in ["[1,2]", "\"x\"", "3", "true"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{params}}}"#);
        let r = rejected(&body);
        let GatewayError::InvalidParams(field) = &r.error else { panic!("{params}: {:?}", r.error) };
        assert_eq!(field.path, "params");
        assert_eq!(field.rule, "expected an object");
        assert_eq!(echoed(&r), Some(r#""p""#));
    }
}

#[test]
fn duplicate_envelope_keys_are_refused_not_resolved() {
    // Two ids (or two methods) would let two parsers disagree about what was asked.
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#,
    ] {
        let r = rejected(body);
        assert_eq!(invalid_request_reason(&r.error), "malformed JSON-RPC envelope", "{body}");
    }
}

#[test]
fn unknown_envelope_members_are_ignored() {
    let Message::Request(r) = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping","extra":[1]}"#) else {
        panic!("not a request")
    };
    assert_eq!(r.method, "ping");
}

#[test]
fn deeply_nested_bodies_do_not_overflow_the_stack() {
    // serde_json skips raw values iteratively, so depth alone neither crashes nor rejects: the
    // bytes are valid JSON and are classified like any other body.
    let depth = 100_000;
    let array = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let Ok(Incoming::Batch(items)) = parse_body(array.as_bytes()) else { panic!("not a batch") };
    assert_eq!(items.len(), 1);
    let Err(member) = &items[0] else { panic!("a nested array accepted as a message") };
    assert_eq!(invalid_request_reason(&member.error), "expected a JSON object");

    let in_params = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{array}}}}}"#);
    let Message::Request(request) = single(&in_params) else { panic!("not a request") };
    let params = request.params.expect("params kept");
    assert_eq!(params.get().len(), array.len() + 6);
}

#[test]
fn parse_message_does_not_accept_batches() {
    let r = parse_message(br#"[{"jsonrpc":"2.0","method":"m"}]"#).unwrap_err();
    assert_eq!(invalid_request_reason(&r.error), "expected a JSON object");
}

// ---- parse_params -------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct CallParams {
    name: String,
    arguments: Option<Arguments>,
    mode: Option<Mode>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Arguments {
    x: u32,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Fast,
    Slow,
}

fn params_error(params: &str) -> FieldError {
    let raw = RawValue::from_string(params.to_string()).expect("test params are JSON");
    match parse_params::<CallParams>(Some(&raw)) {
        Err(GatewayError::InvalidParams(field)) => field,
        other => panic!("expected InvalidParams for {params}, got {other:?}"),
    }
}

#[test]
fn parse_params_accepts_well_formed_params() {
    let raw = RawValue::from_string(r#"{"name":"echo","arguments":{"x":3},"mode":"slow"}"#.into()).unwrap();
    let p: CallParams = parse_params(Some(&raw)).expect("valid params");
    assert_eq!(p.name, "echo");
    assert_eq!(p.arguments.map(|a| a.x), Some(3));
    assert!(matches!(p.mode, Some(Mode::Slow)));
}

#[test]
fn parse_params_names_the_wrong_field_without_echoing_it() {
    let wrong_type = params_error(r#"{"name":{"secret":"DISTINCTIVE-VALUE-4711"}}"#);
    assert_eq!(wrong_type.path, "params.name");
    assert_eq!(wrong_type.rule, "expected a string");

    let nested = params_error(r#"{"name":"echo","arguments":{"x":"DISTINCTIVE-VALUE-4711"}}"#);
    assert_eq!(nested.path, "params.arguments.x");
    assert_eq!(nested.rule, "expected u32");

    let negative = params_error(r#"{"name":"echo","arguments":{"x":-4711}}"#);
    assert_eq!(negative.path, "params.arguments.x");
    assert!(!negative.to_string().contains("4711"), "{negative}");

    let variant = params_error(r#"{"name":"echo","mode":"DISTINCTIVE-VALUE-4711"}"#);
    assert_eq!(variant.path, "params.mode");
    assert_eq!(variant.rule, "expected `fast` or `slow`");

    for field in [wrong_type, nested, variant] {
        let message = GatewayError::InvalidParams(field).to_rpc_error(WireEra::Modern);
        assert!(!message.to_string().contains("DISTINCTIVE"), "{message}");
    }
}

#[test]
fn parse_params_never_echoes_a_value_that_mentions_expected() {
    // serde writes `invalid type: string "<value>", expected u32`: the value comes first, so a
    // value containing the word "expected" must not fool the rule extraction.
    let field = params_error(r#"{"name":"echo","arguments":{"x":"a expected LEAK-4711 at line 9"}}"#);
    assert_eq!(field.path, "params.arguments.x");
    assert_eq!(field.rule, "expected u32");
    assert!(!field.to_string().contains("LEAK"), "{field}");
}

#[test]
fn parse_params_reports_missing_fields_as_required() {
    let top = params_error("{}");
    assert_eq!(top.path, "params.name");
    assert_eq!(top.rule, "required");

    let nested = params_error(r#"{"name":"echo","arguments":{}}"#);
    assert_eq!(nested.path, "params.arguments.x");
    assert_eq!(nested.rule, "required");

    // Absent params are parsed as `{}`.
    let Err(GatewayError::InvalidParams(absent)) = parse_params::<CallParams>(None) else {
        panic!("absent params accepted")
    };
    assert_eq!(absent.path, "params.name");
    assert_eq!(absent.rule, "required");
}

#[test]
fn parse_params_of_the_wrong_shape_names_params() {
    let raw = RawValue::from_string("[1,2]".into()).unwrap();
    let Err(GatewayError::InvalidParams(field)) = parse_params::<CallParams>(Some(&raw)) else {
        panic!("an array accepted as params")
    };
    // A struct accepts a sequence too; the first element is then the wrong type.
    assert_eq!(field.path, "params[0]");
    assert_eq!(field.rule, "expected a string");
}

// ---- formatting ---------------------------------------------------------------------------------

#[test]
fn result_bytes_splice_valid_json_that_round_trips() {
    let id = RawValue::from_string(r#""req-1""#.into()).unwrap();
    let result = RawValue::from_string(r#"{"tools": [ {"name":"a"} ]}"#.into()).unwrap();
    let bytes = result_bytes(&id, &result);
    let value: Value = serde_json::from_slice(&bytes).expect("valid JSON");
    assert_eq!(value, json!({ "jsonrpc": "2.0", "id": "req-1", "result": { "tools": [{ "name": "a" }] } }));
    // The result is spliced, not re-serialised.
    assert!(String::from_utf8(bytes.clone()).unwrap().contains(r#"{"tools": [ {"name":"a"} ]}"#));
    // And our own parser reads it back as a response to the same id.
    let Message::Response(response) = parse_message(&bytes).expect("a response") else { panic!("not a response") };
    assert_eq!(response.id.raw().get(), id.get());
    assert_eq!(response.result.as_deref().map(RawValue::get), Some(result.get()));
}

#[test]
fn error_bytes_round_trip_with_and_without_an_id() {
    let error = GatewayError::MethodNotFound.to_rpc_error(WireEra::Legacy);
    let id = RequestId::from_u64(12);

    let with_id = error_bytes(Some(id.raw()), &error);
    let value: Value = serde_json::from_slice(&with_id).expect("valid JSON");
    assert_eq!(value, json!({ "jsonrpc": "2.0", "id": 12, "error": error }));
    let Message::Response(response) = parse_message(&with_id).expect("a response") else { panic!("not a response") };
    assert_eq!(response.id, id);
    assert!(response.result.is_none());

    let without = error_bytes(None, &error);
    let value: Value = serde_json::from_slice(&without).expect("valid JSON");
    assert_eq!(value["id"], Value::Null);
    assert_eq!(value["error"]["code"], json!(-32601));
}

#[test]
fn request_and_notification_bytes_parse_back() {
    let params = json!({ "name": "echo", "arguments": { "text": "hi \"there\"\n" } });
    let Message::Request(r) = parse_message(&request_bytes(41, "tools/call", &params)).unwrap() else {
        panic!("not a request")
    };
    assert_eq!(r.id, RequestId::from_u64(41));
    assert_eq!(r.method, "tools/call");
    let back: Value = serde_json::from_str(r.params.unwrap().get()).unwrap();
    assert_eq!(back, params);

    let Message::Notification(n) =
        parse_message(&notification_bytes("notifications/tools/list_changed", &json!({}))).unwrap()
    else {
        panic!("not a notification")
    };
    assert_eq!(n.method, "notifications/tools/list_changed");
}

#[test]
fn raw_preserves_the_value() {
    let value = json!({ "z": 1, "a": [true, null, 1.5, "s"] });
    let raw = raw(&value);
    assert_eq!(serde_json::from_str::<Value>(raw.get()).unwrap(), value);
}

// ---- properties ---------------------------------------------------------------------------------

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

/// Any JSON value, with envelope member names over-represented so objects often look like
/// (broken) messages.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        Just(json!("2.0")),
    ];
    let key = prop_oneof![
        Just("jsonrpc".to_string()),
        Just("id".to_string()),
        Just("method".to_string()),
        Just("params".to_string()),
        Just("result".to_string()),
        Just("error".to_string()),
        any::<String>(),
    ];
    leaf.prop_recursive(4, 64, 8, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn is_parse(result: &Result<Incoming, Rejected>) -> bool {
    matches!(result, Err(Rejected { error: GatewayError::Parse, .. }))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic_and_non_json_is_a_parse_error(
        bytes in proptest::collection::vec(any::<u8>(), 0..512)
    ) {
        let result = parse_body(&bytes);
        if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
            prop_assert!(is_parse(&result), "{:?}", result);
        }
    }

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        let _ = parse_body(text.as_bytes());
        let _ = parse_message(text.as_bytes());
    }

    #[test]
    fn arbitrary_json_never_panics_and_is_never_a_parse_error(value in json_value()) {
        let bytes = serde_json::to_vec(&value).expect("a Value serialises");
        let result = parse_body(&bytes);
        prop_assert!(!is_parse(&result), "{} gave {:?}", value, result);
        if let Ok(Incoming::Batch(items)) = &result {
            for item in items {
                prop_assert!(
                    !matches!(item, Err(Rejected { error: GatewayError::Parse, .. })),
                    "{:?}",
                    item
                );
            }
        }
    }

    #[test]
    fn valid_requests_classify_as_requests_with_their_id(
        method in any::<String>(),
        id in any::<i64>(),
        params in proptest::option::of(proptest::collection::btree_map(any::<String>(), json_value(), 0..4)),
    ) {
        let mut message = json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if let Some(params) = &params {
            message["params"] = json!(params);
        }
        let bytes = serde_json::to_vec(&message).expect("a Value serialises");
        let Ok(Incoming::Single(Message::Request(request))) = parse_body(&bytes) else {
            return Err(TestCaseError::fail(format!("{message} did not classify as a request")));
        };
        prop_assert_eq!(request.id.raw().get(), id.to_string());
        prop_assert_eq!(&request.method, &method);
        let echoed: Option<Value> = request
            .params
            .as_deref()
            .map(|p| serde_json::from_str(p.get()).expect("params are JSON"));
        prop_assert_eq!(echoed, params.map(|p| json!(p)));
    }

    #[test]
    fn valid_requests_with_string_ids_echo_them(method in any::<String>(), id in any::<String>()) {
        let bytes = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "method": method }))
            .expect("a Value serialises");
        let Ok(Incoming::Single(Message::Request(request))) = parse_body(&bytes) else {
            return Err(TestCaseError::fail("did not classify as a request"));
        };
        prop_assert_eq!(request.id.to_value(), json!(id));
    }

    #[test]
    fn invalid_messages_with_a_readable_id_echo_it(id in any::<i64>(), version in "[0-9.]{0,4}") {
        prop_assume!(version != "2.0");
        let bytes = serde_json::to_vec(&json!({ "jsonrpc": version, "id": id, "method": "ping" }))
            .expect("a Value serialises");
        let Err(rejected) = parse_body(&bytes) else {
            return Err(TestCaseError::fail("accepted a wrong jsonrpc version"));
        };
        let expected = id.to_string();
        prop_assert_eq!(echoed(&rejected), Some(expected.as_str()));
    }
}
