//! JSON-RPC 2.0 as MCP uses it: classify an incoming body, parse params with field-precise
//! errors, and format responses without re-serialising payloads we only pass through.
//!
//! Payloads stay `RawValue` (bytes as received) wherever the gateway does not act on them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::error::{FieldError, GatewayError};

/// A request id exactly as the peer wrote it (a JSON string or integer, never null).
#[derive(Debug, Clone)]
pub struct RequestId(Box<RawValue>);

impl RequestId {
    pub fn raw(&self) -> &RawValue {
        &self.0
    }

    pub fn from_u64(n: u64) -> Self {
        Self(RawValue::from_string(n.to_string()).expect("an integer is valid JSON"))
    }

    /// The id as a JSON value, for the rare places that need to compare or store it.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    fn parse(raw: Box<RawValue>) -> Result<Self, GatewayError> {
        let text = raw.get();
        let valid = match text.as_bytes().first() {
            Some(b'"') => true,
            Some(b'-' | b'0'..=b'9') => text.parse::<i64>().is_ok(),
            _ => false,
        };
        if valid { Ok(Self(raw)) } else { Err(GatewayError::InvalidRequest("id must be a string or an integer")) }
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

#[derive(Debug)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    pub params: Option<Box<RawValue>>,
}

#[derive(Debug)]
pub struct Notification {
    pub method: String,
    pub params: Option<Box<RawValue>>,
}

/// A response the peer sent us (to a request we made, e.g. a server→client request).
#[derive(Debug)]
pub struct Response {
    pub id: RequestId,
    pub result: Option<Box<RawValue>>,
    pub error: Option<Box<RawValue>>,
}

#[derive(Debug)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// A message that could not be accepted, with its id when one could be read.
#[derive(Debug)]
pub struct Rejected {
    pub id: Option<RequestId>,
    pub error: GatewayError,
}

#[derive(Debug)]
pub enum Incoming {
    Single(Message),
    Batch(Vec<Result<Message, Rejected>>),
}

/// Every field optional and raw, so one parse tells a malformed body from a wrong-shaped one.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<Box<RawValue>>,
    /// `Present(raw)` even for `null`: MCP forbids null ids and must be able to say so.
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Box<RawValue>>,
    #[serde(default)]
    params: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Box<RawValue>>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Box<RawValue>>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// Classifies a POST body: one message, or a batch (whose members are judged one by one).
pub fn parse_body(body: &[u8]) -> Result<Incoming, Rejected> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b'[') => {
            let items: Vec<Box<RawValue>> =
                serde_json::from_slice(body).map_err(|e| reject(None, syntax_or(e, "batch")))?;
            if items.is_empty() {
                return Err(reject(None, GatewayError::InvalidRequest("empty batch")));
            }
            Ok(Incoming::Batch(items.iter().map(|item| parse_message(item.get().as_bytes())).collect()))
        }
        _ => parse_message(body).map(Incoming::Single),
    }
}

/// Parses one JSON-RPC message (also used for stdio lines and SSE `data:` payloads).
pub fn parse_message(bytes: &[u8]) -> Result<Message, Rejected> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        let error = if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
            GatewayError::InvalidRequest("expected a JSON object")
        } else {
            GatewayError::Parse
        };
        return Err(reject(None, error));
    }
    let env: Envelope = serde_json::from_slice(bytes).map_err(|e| reject(None, syntax_or(e, "message")))?;

    // Read the id first so every later rejection can echo it.
    let id = match env.id {
        Some(raw) => Some(RequestId::parse(raw).map_err(|e| reject(None, e))?),
        None => None,
    };
    if env.jsonrpc.as_deref().map(RawValue::get) != Some("\"2.0\"") {
        return Err(reject(id, GatewayError::InvalidRequest("jsonrpc must be \"2.0\"")));
    }
    let method = match env.method {
        Some(raw) => match serde_json::from_str::<String>(raw.get()) {
            Ok(m) => Some(m),
            Err(_) => {
                return Err(reject(id, GatewayError::InvalidRequest("method must be a string")));
            }
        },
        None => None,
    };
    if let Some(params) = &env.params {
        if !params.get().starts_with('{') {
            let error =
                GatewayError::InvalidParams(FieldError { path: "params".into(), rule: "expected an object".into() });
            return Err(reject(id, error));
        }
    }

    match (method, id) {
        (Some(method), Some(id)) => Ok(Message::Request(Request { id, method, params: env.params })),
        (Some(method), None) => Ok(Message::Notification(Notification { method, params: env.params })),
        (None, Some(id)) if env.result.is_some() != env.error.is_some() => {
            Ok(Message::Response(Response { id, result: env.result, error: env.error }))
        }
        (None, id) => Err(reject(id, GatewayError::InvalidRequest("expected a request, notification or response"))),
    }
}

