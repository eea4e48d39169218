"""Reference MCP client for Gatehouse's interop tests, built on the official Python SDK (mcp 2.x).

Usage:
    sdk_client.py --era legacy|modern [--tool NAME [--args JSON]] [--token T]
                  [--answer-input] [--timeout SECONDS] URL

Connects to URL over Streamable HTTP, lists every tool (following nextCursor),
optionally calls one, and prints exactly one JSON line to stdout:

    {"protocol_version": "...", "tools": ["name", ...],
     "call": {"is_error": false, "content": [{...}], "structured": {...} | null} | null}

Eras:
    legacy  the `initialize` handshake (the SDK offers 2025-11-25), i.e. a
            2025-era session with Mcp-Session-Id: `Client(mode="legacy")`.
    modern  the stateless 2026-07-28 protocol, with no fallback: the client is
            pinned with `Client(mode="2026-07-28")`, which stamps every request
            with the `_meta` envelope and the MCP-Protocol-Version/Mcp-Method/
            Mcp-Name headers and never sends `initialize`. A real
            `server/discover` at 2026-07-28 is then sent and its result adopted,
            so a server that does not speak 2026-07-28 fails the run instead of
            being silently downgraded (which `mode="auto"` would do).

Options:
    --token T        send `Authorization: Bearer T` on every HTTP request.
    --answer-input   declare sampling, elicitation and roots, and answer them with
                     canned replies (live server requests on legacy, input_required
                     rounds on modern); without it no such capability is declared.
    --timeout S      give up after S seconds (default 60).

Any failure (connection, HTTP, JSON-RPC error, timeout) exits non-zero with a
one-line message on stderr and nothing on stdout. A tool result with isError
is not a failure: it is reported as "is_error": true.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    DiscoverResult,
    ElicitRequestParams,
    ElicitResult,
    Implementation,
    ListRootsResult,
    Root,
    TextContent,
)
from mcp.types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS

CLIENT_INFO = Implementation(name="gatehouse-interop-sdk-client", version="1.0.0")
MAX_LIST_PAGES = 1000


class Failure(Exception):
    """A run failure with a message for stderr."""


# ---- canned answers for --answer-input -------------------------------------


async def answer_sampling(context: ClientRequestContext, params: CreateMessageRequestParams) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant",
        content=TextContent(type="text", text="This is a canned sampling reply from sdk_client."),
        model="sdk-client-canned",
        stop_reason="endTurn",
    )


async def answer_elicitation(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """Accept form elicitations, filling each property with its default or a type-appropriate value."""
    schema = getattr(params, "requested_schema", None) or {}
    content: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if "default" in prop:
            content[name] = prop["default"]
        elif prop.get("enum"):
            content[name] = prop["enum"][0]
        elif prop.get("oneOf"):
            content[name] = prop["oneOf"][0].get("const")
        else:
            content[name] = {"boolean": True, "integer": 1, "number": 1, "array": []}.get(prop.get("type"), "sdk-client")
    return ElicitResult(action="accept", content=content)


async def answer_roots(context: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///sdk-client/root", name="sdk-client root")])


# ---- the run ------------------------------------------------------------------


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def adopt_modern(client: Client) -> None:
    """Probe `server/discover` at 2026-07-28 and adopt the server's real result (no fallback)."""
    raw = await client.session.send_discover(LATEST_MODERN_VERSION)
    result = DiscoverResult.model_validate(raw)
    if not any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
        raise Failure(f"server/discover lists no 2026-07-28-era version: {result.supported_versions}")
    client.session.adopt(result)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    callbacks: dict[str, Any] = {}
    if args.answer_input:
        callbacks = {
            "sampling_callback": answer_sampling,
            "elicitation_callback": answer_elicitation,
            "list_roots_callback": answer_roots,
        }
    client = Client(
        streamable_http_client(args.url, http_client=http),
        mode="legacy" if args.era == "legacy" else LATEST_MODERN_VERSION,
        client_info=CLIENT_INFO,
        cache=None,  # every list goes to the wire; we are testing what the server (or gateway) says
        **callbacks,
    )
    async with http, client:
        if args.era == "modern":
            await adopt_modern(client)

        tools: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(tool.name for tool in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            raise Failure(f"tools/list did not end after {MAX_LIST_PAGES} pages")

        call = None
        if args.tool is not None:
            result: CallToolResult = await client.call_tool(args.tool, args.args)
            call = {
                "is_error": bool(result.is_error),
                "content": [dump(block) for block in result.content],
                "structured": result.structured_content,
            }
        return {"protocol_version": client.protocol_version, "tools": tools, "call": call}


def describe(exc: BaseException) -> str:
    """One line for stderr, unwrapping the exception groups anyio produces."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, MCPError):
        data = f" data={json.dumps(exc.error.data)}" if exc.error.data is not None else ""
        return f"JSON-RPC error {exc.error.code}: {exc.error.message}{data}"
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


def main() -> int:
    parser = argparse.ArgumentParser(description="List tools (and call one) with the official MCP Python SDK.")
    parser.add_argument("--era", choices=("legacy", "modern"), required=True)
    parser.add_argument("--tool", help="tool to call after listing")
    parser.add_argument("--args", default="{}", help="tool arguments as a JSON object (default {})")
    parser.add_argument("--token", help="bearer token for the Authorization header")
    parser.add_argument("--answer-input", action="store_true", help="declare and answer sampling/elicitation/roots")
    parser.add_argument("--timeout", type=float, default=60.0, help="overall deadline in seconds (default 60)")
    parser.add_argument("url", metavar="URL")
    args = parser.parse_args()
    try:
        args.args = json.loads(args.args)
    except json.JSONDecodeError as exc:
        parser.error(f"--args is not valid JSON: {exc}")
    if not isinstance(args.args, dict):
        parser.error("--args must be a JSON object")

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await run(args)

    try:
        output = anyio.run(bounded)
    except TimeoutError:
        print(f"sdk_client: timed out after {args.timeout:g}s", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 (report every failure the same way)
        print(f"sdk_client: {describe(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(output), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
