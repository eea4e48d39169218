"""Gatehouse's conformance fixture: a dual-era MCP server built on the official Python SDK.

This is our own fixture, written for Gatehouse's interop tests (it is not a
copy of the example server in the `modelcontextprotocol/conformance`
repository). It implements what the server scenarios of
`@modelcontextprotocol/conformance` 0.1.16 (2025-era) and 0.2.0-alpha.12
(adds the 2026-07-28 stateless revision) call by name, so the suites can be run
against it directly or through Gatehouse in no-prefix mode.

Serving
    Streamable HTTP on http://127.0.0.1:<port>/mcp, both protocol eras on the
    one endpoint (mcp 2.x routes on the MCP-Protocol-Version header):
    - 2025-era clients run the `initialize` handshake and get a session
      (Mcp-Session-Id, GET stream, server-to-client sampling/elicitation,
      resumable SSE with priming events and Last-Event-ID replay);
    - 2026-07-28 clients send self-contained requests (`server/discover`,
      per-request `_meta` envelope, `subscriptions/listen`, multi round-trip
      `input_required` results with sealed `requestState`, cache hints, and the
      io.modelcontextprotocol/tasks extension).
    Host/Origin are checked against localhost (DNS-rebinding protection).

What it offers
    Tools: the conformance contract (test_simple_text, test_image_content,
    test_audio_content, test_embedded_resource, test_multiple_content_types,
    test_tool_with_logging, test_tool_with_progress, test_error_handling,
    test_sampling, test_elicitation, test_elicitation_sep1034_defaults,
    test_elicitation_sep1330_enums, test_reconnection, json_schema_2020_12_tool),
    the 2026-07-28 diagnostics (test_missing_capability, test_streaming_elicitation,
    test_logging_tool, test_trigger_tool_change, test_trigger_prompt_change,
    test_input_required_result_*), the tasks-extension fixtures (greet,
    slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input,
    test_tool_with_task), plus add_numbers (structured output),
    test_mcp_param_header (x-mcp-header) and test_trigger_resource_update.
    Resources: test://static-text, test://static-binary, test://watched-resource,
    template test://template/{id}/data. Prompts: test_simple_prompt,
    test_prompt_with_arguments(arg1, arg2), test_prompt_with_embedded_resource
    (resourceUri), test_prompt_with_image, test_input_required_result_prompt.
    Also completion/complete, logging/setLevel and resources/(un)subscribe
    (2025 era), subscriptions/listen (2026-07-28).

Usage
    python conformance_fixture.py [--port N] [--json-response] [--ttl-ms MS]

    --port 0 (the default) picks a free port. Once the socket accepts
    connections exactly one line is printed to stdout and flushed:
        LISTENING http://127.0.0.1:<port>/mcp
    Diagnostics go to stderr. SIGINT/SIGTERM stop the server.
    --json-response answers POSTs with plain JSON: no notifications and no
    server-to-client requests can ride a POST then (logging, progress, and
    2025-era sampling/elicitation fail by design).

Interactive tools (sampling, elicitation, roots) ask the client live over the
2025 session, and answer with an `input_required` result on 2026-07-28, so the
same tool names work in both eras. A capability the client did not declare is
refused: -32021 (MissingRequiredClientCapability) on 2026-07-28, an `isError`
tool result on the 2025 era. An unknown tool is JSON-RPC -32602 in both eras.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import socket
import struct
import sys
import warnings
import wave
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from io import BytesIO
from typing import Annotated, Any
from uuid import uuid4

import anyio
import anyio.abc
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, ToolBinding
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer, UserMessage
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.inbound import decode_header_value
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    Completion,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    JSONRPCMessage,
    ListRootsRequest,
    ListRootsResult,
    MissingRequiredClientCapabilityErrorData,
    PromptReference,
    RequestParams,
    ResourceTemplateReference,
    RootsCapability,
    SamplingCapability,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from mcp.types.methods import CACHEABLE_METHODS
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, ValidationError

# The fixture deliberately exercises features 2026-07-28 deprecates (logging,
# sampling, roots); the SDK warns on every use.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


# --------------------------------------------------------------------------
# Static payloads
# --------------------------------------------------------------------------


def _png_1x1_red() -> bytes:
    """A valid 1x1 red PNG, built with the standard library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte + one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav_silence() -> bytes:
    """A valid 8 kHz mono 16-bit WAV holding 10 ms of silence."""
    buf = BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00" * 80)
    return buf.getvalue()


PNG_BYTES = _png_1x1_red()
PNG_B64 = base64.b64encode(PNG_BYTES).decode()
WAV_B64 = base64.b64encode(_wav_silence()).decode()

