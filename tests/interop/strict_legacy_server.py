"""A deliberately strict legacy (2025-era) MCP stdio server, written without any SDK.

It exits if its first message is not `initialize` — as some real servers do when a client
probes them with a 2026-07-28 `server/discover` — so the gateway must restart it and serve
it as legacy. It offers one tool, `whoami`, answering with its process id. With `--noisy` it
also writes junk lines to stdout before every answer, as a misbehaving server would.
"""

import json
import os
import sys


NOISY = "--noisy" in sys.argv


def send(message):
    if NOISY:
        sys.stdout.write("this is not JSON-RPC\n{\"half\": \n")
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


first = True
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if first and method != "initialize":
        sys.stderr.write(f"strict server: {method!r} before initialize; exiting\n")
        sys.exit(3)
    first = False
    if "id" not in message:
        continue
    if method == "initialize":
        result = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "strict-legacy", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": "whoami", "description": "The server's pid.", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": str(os.getpid())}]}
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
        continue
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})
