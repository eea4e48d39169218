//! stdio upstreams: a child process speaking newline-delimited JSON-RPC on stdin/stdout.
//!
//! One reader task owns stdout and routes each line: responses to the waiting request,
//! progress to the request whose (rewritten) progress token it names, logs and server requests
//! to the only request in flight (a single stream cannot say more), list changes to the
//! supervisor. stderr goes to the gateway's log line by line. The process runs in its own
//! process group so that shutdown (stdin closed, then SIGTERM, then SIGKILL) also reaches
//! grandchildren such as the node process `npx` starts.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::relay::{self, Relay};
use super::{
    Era, UpstreamError, discovered_capabilities, initialize_params, initialized, stamp_envelope,
};
use crate::config::StdioCommand;

/// How long a probe may take before the server is treated as legacy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a child gets to exit after stdin closes, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Longest stderr line kept in the log.
const STDERR_LINE_MAX: usize = 4096;

struct Pending {
    done: oneshot::Sender<Result<Box<RawValue>, UpstreamError>>,
    relay: Option<Relay>,
    /// The agent's progress token, replaced on this hop by `gatehouse-<id>`.
    progress_token: Option<Value>,
}

/// State shared between the requesters and the reader task of one running process.
struct Shared {
    namespace: Arc<str>,
    pending: Mutex<HashMap<u64, Pending>>,
    writer: mpsc::Sender<Vec<u8>>,
    closed: CancellationToken,
    list_changed: Arc<Notify>,
}

/// One running child process and what the handshake settled.
struct Conn {
    shared: Arc<Shared>,
    era: Era,
    capabilities: Option<Value>,
    child: tokio::sync::Mutex<Option<Child>>,
    pid: Option<u32>,
}

pub struct StdioTransport {
    namespace: Arc<str>,
    command: StdioCommand,
    timeout: Duration,
    max_message_bytes: usize,
    next_id: AtomicU64,
    conn: RwLock<Option<Arc<Conn>>>,
    connecting: tokio::sync::Mutex<()>,
    /// Set once the server died on `server/discover`: some legacy servers exit on unknown
    /// pre-initialize requests, so it is never probed again.
    legacy_only: AtomicBool,
    list_changed: Arc<Notify>,
    /// Set by `shutdown`: no process is started afterwards, whoever asks.
    stopped: AtomicBool,
}

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: i64,
    #[serde(default)]
    message: String,
    #[serde(default)]
    data: Option<Value>,
}