# inputSchema of `json_schema_2020_12_tool`: 2020-12 keywords a gateway must
# pass through untouched ($schema, $defs/$anchor, $ref, allOf/anyOf, if/then/else).
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


# --------------------------------------------------------------------------
# Resumability for the 2025 era (SEP-1699): an in-memory event store
# --------------------------------------------------------------------------


class InMemoryEventStore(EventStore):
    """Keeps the last `limit` SSE events so a client can resume with Last-Event-ID."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: deque[tuple[EventId, StreamId, JSONRPCMessage | None]] = deque(maxlen=limit)
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(next(self._ids))
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        events = list(self._events)
        start = next((i for i, (eid, _, _) in enumerate(events) if eid == last_event_id), None)
        if start is None:
            return None
        stream_id = events[start][1]
        for event_id, sid, message in events[start + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


# --------------------------------------------------------------------------
# Helpers shared by the tools
# --------------------------------------------------------------------------

# 2025-era per-session state, keyed by Mcp-Session-Id (2026-07-28 has no sessions).
legacy_log_level: dict[str, str] = {}
legacy_subscriptions: dict[str, set[str]] = {}

_RESULT_TYPE_OF_METHOD: dict[str, type] = {
    "sampling/createMessage": CreateMessageResult,
    "elicitation/create": ElicitResult,
    "roots/list": ListRootsResult,
}
_EMPTY_CAPABILITY = {"sampling": SamplingCapability(), "elicitation": ElicitationCapability(), "roots": RootsCapability()}

InputRequest = CreateMessageRequest | ElicitRequest | ListRootsRequest


def is_modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def session_key(headers: Any) -> str:
    return (headers or {}).get("mcp-session-id", "")


def text(value: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=value)], is_error=is_error)


def declared(ctx: Context, capability: str) -> bool:
    caps = ctx.client_capabilities
    return caps is not None and getattr(caps, capability, None) is not None


def missing_capability(ctx: Context, *capabilities: str) -> CallToolResult | None:
    """Refuse the call if the client did not declare every capability in `capabilities`.

    2026-07-28: raises -32021 with `data.requiredCapabilities` (HTTP 400).
    2025 era: returns an `isError` tool result (that code does not exist there).
    """
    missing = [c for c in capabilities if not declared(ctx, c)]
    if not missing:
        return None
    message = f"client did not declare the required capabilities: {', '.join(missing)}"
    if is_modern(ctx):
        required = ClientCapabilities(**{c: _EMPTY_CAPABILITY[c] for c in missing})
        data = MissingRequiredClientCapabilityErrorData(required_capabilities=required)
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message=message,
            data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
        )
    return text(message, is_error=True)


async def ask(
    ctx: Context, requests: dict[str, InputRequest], *, state: str | None = None
) -> dict[str, Any] | InputRequiredResult:
    """Get the client's answer to each request, the way the connection's era allows.

    2025 era: each request is sent to the client now, over the session.
    2026-07-28: answers come from the retry's `inputResponses`; while any is
    missing (or of the wrong kind) an `input_required` result asking for all of
    them is returned instead, carrying `state` as the (SDK-sealed) requestState.
    """
    if is_modern(ctx):
        have = ctx.input_responses or {}
        answers = {key: have.get(key) for key in requests}
        complete = all(
            isinstance(answers[key], _RESULT_TYPE_OF_METHOD[req.method]) for key, req in requests.items()
        )
        if not complete:
            return InputRequiredResult(input_requests=dict(requests), request_state=state)
        return answers
    related = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
    return {
        key: await ctx.session.send_request(req, _RESULT_TYPE_OF_METHOD[req.method], metadata=related)
        for key, req in requests.items()
    }


def elicit_request(message: str, properties: dict[str, Any], required: list[str] | None = None) -> ElicitRequest:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


NAME_FORM = {"name": {"type": "string"}}
CONFIRM_FORM = {"ok": {"type": "boolean"}}


def sampling_request(prompt: str, max_tokens: int = 100) -> CreateMessageRequest:
    return CreateMessageRequest(
        params=CreateMessageRequestParams(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=max_tokens,
        )
    )


def sampled_text(result: CreateMessageResult) -> str:
    content = result.content
    return getattr(content, "text", None) or json.dumps(content.model_dump(mode="json"))


async def log(ctx: Context, level: str, message: str) -> None:
    """Send a log notification, honouring the 2025 session's logging/setLevel.

    On 2026-07-28 the SDK itself drops it unless this request's `_meta` set
    `io.modelcontextprotocol/logLevel` (at or below `level`).
    """
    if not is_modern(ctx):
        threshold = legacy_log_level.get(session_key(ctx.headers), "debug")
        if LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
            return
    await ctx.log(level, message)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# The tasks extension (io.modelcontextprotocol/tasks, SEP-2663; 2026-07-28 only)
# --------------------------------------------------------------------------
#
# mcp 2.3.0 has no built-in tasks support, so this is a small in-memory
# implementation: task-supporting tools called by a client that declared the
# extension (per request, in `_meta` clientCapabilities) answer with a flat
# CreateTaskResult and run in the background; tasks/get, tasks/update and
# tasks/cancel serve them. Without the extension the same tools run
# synchronously, except `failing_job`, whose task support is "required"
# (-32021). On the 2025 era the tools always run synchronously and the tasks/*
# methods are -32601.

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TTL_MS = 600_000
TASK_POLL_INTERVAL_MS = 200
TERMINAL_STATUSES = ("completed", "failed", "cancelled")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Task:
    """One task's state; `ask` parks it in input_required until tasks/update answers every key."""

    task_id: str
    status: str = "working"
    created_at: str = field(default_factory=utc_now)
    last_updated_at: str = field(default_factory=utc_now)
    pending: dict[str, InputRequest] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    all_answered: anyio.Event = field(default_factory=anyio.Event)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def set_status(self, status: str) -> None:
        self.status = status
        self.last_updated_at = utc_now()

    def envelope(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": TASK_TTL_MS,
            "pollIntervalMs": TASK_POLL_INTERVAL_MS,
        }

    def detailed(self) -> dict[str, Any]:
        """The tasks/get result (DetailedTask): result/error inlined once terminal."""
        body = self.envelope()
        if self.status == "input_required":
            body["inputRequests"] = {key: dump_wire(req) for key, req in self.pending.items()}
        if self.result is not None:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error
        return body

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        self.pending, self.answers, self.all_answered = dict(requests), {}, anyio.Event()
        self.set_status("input_required")
        await self.all_answered.wait()
        self.set_status("working")
        return self.answers

    def update(self, responses: dict[str, Any]) -> None:
        """Record the answers to pending keys; unknown keys and malformed answers are ignored."""
        for key, raw in responses.items():
            request = self.pending.get(key)
            if request is None:
                continue
            try:
                self.answers[key] = _RESULT_TYPE_OF_METHOD[request.method].model_validate(raw)
            except ValidationError:
                continue
            del self.pending[key]
        self.last_updated_at = utc_now()
        if self.status == "input_required" and not self.pending:
            self.all_answered.set()


