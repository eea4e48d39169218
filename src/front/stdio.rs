//! MCP on stdin/stdout (`gatehouse --stdio`): newline-delimited JSON-RPC, one implicit session.
//!
//! Requests run concurrently (a slow tool call does not hold up a ping); one writer task owns
//! stdout so lines never interleave. Logs go to stderr, never stdout.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

use super::session::{InflightGuard, Session};
use super::{Ctx, Era, Front};
use crate::error::{GatewayError, WireEra};
use crate::pipeline::Principal;
use crate::protocol::jsonrpc::{self, Incoming, Message, Request, parse_params};
use crate::protocol::{ProtocolVersion, meta};
use crate::upstream::{Inbound, Relay};

pub async fn serve(front: Arc<Front>, principal: Principal) -> std::io::Result<()> {
    let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(256);
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = out_rx.recv().await {
            line.push(b'\n');
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });

    let session: Arc<Mutex<Option<Arc<Session>>>> = Arc::default();
    tokio::spawn(list_changed(front.clone(), session.clone(), out.clone()));

    let mut lines = FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(front.settings.max_body_bytes));
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                let answer = front.error_answer(WireEra::Legacy, None, &GatewayError::PayloadTooLarge);
                let _ = out.send(answer.body.into_vec()).await;
                continue;
            }
            Err(LinesCodecError::Io(e)) => return Err(e),
        };
        if line.trim().is_empty() {
            continue;
        }
        let message = match jsonrpc::parse_body(line.as_bytes()) {
            Ok(Incoming::Single(message)) => message,
            Ok(Incoming::Batch(_)) => {
                let e = GatewayError::InvalidRequest("batches are not supported on stdio");
                let _ = out.send(front.error_answer(WireEra::Legacy, None, &e).body.into_vec()).await;
                continue;
            }
            Err(rejected) => {
                let id = rejected.id.as_ref().map(|id| id.raw());
                let _ = out.send(front.error_answer(WireEra::Legacy, id, &rejected.error).body.into_vec()).await;
                continue;
            }
        };
        match message {
            Message::Request(req) if req.method == "initialize" => {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct InitializeParams {
                    protocol_version: String,
                    #[serde(default)]
                    capabilities: Value,
                }
                let body = match parse_params::<InitializeParams>(req.params.as_deref()) {
                    Ok(p) => {
                        let version = ProtocolVersion::negotiate_legacy(&p.protocol_version);
                        let s = Arc::new(Session::new(version, principal.clone(), p.capabilities));
                        // What the session is told outside any request (resource updates, a
                        // search that changed its tools) goes out on stdout like the rest.
                        let (_, mut notifications) = s.open_stream();
                        let stdout = out.clone();
                        tokio::spawn(async move {
                            while let Some(message) = notifications.recv().await {
                                if stdout.send(message.to_vec()).await.is_err() {
                                    return;
                                }
                            }
                        });
                        *session.lock().expect("stdio session lock") = Some(s);
                        jsonrpc::result_bytes(req.id.raw(), &jsonrpc::raw(&front.initialize_result(version)))
                    }
                    Err(e) => front.error_answer(WireEra::Legacy, Some(req.id.raw()), &e).body.into_vec(),
                };
                let _ = out.send(body).await;
            }
            Message::Request(req) => {
                let envelope = req
                    .params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .and_then(|p| p.get("_meta").cloned())
                    .filter(|m| m.get(meta::PROTOCOL_VERSION).is_some());
                let current = session.lock().expect("stdio session lock").clone();
                let (relay, inbound) = Relay::channel();
                let ctx = match (envelope, current) {
                    (Some(meta), _) => Ctx::modern(principal.clone(), Some(relay), meta.get(meta::LOG_LEVEL).is_some()),
                    (None, Some(s)) => Ctx::legacy(s, principal.clone(), Some(relay)),
                    // A client that skipped initialize is served as the oldest legacy revision.
                    (None, None) => Ctx {
                        era: Era::Legacy(ProtocolVersion::V2025_03_26),
                        principal: principal.clone(),
                        session: None,
                        relay: Some(relay),
                        wants_logs: true,
                        baggage_session: None,
                    },
                };
                let cancel = ctx.session.as_ref().map(|s| s.track(req.id.raw().get()));
                tokio::spawn(answer(front.clone(), ctx, req, inbound, cancel, out.clone()));
            }
            Message::Notification(n) => {
                if let Some(s) = session.lock().expect("stdio session lock").as_ref() {
                    front.on_notification(s, &n);
                }
            }
            Message::Response(r) => {
                if let Some(s) = session.lock().expect("stdio session lock").as_ref() {
                    front.on_response(s, r);
                }
            }
        }
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}

/// Runs one request: relayed upstream messages go out as lines as they come, then the answer
/// (none if the client cancelled it).
async fn answer(
    front: Arc<Front>,
    ctx: Ctx,
    req: Request,
    mut inbound: mpsc::Receiver<Inbound>,
    cancel: Option<(CancellationToken, InflightGuard)>,
    out: mpsc::Sender<Vec<u8>>,
) {
    let (token, _guard) = match cancel {
        Some((token, guard)) => (token, Some(guard)),
        None => (CancellationToken::new(), None),
    };
    let call = front.answer(&ctx, req);
    tokio::pin!(call);
    loop {
        tokio::select! {
            biased;
            Some(message) = inbound.recv() => {
                if let Some(frame) = front.relay_to_agent(&ctx, message) {
                    let _ = out.send(frame).await;
                }
            }
            answer = &mut call => {
                // Messages queued while the answer was produced still go first.
                while let Ok(message) = inbound.try_recv() {
                    if let Some(frame) = front.relay_to_agent(&ctx, message) {
                        let _ = out.send(frame).await;
                    }
                }
                let _ = out.send(answer.body.into_vec()).await;
                return;
            }
            () = token.cancelled() => return,
        }
    }
}

/// Tells the stdio client when the catalog it sees changed (after it initialized).
async fn list_changed(front: Arc<Front>, session: Arc<Mutex<Option<Arc<Session>>>>, out: mpsc::Sender<Vec<u8>>) {
    let mut catalog = front.catalog.subscribe();
    let mut last = catalog.borrow_and_update().view_hashes;
    while catalog.changed().await.is_ok() {
        let now = catalog.borrow_and_update().view_hashes;
        if session.lock().expect("stdio session lock").is_some() {
            for method in super::changed_lists(last, now) {
                if out.send(jsonrpc::notification_bytes(method, &json!({}))).await.is_err() {
                    return;
                }
            }
        }
        last = now;
    }
}
