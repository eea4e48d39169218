//! stdio upstreams: a child process speaking newline-delimited JSON-RPC on stdin/stdout.
//!
//! One reader task owns stdout and routes each line: responses to the waiting request,
//! progress to the request whose (rewritten) progress token it names, logs and server requests
//! to the only request in flight (a single stream cannot say more), list changes to the
//! supervisor. stderr goes to the gateway's log line by line. The process runs in its own
//! process group so that shutdown (stdin closed, then SIGTERM, then SIGKILL) also reaches
//! grandchildren such as the node process `npx` starts.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use super::mux::{Mux, Outbound};
use super::relay::Relay;
use super::signals::Signals;
use super::{Era, UpstreamError, discovered_capabilities, initialize_params, initialized};
use crate::config::StdioCommand;

/// How long a probe may take before the server is treated as legacy.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a child gets to exit after stdin closes, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Longest stderr line kept in the log.
const STDERR_LINE_MAX: usize = 4096;

/// One running child process and what the handshake settled.
struct Conn {
    mux: Arc<Mux>,
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
    signals: Arc<Signals>,
    /// Set by `shutdown`: no process is started afterwards, whoever asks.
    stopped: AtomicBool,
}

impl StdioTransport {
    pub fn new(
        namespace: &str,
        command: StdioCommand,
        timeout: Duration,
        max_message_bytes: usize,
        signals: Arc<Signals>,
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
            signals,
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
            Some(conn) => conn.mux.closed.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves when the server announces a list change.
    pub async fn list_changed(&self) {
        self.signals.list_changed().await;
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
        if slot.as_ref().is_some_and(|c| c.mux.closed.is_cancelled()) {
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
        self.conn.read().expect("conn lock poisoned").clone().filter(|c| !c.mux.closed.is_cancelled())
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
            let probe = self.send(&conn, "server/discover", Map::new(), None, PROBE_TIMEOUT).await;
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
                Err(_) if conn.mux.closed.is_cancelled() => {
                    tracing::info!(namespace = %self.namespace, "stdio upstream exited on server/discover; restarting it as legacy");
                    self.legacy_only.store(true, Ordering::Relaxed);
                    conn = self.spawn()?;
                }
                // Any other answer, or none in time, means legacy; the process lives on.
                Err(_) => {}
            }
        }
        match self.send(&conn, "initialize", initialize_params(), None, self.timeout).await {
            Ok(result) => {
                let (version, capabilities) = initialized(&result)?;
                conn.era = Era::Legacy(version);
                conn.capabilities = Some(capabilities);
                conn.mux.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await?;
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
        let mut child = command.spawn().map_err(|e| UpstreamError::Spawn(format!("{}: {e}", c.command)))?;
        let pid = child.id();
        let (stdin, stdout, stderr) = match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (i, o, e),
            _ => return Err(UpstreamError::Spawn("child stdio not captured".into())),
        };
        let (writer, lines_out) = mpsc::channel::<Vec<u8>>(256);
        let closed = CancellationToken::new();
        let mux =
            Arc::new(Mux::new(self.namespace.clone(), Outbound::Lines(writer), closed.clone(), self.signals.clone()));
        tokio::spawn(write_stdin(stdin, lines_out, closed));
        tokio::spawn(read_stdout(mux.clone(), stdout, self.max_message_bytes));
        tokio::spawn(log_stderr(self.namespace.clone(), stderr));
        tracing::info!(namespace = %self.namespace, pid = ?pid, command = %c.command, "stdio upstream started");
        Ok(Conn { mux, era: Era::Bare, capabilities: None, child: tokio::sync::Mutex::new(Some(child)), pid })
    }

    async fn send(
        &self,
        conn: &Conn,
        method: &str,
        params: Map<String, Value>,
        relay: Option<&Relay>,
        timeout: Duration,
    ) -> Result<Box<RawValue>, UpstreamError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        conn.mux.call(conn.era, id, method, params, relay, timeout).await
    }
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

async fn read_stdout(mux: Arc<Mux>, stdout: tokio::process::ChildStdout, max: usize) {
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(max));
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) if line.trim().is_empty() => {}
            Ok(line) => mux.deliver(line.as_bytes()),
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                tracing::warn!(max, "stdio upstream message exceeds the size limit; dropped");
            }
            Err(tokio_util::codec::LinesCodecError::Io(_)) => break,
        }
    }
    tracing::warn!("stdio upstream closed stdout (process exited)");
    mux.close();
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
    conn.mux.closed.cancel();
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
