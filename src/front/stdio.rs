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

use super::session::Session;
use super::{Ctx, Era, Front};
use crate::error::{GatewayError, WireEra};
use crate::pipeline::Principal;
use crate::protocol::jsonrpc::{self, Incoming, Message, parse_params};
use crate::protocol::{ProtocolVersion, meta};

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

    let mut lines = FramedRead::new(
        tokio::io::stdin(),
        LinesCodec::new_with_max_length(front.settings.max_body_bytes),
    );
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                let answer =
                    front.error_answer(WireEra::Legacy, None, &GatewayError::PayloadTooLarge);
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
                let _ = out
                    .send(
                        front
                            .error_answer(WireEra::Legacy, None, &e)
                            .body
                            .into_vec(),
                    )
                    .await;
                continue;
            }
            Err(rejected) => {
                let id = rejected.id.as_ref().map(|id| id.raw());
                let _ = out
                    .send(
                        front
                            .error_answer(WireEra::Legacy, id, &rejected.error)
                            .body
                            .into_vec(),
                    )
                    .await;
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
                        *session.lock().expect("stdio session lock") = Some(s);
                        jsonrpc::result_bytes(
                            req.id.raw(),
                            &jsonrpc::raw(&front.initialize_result(version)),
                        )
                    }
                    Err(e) => front
                        .error_answer(WireEra::Legacy, Some(req.id.raw()), &e)
                        .body
                        .into_vec(),
                };
                let _ = out.send(body).await;
            }
            Message::Request(req) => {
                let modern = req
                    .params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    .is_some_and(|p| {
                        p.get("_meta")
                            .and_then(|m| m.get(meta::PROTOCOL_VERSION))
                            .is_some()
                    });
                let current = session.lock().expect("stdio session lock").clone();
                let era = match (&current, modern) {
                    (_, true) => Era::Modern,
                    (Some(s), false) => Era::Legacy(s.version),
                    // A client that skipped initialize is served as the oldest legacy revision.
                    (None, false) => Era::Legacy(ProtocolVersion::V2025_03_26),
                };
                let ctx = Ctx {
                    era,
                    principal: principal.clone(),
                    session: current,
                };
                let front = front.clone();
                let out = out.clone();
                tokio::spawn(async move {
                    let answer = front.answer(&ctx, req).await;
                    let _ = out.send(answer.body.into_vec()).await;
                });
            }
            Message::Notification(n) => {
                front.metrics.count_request(&n.method, "ok");
                if n.method == "notifications/initialized" {
                    if let Some(s) = session.lock().expect("stdio session lock").as_ref() {
                        s.mark_initialized();
                    }
                }
            }
            Message::Response(_) => {}
        }
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}

/// Tells the stdio client when the catalog it sees changed (after it initialized).
async fn list_changed(
    front: Arc<Front>,
    session: Arc<Mutex<Option<Arc<Session>>>>,
    out: mpsc::Sender<Vec<u8>>,
) {
    let mut catalog = front.catalog.subscribe();
    let mut last = catalog.borrow_and_update().view_hashes;
    while catalog.changed().await.is_ok() {
        let now = catalog.borrow_and_update().view_hashes;
        if session.lock().expect("stdio session lock").is_some() {
            for method in super::changed_lists(last, now) {
                if out
                    .send(jsonrpc::notification_bytes(method, &json!({})))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
        last = now;
    }
}