impl StdioTransport {
    pub fn new(
        namespace: &str,
        command: StdioCommand,
        timeout: Duration,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            command,
            timeout,
            max_message_bytes,
            next_id: AtomicU64::new(1),
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            legacy_only: AtomicBool::new(false),
            list_changed: Arc::new(Notify::new()),
            stopped: AtomicBool::new(false),
        }
    }

    pub fn era(&self) -> Option<Era> {
        self.current().map(|c| c.era)
    }

    pub fn pid(&self) -> Option<u32> {
        self.current().and_then(|c| c.pid)
    }

    /// Resolves when the running process has exited (pending forever if none runs).
    pub async fn closed(&self) {
        match self.current() {
            Some(conn) => conn.shared.closed.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves when the server announces a list change.
    pub async fn list_changed(&self) {
        self.list_changed.notified().await;
    }

    pub async fn ensure_connected(&self) -> Result<Option<Value>, UpstreamError> {
        Ok(self.connection().await?.capabilities.clone())
    }

    /// Stops the process: closing stdin asks politely, SIGTERM insists, SIGKILL ends it.
    pub async fn shutdown(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        // Wait out a start in progress, so it cannot leave a process behind.
        let _no_start_in_progress = self.connecting.lock().await;
        let conn = self.conn.write().expect("conn lock poisoned").take();
        if let Some(conn) = conn {
            stop(&conn, &self.namespace).await;
        }
    }

    /// Forgets a dead process so the next request starts a new one.
    pub fn reset(&self) {
        let mut slot = self.conn.write().expect("conn lock poisoned");
        if slot
            .as_ref()
            .is_some_and(|c| c.shared.closed.is_cancelled())
        {
            *slot = None;
        }
    }

    pub async fn request(
        &self,
        method: &str,
        params: Map<String, Value>,
        relay: Option<&Relay>,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let conn = self.connection().await?;
        self.send(&conn, method, params, relay, self.timeout).await
    }

    fn current(&self) -> Option<Arc<Conn>> {
        self.conn
            .read()
            .expect("conn lock poisoned")
            .clone()
            .filter(|c| !c.shared.closed.is_cancelled())
    }

    async fn connection(&self) -> Result<Arc<Conn>, UpstreamError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let conn = Arc::new(self.connect().await?);
        *self.conn.write().expect("conn lock poisoned") = Some(conn.clone());
        Ok(conn)
    }

    async fn connect(&self) -> Result<Conn, UpstreamError> {
        let mut conn = self.spawn()?;
        if !self.legacy_only.load(Ordering::Relaxed) {
            // The probe carries the 2026-07-28 envelope; `initialize` below goes bare.
            conn.era = Era::Modern;
            let probe = self
                .send(&conn, "server/discover", Map::new(), None, PROBE_TIMEOUT)
                .await;
            conn.era = Era::Bare;
            match probe {
                Ok(result) => {
                    if let Some(capabilities) = discovered_capabilities(&result) {
                        tracing::info!(namespace = %self.namespace, "stdio upstream speaks 2026-07-28");
                        conn.era = Era::Modern;
                        conn.capabilities = Some(capabilities);
                        return Ok(conn);
                    }
                }
                Err(_) if conn.shared.closed.is_cancelled() => {
                    tracing::info!(namespace = %self.namespace, "stdio upstream exited on server/discover; restarting it as legacy");
                    self.legacy_only.store(true, Ordering::Relaxed);
                    conn = self.spawn()?;
                }
                // Any other answer, or none in time, means legacy; the process lives on.
                Err(_) => {}
            }
        }
        match self
            .send(&conn, "initialize", initialize_params(), None, self.timeout)
            .await
        {
            Ok(result) => {
                let (version, capabilities) = initialized(&result)?;
                conn.era = Era::Legacy(version);
                conn.capabilities = Some(capabilities);
                write_line(
                    &conn.shared,
                    &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
                )
                .await?;
                tracing::info!(namespace = %self.namespace, version = %version, pid = ?conn.pid, "stdio upstream initialized");
                Ok(conn)
            }
            Err(UpstreamError::Rpc { code: -32601, .. }) => Ok(conn),
            Err(e) => {
                stop(&conn, &self.namespace).await;
                Err(e)
            }
        }
    }

    fn spawn(&self) -> Result<Conn, UpstreamError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(UpstreamError::Spawn("the gateway is shutting down".into()));
        }
        let c = &self.command;
        let mut command = Command::new(&c.command);
        command
            .args(&c.args)
            .env_clear()
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &c.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| UpstreamError::Spawn(format!("{}: {e}", c.command)))?;
        let pid = child.id();
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => return Err(UpstreamError::Spawn("child stdio not captured".into())),
            };
        let (writer, lines_out) = mpsc::channel::<Vec<u8>>(256);
        let shared = Arc::new(Shared {
            namespace: self.namespace.clone(),
            pending: Mutex::new(HashMap::new()),
            writer,
            closed: CancellationToken::new(),
            list_changed: self.list_changed.clone(),
        });
        tokio::spawn(write_stdin(stdin, lines_out, shared.closed.clone()));
        tokio::spawn(read_stdout(shared.clone(), stdout, self.max_message_bytes));
        tokio::spawn(log_stderr(self.namespace.clone(), stderr));
        tracing::info!(namespace = %self.namespace, pid = ?pid, command = %c.command, "stdio upstream started");
        Ok(Conn {
            shared,
            era: Era::Bare,
            capabilities: None,
            child: tokio::sync::Mutex::new(Some(child)),
            pid,
        })
    }

    async fn send(
        &self,
        conn: &Conn,
        method: &str,
        mut params: Map<String, Value>,
        relay: Option<&Relay>,
        timeout: Duration,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        stamp_envelope(conn.era, &mut params);
        // One stream serves every agent: progress tokens are made unique on this hop.
        let progress_token = params
            .get_mut("_meta")
            .and_then(Value::as_object_mut)
            .and_then(|meta| meta.insert("progressToken".into(), json!(format!("gatehouse-{id}"))));
        let (done, answer) = oneshot::channel();
        conn.shared
            .pending
            .lock()
            .expect("pending lock poisoned")
            .insert(
                id,
                Pending {
                    done,
                    relay: relay.cloned(),
                    progress_token,
                },
            );
        let mut guard = Abandon {
            shared: conn.shared.clone(),
            id,
            cancel: matches!(conn.era, Era::Legacy(_)),
        };
        write_line(
            &conn.shared,
            &json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }),
        )
        .await?;
        let outcome = tokio::time::timeout(timeout, answer).await;
        guard.cancel = guard.cancel && outcome.is_err();
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(UpstreamError::Exited),
            Err(_) => Err(UpstreamError::Timeout(timeout)),
        }
    }
}

