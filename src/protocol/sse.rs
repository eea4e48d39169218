//! Server-Sent Events framing for the responses and streams Gatehouse writes.
//!
//! Reading SSE is `sse-stream`'s job; this module only writes frames. A `data:` payload may hold
//! newlines (upstream JSON passed through byte for byte can be pretty-printed), so each line
//! becomes its own `data:` field, which SSE readers join back with `\n`.

use bytes::{BufMut, Bytes, BytesMut};

/// One `message` event carrying a JSON-RPC message.
pub fn message_event(id: Option<&str>, json: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(json.len() + 48);
    if let Some(id) = id {
        out.put_slice(b"id: ");
        out.put_slice(id.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_slice(b"event: message\n");
    for line in json.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        out.put_slice(b"data: ");
        out.put_slice(line);
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// The 2025-11-25 priming event: an id and an empty `data` field, sent when a stream opens.
pub fn priming_event(id: &str, retry_ms: u64) -> Bytes {
    Bytes::from(format!("id: {id}\nretry: {retry_ms}\ndata: \n\n"))
}

/// A comment line: ignored by readers, but keeps idle proxies from reaping the connection.
pub fn keep_alive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_line_payloads_become_several_data_fields() {
        let frame = message_event(Some("s1-3"), b"{\n  \"a\": 1\n}");
        assert_eq!(&frame[..], b"id: s1-3\nevent: message\ndata: {\ndata:   \"a\": 1\ndata: }\n\n".as_slice());
    }

    #[test]
    fn single_line_payload_without_id() {
        assert_eq!(&message_event(None, b"{}")[..], b"event: message\ndata: {}\n\n".as_slice());
    }
}