fn reject(id: Option<RequestId>, error: GatewayError) -> Rejected {
    Rejected { id, error }
}

fn syntax_or(e: serde_json::Error, _what: &'static str) -> GatewayError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => GatewayError::Parse,
        Category::Data => GatewayError::InvalidRequest("malformed JSON-RPC envelope"),
    }
}

/// Parses `params` into `T`, turning serde's complaint into `path: rule` without echoing values.
pub fn parse_params<T: DeserializeOwned>(params: Option<&RawValue>) -> Result<T, GatewayError> {
    parse_at(params.map_or("{}", RawValue::get).as_bytes(), "params")
}

/// Parses JSON `bytes` into `T`; errors name the failing field under `root` (`params.name`,
/// `body.items[2].id`) and never echo values. Malformed JSON is a parse error.
pub fn parse_at<T: DeserializeOwned>(bytes: &[u8], root: &str) -> Result<T, GatewayError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        if matches!(e.inner().classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof) {
            return GatewayError::Parse;
        }
        let path = e.path().to_string();
        let path = match path.as_str() {
            "." => root.to_string(),
            // A top-level index joins without a dot: `params[0]`, not `params.[0]`.
            p if p.starts_with('[') => format!("{root}{p}"),
            p => format!("{root}.{p}"),
        };
        GatewayError::InvalidParams(field_error(path, &e.into_inner().to_string()))
    })
}

/// serde's messages quote the offending value (`invalid type: string "x", expected u32`); keep
/// only the rule so errors never echo input.
fn field_error(path: String, message: &str) -> FieldError {
    if let Some(field) = message.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
        let path = format!("{path}.{field}");
        return FieldError { path, rule: "required".into() };
    }
    // The *last* "expected": serde puts the offending value first, and a value may itself
    // contain the word.
    let rule = match message.rsplit_once("expected ") {
        Some((_, expected)) => {
            let expected = expected.split(" at line ").next().unwrap_or(expected);
            format!("expected {expected}")
        }
        None => "invalid value".into(),
    };
    FieldError { path, rule }
}

/// `{"jsonrpc":"2.0","id":…,"result":…}` spliced from raw parts (no re-serialisation).
pub fn result_bytes(id: &RawValue, result: &RawValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 + id.get().len() + result.get().len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.get().as_bytes());
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result.get().as_bytes());
    out.push(b'}');
    out
}

/// An error response; `id` is `null` when the request's id could not be read.
pub fn error_bytes(id: Option<&RawValue>, error: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.map_or("null", RawValue::get).as_bytes());
    out.extend_from_slice(b",\"error\":");
    out.extend_from_slice(error.to_string().as_bytes());
    out.push(b'}');
    out
}

pub fn notification_bytes(method: &str, params: &Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string().into_bytes()
}

pub fn request_bytes(id: u64, method: &str, params: &Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string().into_bytes()
}

pub fn raw(value: &Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("a serde_json::Value serialises to valid JSON")
}

#[cfg(test)]
mod tests;