/// Forgets a request that ended without its answer; for a legacy server, says so.
struct Abandon {
    shared: Arc<Shared>,
    id: u64,
    cancel: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let was_pending = self
            .shared
            .pending
            .lock()
            .expect("pending lock poisoned")
            .remove(&self.id)
            .is_some();
        if was_pending && self.cancel {
            let notice = json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": { "requestId": self.id, "reason": "the agent cancelled or the deadline passed" },
            });
            let _ = self.shared.writer.try_send(notice.to_string().into_bytes());
        }
    }
}

async fn write_line(shared: &Shared, message: &Value) -> Result<(), UpstreamError> {
    shared
        .writer
        .send(message.to_string().into_bytes())
        .await
        .map_err(|_| UpstreamError::Exited)
}

/// Owns stdin. Returning drops it, which closes it: that is how a stop asks the server to exit.
async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::Receiver<Vec<u8>>,
    closed: CancellationToken,
) {
    loop {
        let mut line = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line,
                None => return,
            },
            () = closed.cancelled() => return,
        };
        line.push(b'\n');
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
}

async fn read_stdout(shared: Arc<Shared>, stdout: tokio::process::ChildStdout, max: usize) {
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(max));
    let mut garbage = 0u64;
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) if line.trim().is_empty() => {}
            Ok(line) => match serde_json::from_str::<Line>(&line) {
                Ok(message) => route(&shared, message),
                Err(_) => {
                    garbage += 1;
                    // Rate-limited: a server printing junk must not flood the log either.
                    if garbage.is_power_of_two() {
                        tracing::warn!(namespace = %shared.namespace, lines = garbage, "stdio upstream wrote non-JSON-RPC lines to stdout");
                    }
                }
            },
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                tracing::warn!(namespace = %shared.namespace, max, "stdio upstream message exceeds the size limit; dropped");
            }
            Err(tokio_util::codec::LinesCodecError::Io(_)) => break,
        }
    }
    tracing::warn!(namespace = %shared.namespace, "stdio upstream closed stdout (process exited)");
    shared.closed.cancel();
    let pending: Vec<Pending> = shared
        .pending
        .lock()
        .expect("pending lock poisoned")
        .drain()
        .map(|(_, p)| p)
        .collect();
    for p in pending {
        let _ = p.done.send(Err(UpstreamError::Exited));
    }
}