TaskJob = Callable[[Task], Awaitable[CallToolResult]]


class TaskStore:
    """Tasks by id; jobs run in a task group that lives as long as the server (see `lifespan`)."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}
        self.task_group: anyio.abc.TaskGroup | None = None

    def start(self, job: TaskJob) -> Task:
        assert self.task_group is not None, "the server lifespan has not started"
        task = Task(task_id=f"task-{uuid4().hex}")
        self.tasks[task.task_id] = task  # stored before CreateTaskResult goes out
        self.task_group.start_soon(self._run, task, job)
        return task

    async def _run(self, task: Task, job: TaskJob) -> None:
        with task.scope:
            try:
                result = await job(task)
            except MCPError as exc:
                task.error = dump_wire(exc.error)
                task.set_status("failed")
            except Exception as exc:  # noqa: BLE001 (a crashing job is a failed task)
                task.error = {"code": INTERNAL_ERROR, "message": f"task crashed: {type(exc).__name__}"}
                task.set_status("failed")
            else:
                task.result = dump_wire(result)
                task.set_status("completed")

    def cancel(self, task: Task) -> None:
        if task.status not in TERMINAL_STATUSES:
            task.set_status("cancelled")
            task.scope.cancel()


TASKS = TaskStore()


@asynccontextmanager
async def lifespan(server: Any) -> AsyncIterator[dict[str, Any]]:
    async with anyio.create_task_group() as tg:
        TASKS.task_group = tg
        yield {}
        tg.cancel_scope.cancel()


def dump_wire(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def declares_tasks(ctx: ServerRequestContext) -> bool:
    caps = ctx.session.client_capabilities
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and bool(caps and TASKS_EXTENSION in (caps.extensions or {}))


def tasks_extension_required() -> MCPError:
    required = ClientCapabilities(extensions={TASKS_EXTENSION: {}})
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"this request requires the {TASKS_EXTENSION} extension",
        data=MissingRequiredClientCapabilityErrorData(required_capabilities=required).model_dump(
            by_alias=True, mode="json", exclude_none=True
        ),
    )


# Sync bodies (no task): what a client without the extension gets.


def greet(name: str) -> CallToolResult:
    """Sync-only: greets `name`."""
    return text(f"Hello, {name}!")


async def slow_compute(seconds: float = 1.0, label: str = "") -> CallToolResult:
    """Task-supporting: sleeps `seconds`, then reports `label`."""
    await anyio.sleep(seconds)
    return text(f"computed {label or 'result'} after {seconds:g}s")


async def failing_job() -> CallToolResult:
    """Task support required: always ends in a tool error (isError) after ~1s."""
    await anyio.sleep(1)
    return text("failing_job failed on purpose", is_error=True)


async def protocol_error_job() -> CallToolResult:
    """Task-supporting: always ends in a protocol error (a failed task)."""
    await anyio.sleep(0.2)
    raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job failed on purpose")


def confirm_form(filename: str) -> ElicitRequest:
    return elicit_request(f"Delete {filename}?", {"confirm": {"type": "boolean"}}, ["confirm"])


def confirm_delete_outcome(filename: str, answer: ElicitResult) -> CallToolResult:
    confirmed = answer.action == "accept" and bool((answer.content or {}).get("confirm"))
    return text(f"{'deleted' if confirmed else 'kept'} {filename}")


async def confirm_delete(filename: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    """Task-supporting: asks for confirmation (elicitation), then 'deletes' `filename`."""
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"confirm": confirm_form(filename)})
    return got if isinstance(got, InputRequiredResult) else confirm_delete_outcome(filename, got["confirm"])


MULTI_INPUT_FORMS = {
    "name": elicit_request("What is your name?", NAME_FORM, ["name"]),
    "confirm": elicit_request("Proceed?", CONFIRM_FORM, ["ok"]),
}


async def multi_input(ctx: Context) -> CallToolResult | InputRequiredResult:
    """Task-supporting: asks two questions at once."""
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, MULTI_INPUT_FORMS)
    return got if isinstance(got, InputRequiredResult) else text(f"answers: {', '.join(sorted(got))}")


async def test_tool_with_task(ctx: Context) -> CallToolResult | InputRequiredResult:
    """MRTR first (user_name), then - with the tasks extension - the work runs as a task."""
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"user_name": elicit_request("What is your name?", NAME_FORM, ["name"])})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"Hello, {(got['user_name'].content or {}).get('name')}!")


# Task bodies: the same work, run by TaskStore, asking through the task.


def task_job(params: CallToolRequestParams) -> TaskJob | None:
    """The background job for a task-supporting tool call, or None to run it synchronously."""
    name, args = params.name, params.arguments or {}
    if name == "slow_compute":
        return lambda task: slow_compute(float(args.get("seconds", 1.0)), str(args.get("label", "")))
    if name == "failing_job":
        return lambda task: failing_job()
    if name == "protocol_error_job":
        return lambda task: protocol_error_job()
    if name == "confirm_delete":
        filename = str(args.get("filename", ""))

        async def confirm(task: Task) -> CallToolResult:
            key = f"confirm-{uuid4().hex[:8]}"
            answers = await task.ask({key: confirm_form(filename)})
            return confirm_delete_outcome(filename, answers[key])

        return confirm
    if name == "multi_input":

        async def both(task: Task) -> CallToolResult:
            answers = await task.ask(MULTI_INPUT_FORMS)
            return text(f"answers: {', '.join(sorted(answers))}")

        return both
    if name == "test_tool_with_task":
        answer = (params.input_responses or {}).get("user_name")
        if not isinstance(answer, ElicitResult):
            return None  # the MRTR rounds run synchronously in the tool body
        who = (answer.content or {}).get("name", "stranger")

        async def greet_later(task: Task) -> CallToolResult:
            await anyio.sleep(0.2)
            return text(f"Hello, {who}! (from a task)")

        return greet_later
    return None


TASK_SUPPORT = {
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "optional",
    "confirm_delete": "optional",
    "multi_input": "optional",
    "test_tool_with_task": "optional",
}


class TaskIdParams(RequestParams):
    task_id: str


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


class TasksExtension(Extension):
    identifier = TASKS_EXTENSION

    def tools(self) -> Sequence[ToolBinding]:
        return [
            ToolBinding(greet),
            ToolBinding(slow_compute),
            ToolBinding(failing_job),
            ToolBinding(protocol_error_job),
            ToolBinding(confirm_delete),
            ToolBinding(multi_input),
            ToolBinding(test_tool_with_task),
        ]

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get, modern),
            MethodBinding("tasks/update", TaskUpdateParams, self.update, modern),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel, modern),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext, call_next: CallNext
    ) -> HandlerResult:
        support = TASK_SUPPORT.get(params.name)
        if support is None or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return await call_next(ctx)
        if not declares_tasks(ctx):
            if support == "required":
                raise tasks_extension_required()
            return await call_next(ctx)
        job = task_job(params)
        if job is None:
            return await call_next(ctx)
        return {"resultType": "task", **TASKS.start(job).envelope()}

    def lookup(self, ctx: ServerRequestContext, params: TaskIdParams) -> Task:
        if not declares_tasks(ctx):
            raise tasks_extension_required()
        header = ctx.request.headers.get("mcp-name") if ctx.request is not None else None
        if header is not None and decode_header_value(header.strip()) != params.task_id:
            raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")
        task = TASKS.tasks.get(params.task_id)
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message="Unknown task", data={"taskId": params.task_id})
        return task

    async def get(self, ctx: ServerRequestContext, params: TaskIdParams) -> dict[str, Any]:
        return self.lookup(ctx, params).detailed()

    async def update(self, ctx: ServerRequestContext, params: TaskUpdateParams) -> dict[str, Any]:
        self.lookup(ctx, params).update(params.input_responses)
        return {}

    async def cancel(self, ctx: ServerRequestContext, params: TaskIdParams) -> dict[str, Any]:
        TASKS.cancel(self.lookup(ctx, params))
        return {}


# --------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------

mcp = MCPServer(
    "gatehouse-conformance-fixture",
    version="1.0.0",
    instructions="Gatehouse interop fixture: conformance-suite tools, resources and prompts.",
    log_level="WARNING",
    extensions=[TasksExtension()],
    lifespan=lifespan,
)


# ---- plain content tools -------------------------------------------------


@mcp.tool(description="Returns a single text block.")
def test_simple_text() -> CallToolResult:
    return text("This is a simple text response for testing.")


@mcp.tool(description="Returns a 1x1 red PNG image.")
def test_image_content() -> CallToolResult:
    return CallToolResult(content=[ImageContent(type="image", data=PNG_B64, mime_type="image/png")])


@mcp.tool(description="Returns a short WAV clip.")
def test_audio_content() -> CallToolResult:
    return CallToolResult(content=[AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav")])


@mcp.tool(description="Returns an embedded text resource.")
def test_embedded_resource() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return CallToolResult(content=[EmbeddedResource(type="resource", resource=resource)])


@mcp.tool(description="Returns text, image and embedded-resource content together.")
def test_multiple_content_types() -> CallToolResult:
    resource = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}),
    )
    return CallToolResult(
        content=[
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]
    )


@mcp.tool(description="Always fails with an isError result.")
def test_error_handling() -> CallToolResult:
    return text("This tool intentionally returns an error for testing", is_error=True)


@mcp.tool(description="Adds two integers; returns text and structuredContent {sum}.")
def add_numbers(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@mcp.tool(
    description="Echoes `region`, which a 2026-07-28 client mirrors into the Mcp-Param-Region header (x-mcp-header)."
)
def test_mcp_param_header(
    region: Annotated[str, Field(description="Any string", json_schema_extra={"x-mcp-header": "Region"})],
) -> CallToolResult:
    return text(f"region={region}")


# ---- logging, progress, reconnection --------------------------------------


async def _three_logs(ctx: Context) -> CallToolResult:
    await log(ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await log(ctx, "info", "Tool execution completed")
    return text("Tool with logging executed successfully")


@mcp.tool(description="Sends three info log notifications while it runs.")
async def test_tool_with_logging(ctx: Context) -> CallToolResult:
    return await _three_logs(ctx)


@mcp.tool(description="Same as test_tool_with_logging (name used by the 2026-07-28 no-log-without-logLevel check).")
async def test_logging_tool(ctx: Context) -> CallToolResult:
    return await _three_logs(ctx)


@mcp.tool(description="Reports progress 0/100, 50/100, 100/100 when the request carries a progressToken.")
async def test_tool_with_progress(ctx: Context) -> CallToolResult:
    for step, progress in enumerate((0, 50, 100)):
        if step:
            await anyio.sleep(0.05)
        await ctx.report_progress(progress, 100, f"step {step + 1} of 3")
    return text("Tool with progress executed successfully")


@mcp.tool(description="2025 era: closes its SSE stream mid-call; the result is replayed after Last-Event-ID resume.")
async def test_reconnection(ctx: Context) -> CallToolResult:
    await ctx.close_sse_stream()  # no-op on 2026-07-28 (no resumability there)
    await anyio.sleep(0.2)
    return text("Reconnection test completed")


# ---- client interaction: sampling, elicitation, roots ----------------------


@mcp.tool(description="Asks the client to sample an LLM reply to `prompt`.")
async def test_sampling(prompt: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "sampling"):
        return refusal
    got = await ask(ctx, {"sampling": sampling_request(prompt)})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"LLM response: {sampled_text(got['sampling'])}")


@mcp.tool(description="Requires the sampling capability (-32021 on 2026-07-28 when it is not declared).")
async def test_missing_capability(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "sampling"):
        return refusal
    got = await ask(ctx, {"sampling": sampling_request("Say hello.", 20)})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"sampled: {sampled_text(got['sampling'])}")


USER_FORM = {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"},
}


def _elicited(result: ElicitResult) -> str:
    return f"action={result.action}, content={json.dumps(result.content or {})}"


@mcp.tool(description="Asks the user (form elicitation) for a username and email.")
async def test_elicitation(message: str, ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"user": elicit_request(message, USER_FORM, ["username", "email"])})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"User response: {_elicited(got['user'])}")


@mcp.tool(description="Like test_elicitation, for checking that a response stream carries no server requests.")
async def test_streaming_elicitation(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"user": elicit_request("Please provide your information", USER_FORM, ["username"])})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"User response: {_elicited(got['user'])}")


@mcp.tool(description="Elicitation whose schema has defaults for every primitive type (SEP-1034).")
async def test_elicitation_sep1034_defaults(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    form = {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    }
    got = await ask(ctx, {"defaults": elicit_request("Please review and update the form fields", form)})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"Elicitation completed: {_elicited(got['defaults'])}")


@mcp.tool(description="Elicitation using all five enum schema variants (SEP-1330).")
async def test_elicitation_sep1330_enums(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    form = {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    }
    got = await ask(ctx, {"enums": elicit_request("Please select your preferences", form)})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"Elicitation completed: {_elicited(got['enums'])}")


# ---- 2026-07-28 multi round-trip (input_required) tools ---------------------

@mcp.tool(description="MRTR: one elicitation (key user_name), then greets.")
async def test_input_required_result_elicitation(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"user_name": elicit_request("What is your name?", NAME_FORM, ["name"])})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"Hello, {(got['user_name'].content or {}).get('name', 'stranger')}!")


@mcp.tool(description="MRTR: one sampling request (key capital_question).")
async def test_input_required_result_sampling(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "sampling"):
        return refusal
    got = await ask(ctx, {"capital_question": sampling_request("What is the capital of France?")})
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"The model said: {sampled_text(got['capital_question'])}")


@mcp.tool(description="MRTR: one roots/list request (key client_roots).")
async def test_input_required_result_list_roots(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "roots"):
        return refusal
    got = await ask(ctx, {"client_roots": ListRootsRequest()})
    if isinstance(got, InputRequiredResult):
        return got
    uris = [str(root.uri) for root in got["client_roots"].roots]
    return text(f"Client roots: {', '.join(uris) or '(none)'}")


@mcp.tool(description="MRTR with requestState; the final text says state-ok once the state round-trips.")
async def test_input_required_result_request_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"confirm": elicit_request("Please confirm", CONFIRM_FORM, ["ok"])}, state="awaiting-confirm")
    if isinstance(got, InputRequiredResult):
        return got
    if is_modern(ctx):
        verdict = "state-ok" if ctx.request_state == "awaiting-confirm" else "state-missing"
    else:
        verdict = "asked live (2025 era: no requestState)"
    return text(f"Confirmed: {_elicited(got['confirm'])}; {verdict}")


@mcp.tool(description="MRTR with requestState; a tampered state is rejected (-32602) by the SDK's sealing.")
async def test_input_required_result_tampered_state(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    got = await ask(ctx, {"confirm": elicit_request("Please confirm", CONFIRM_FORM, ["ok"])}, state="awaiting-confirm")
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"Confirmed with intact state: {_elicited(got['confirm'])}")


@mcp.tool(description="MRTR: elicitation, sampling and roots/list in one round, with requestState.")
async def test_input_required_result_multiple_inputs(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation", "sampling", "roots"):
        return refusal
    requests: dict[str, InputRequest] = {
        "user_name": elicit_request("What is your name?", NAME_FORM, ["name"]),
        "greeting": sampling_request("Generate a greeting", 50),
        "client_roots": ListRootsRequest(),
    }
    got = await ask(ctx, requests, state="multiple-inputs")
    if isinstance(got, InputRequiredResult):
        return got
    name = (got["user_name"].content or {}).get("name", "stranger")
    roots = len(got["client_roots"].roots)
    return text(f"{sampled_text(got['greeting'])} {name} ({roots} roots)")


@mcp.tool(description="MRTR over three rounds: step1 (name), step2 (colour), then complete.")
async def test_input_required_result_multi_round(ctx: Context) -> CallToolResult | InputRequiredResult:
    if refusal := missing_capability(ctx, "elicitation"):
        return refusal
    step1 = elicit_request("Step 1: What is your name?", NAME_FORM, ["name"])
    step2 = elicit_request("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
    if not is_modern(ctx):
        got = await ask(ctx, {"step1": step1, "step2": step2})
        assert isinstance(got, dict)
        name, color = (got["step1"].content or {}).get("name"), (got["step2"].content or {}).get("color")
        return text(f"{name} likes {color}")
    # 2026-07-28: the first answer travels in the (sealed) requestState between rounds.
    state = ctx.request_state or ""
    if state.startswith("round-2:"):
        got = await ask(ctx, {"step2": step2}, state=state)
        if isinstance(got, InputRequiredResult):
            return got
        name = json.loads(state.removeprefix("round-2:"))
        return text(f"{name} likes {(got['step2'].content or {}).get('color')}")
    got = await ask(ctx, {"step1": step1}, state="round-1")
    if isinstance(got, InputRequiredResult):
        return got
    name = (got["step1"].content or {}).get("name", "stranger")
    return InputRequiredResult(input_requests={"step2": step2}, request_state="round-2:" + json.dumps(name))


@mcp.tool(description="MRTR that only asks for what the client declared (sampling and/or elicitation).")
async def test_input_required_result_capabilities(ctx: Context) -> CallToolResult | InputRequiredResult:
    requests: dict[str, InputRequest] = {}
    if declared(ctx, "sampling"):
        requests["sampled"] = sampling_request("Say something.", 20)
    if declared(ctx, "elicitation"):
        requests["elicited"] = elicit_request("Say something.", {"text": {"type": "string"}})
    if not requests:
        return missing_capability(ctx, "sampling") or text("nothing to ask")
    got = await ask(ctx, requests)
    if isinstance(got, InputRequiredResult):
        return got
    return text(f"received: {', '.join(sorted(got))}")


# ---- change notifications ---------------------------------------------------


@mcp.tool(description="Announces a tools list change (listen streams on 2026-07-28, the GET stream on 2025).")
async def test_trigger_tool_change(ctx: Context) -> CallToolResult:
    await ctx.notify_tools_changed()
    if not is_modern(ctx):
        await ctx.session.send_tool_list_changed()
    return text("tools/list_changed sent")


@mcp.tool(description="Announces a prompts list change (listen streams on 2026-07-28, the GET stream on 2025).")
async def test_trigger_prompt_change(ctx: Context) -> CallToolResult:
    await ctx.notify_prompts_changed()
    if not is_modern(ctx):
        await ctx.session.send_prompt_list_changed()
    return text("prompts/list_changed sent")


@mcp.tool(description="Announces an update of `uri` to subscribers (listen streams; the caller's 2025 subscription).")
async def test_trigger_resource_update(ctx: Context, uri: str = "test://watched-resource") -> CallToolResult:
    await ctx.notify_resource_updated(uri)
    if not is_modern(ctx) and uri in legacy_subscriptions.get(session_key(ctx.headers), set()):
        await ctx.session.send_resource_updated(uri)
    return text(f"resources/updated sent for {uri}")


# ---- JSON Schema 2020-12 ------------------------------------------------------


@mcp.tool(name="json_schema_2020_12_tool", description="Tool with JSON Schema 2020-12 features")
def json_schema_2020_12_tool(
    name: str | None = None,
    address: dict[str, Any] | None = None,
    contactMethod: str | None = None,  # noqa: N803 (wire name)
    phone: str | None = None,
    email: str | None = None,
) -> CallToolResult:
    return text(f"Received contact for {name or 'anonymous'}")


# Advertise the hand-written 2020-12 schema instead of the one derived from the signature.
_schema_tool = mcp._tool_manager.get_tool("json_schema_2020_12_tool")  # pyright: ignore[reportPrivateUsage]
assert _schema_tool is not None
_schema_tool.parameters = JSON_SCHEMA_2020_12


# ---- resources --------------------------------------------------------------


@mcp.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", name="static-binary", description="A 1x1 PNG image", mime_type="image/png")
def static_binary() -> bytes:
    return PNG_BYTES


@mcp.resource(
    "test://template/{id}/data",
    name="template-data",
    description="Per-id JSON document (resource template)",
    mime_type="application/json",
)
def template_data(id: str) -> str:  # noqa: A002 (template variable name)
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@mcp.resource(
    "test://watched-resource",
    name="watched-resource",
    description="Subscribe to it; test_trigger_resource_update announces changes",
    mime_type="text/plain",
)
def watched_resource() -> str:
    return "Watched resource content."


# ---- prompts ------------------------------------------------------------------


@mcp.prompt(name="test_simple_prompt", description="A prompt without arguments")
def simple_prompt() -> list[UserMessage]:
    return [UserMessage("This is a simple prompt for testing.")]


@mcp.prompt(name="test_prompt_with_arguments", description="A prompt that substitutes two arguments")
def prompt_with_arguments(
    arg1: Annotated[str, Field(description="First test argument")],
    arg2: Annotated[str, Field(description="Second test argument")],
) -> list[UserMessage]:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@mcp.prompt(name="test_prompt_with_embedded_resource", description="A prompt embedding a resource")
def prompt_with_embedded_resource(
    resourceUri: Annotated[str, Field(description="URI of the resource to embed")],  # noqa: N803 (wire name)
) -> list[UserMessage]:
    resource = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(EmbeddedResource(type="resource", resource=resource)),
        UserMessage("Please process the embedded resource above."),
    ]


@mcp.prompt(name="test_prompt_with_image", description="A prompt with image content")
def prompt_with_image() -> list[UserMessage]:
    return [
        UserMessage(ImageContent(type="image", data=PNG_B64, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@mcp.prompt(name="test_input_required_result_prompt", description="MRTR on prompts/get: asks for context first")
async def input_required_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
    context = "(none: the client cannot elicit)"
    if declared(ctx, "elicitation"):
        form = {"context": {"type": "string"}}
        got = await ask(ctx, {"user_context": elicit_request("What context should the prompt use?", form, ["context"])})
        if isinstance(got, InputRequiredResult):
            return got
        context = (got["user_context"].content or {}).get("context", context)
    return [UserMessage(f"Use this context: {context}")]


# ---- completion ---------------------------------------------------------------


@mcp.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
    if isinstance(ref, PromptReference) and ref.name == "test_prompt_with_arguments":
        options = ["paris", "park", "party"]
    elif isinstance(ref, ResourceTemplateReference) and ref.uri == "test://template/{id}/data":
        options = ["1", "2", "3", "123"]
    else:
        return None
    values = [v for v in options if v.startswith(argument.value)]
    return Completion(values=values, total=len(values), has_more=False)


# ---- 2025-era methods MCPServer does not register itself ---------------------

_lowlevel = mcp._lowlevel_server  # pyright: ignore[reportPrivateUsage]


async def set_logging_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    legacy_log_level[session_key(ctx.request.headers if ctx.request else None)] = params.level
    return EmptyResult()


async def subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    key = session_key(ctx.request.headers if ctx.request else None)
    legacy_subscriptions.setdefault(key, set()).add(str(params.uri))
    return EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    key = session_key(ctx.request.headers if ctx.request else None)
    legacy_subscriptions.get(key, set()).discard(str(params.uri))
    return EmptyResult()


async def reject_unknown_tool(ctx: ServerRequestContext, call_next: Any) -> Any:
    """Answer tools/call for an unknown tool with JSON-RPC -32602, as both eras' specs say.

    (MCPServer on its own reports it as an `isError` tool result.)
    """
    if ctx.method == "tools/call":
        name = (ctx.params or {}).get("name")
        if isinstance(name, str) and mcp._tool_manager.get_tool(name) is None:  # pyright: ignore[reportPrivateUsage]
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}", data={"name": name})
    return await call_next(ctx)


_lowlevel.middleware.append(reject_unknown_tool)

# The SDK gates these per era: on 2026-07-28 they answer -32601 (HTTP 404).
_lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_logging_level)
_lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
_lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)

# Advertise listChanged on 2025-era sessions too (the trigger tools send those
# notifications on the session's GET stream). 2026-07-28 derives it from
# subscriptions/listen being served.
_default_init_options = _lowlevel.create_initialization_options
_lowlevel.create_initialization_options = lambda *args, **kwargs: _default_init_options(  # type: ignore[method-assign]
    NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = pick a free one)")
    parser.add_argument(
        "--json-response", action="store_true", help="answer POSTs with application/json instead of SSE"
    )
    parser.add_argument(
        "--ttl-ms", type=int, default=60_000, help="ttlMs cache hint on cacheable 2026-07-28 results (default 60000)"
    )
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout instead of HTTP")
    args = parser.parse_args()

    _lowlevel.cache_hints = {method: CacheHint(ttl_ms=args.ttl_ms, scope="public") for method in CACHEABLE_METHODS}
    if args.stdio:
        mcp.run("stdio")
        return
    app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=args.json_response,
        event_store=InMemoryEventStore(),
        retry_interval=1000,
        host="127.0.0.1",  # also turns on Host/Origin (DNS-rebinding) checks for localhost
    )

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", args.port))
    except OSError as exc:
        sys.exit(f"conformance_fixture: cannot bind 127.0.0.1:{args.port}: {exc.strerror}")
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            while not server.started:
                if server.should_exit:
                    return
                await anyio.sleep(0.01)
            print(f"LISTENING http://127.0.0.1:{port}/mcp", flush=True)

    anyio.run(run)
    sys.exit(0 if server.started else 1)


if __name__ == "__main__":
    main()