fn route(shared: &Arc<Shared>, message: Line) {
    match (message.method, message.id) {
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else { return };
            let Some(pending) = shared
                .pending
                .lock()
                .expect("pending lock poisoned")
                .remove(&id)
            else {
                return;
            };
            let outcome = match (message.result, message.error) {
                (Some(result), None) => Ok(result),
                (_, Some(e)) => Err(UpstreamError::Rpc {
                    code: e.code,
                    message: e.message,
                    data: e.data,
                }),
                (None, None) => Err(UpstreamError::Protocol(
                    "response has neither result nor error".into(),
                )),
            };
            let _ = pending.done.send(outcome);
        }
        (Some(method), None) => {
            notification(shared, method, message.params.unwrap_or_else(|| json!({})))
        }
        (Some(method), Some(id)) => server_request(
            shared,
            id,
            method,
            message.params.unwrap_or_else(|| json!({})),
        ),
        (None, None) => {}
    }
}

fn notification(shared: &Shared, method: String, mut params: Value) {
    match method.as_str() {
        "notifications/tools/list_changed"
        | "notifications/resources/list_changed"
        | "notifications/prompts/list_changed" => {
            shared.list_changed.notify_one();
        }
        "notifications/progress" => {
            let ours = params
                .get("progressToken")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("gatehouse-"));
            let Some(id) = ours.and_then(|n| n.parse::<u64>().ok()) else {
                return;
            };
            let pending = shared.pending.lock().expect("pending lock poisoned");
            if let Some(p) = pending.get(&id) {
                if let (Some(relay), Some(token)) = (&p.relay, &p.progress_token) {
                    params["progressToken"] = token.clone();
                    relay.notify(method, params);
                }
            }
        }
        _ => {
            if let Some(relay) = only_relay(shared) {
                relay.notify(method, params);
            }
        }
    }
}

/// A request of the server's own: answered by the agent of the only request in flight, or
/// refused (a single stream cannot say which agent it is for).
fn server_request(shared: &Arc<Shared>, id: Value, method: String, params: Value) {
    if method == "ping" {
        let _ = shared.writer.try_send(
            json!({ "jsonrpc": "2.0", "id": id, "result": {} })
                .to_string()
                .into_bytes(),
        );
        return;
    }
    let answer = only_relay(shared).and_then(|r| r.request(method.clone(), params));
    let shared = shared.clone();
    tokio::spawn(async move {
        let reply = match answer {
            Some(answer) => match answer.await {
                Ok(Ok(result)) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Ok(Err(error)) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
                Err(_) => {
                    json!({ "jsonrpc": "2.0", "id": id, "error": relay::unsupported(&method) })
                }
            },
            None => json!({ "jsonrpc": "2.0", "id": id, "error": relay::unsupported(&method) }),
        };
        let _ = write_line(&shared, &reply).await;
    });
}

fn only_relay(shared: &Shared) -> Option<Relay> {
    let pending = shared.pending.lock().expect("pending lock poisoned");
    let mut relays = pending.values().filter_map(|p| p.relay.as_ref());
    match (relays.next(), relays.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

async fn log_stderr(namespace: Arc<str>, stderr: tokio::process::ChildStderr) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(STDERR_LINE_MAX));
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => {
                tracing::info!(target: "gatehouse::upstream::stderr", namespace = %namespace, "{line}")
            }
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {}
            Err(_) => return,
        }
    }
}

async fn stop(conn: &Conn, namespace: &str) {
    let Some(mut child) = conn.child.lock().await.take() else {
        return;
    };
    // Marks the connection finished: the stdin writer returns, which closes stdin.
    conn.shared.closed.cancel();
    let group = conn.pid.map(|pid| nix::unistd::Pid::from_raw(pid as i32));
    if let Some(group) = group {
        // SIGTERM to the whole group reaches grandchildren (e.g. node under npx).
        if !exits_within(&mut child, EXIT_GRACE).await {
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
        }
        if !exits_within(&mut child, EXIT_GRACE).await {
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
        // Grandchildren that outlived the leader get the same treatment.
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = child.kill().await;
    tracing::info!(namespace, "stdio upstream stopped");
}

async fn exits_within(child: &mut Child, grace: Duration) -> bool {
    tokio::time::timeout(grace, child.wait()).await.is_ok()
}
