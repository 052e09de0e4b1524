"""The public surface: what each public module exports, under which name, documented.

Like trio's ``test_exports``: every name in a public module's ``__all__``
names the import a user can type (``repr(Registry)`` is
``trio_mcp_cancel.Registry``), the tool author's and server author's
modules stay small, and every exported class and function says what it is
for.  ``server.run()`` is checked as a user runs it: a subprocess, over
stdio (a real ``initialize`` and ``tools/call``) and over HTTP on a port
the OS picks.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import signal
import subprocess
import sys
import types
from pathlib import Path

import attrs
import httpx
import pytest
import trio

import trio_mcp_cancel
import trio_mcp_cancel.server
from trio_mcp_cancel._core.registry import USE_CONFIG
from trio_mcp_cancel._public import PUBLIC_MODULES
from trio_mcp_cancel.http import HttpLimits
from trio_mcp_cancel.server import ConnectionLimits, McpServer, ServerLimits

from _support.deploy import modern
from _support.repo_paths import ROOT

#: What a server author writes (issue 32: "about 18"): the server, its settings, the
#: context, what a handler returns or raises.
MAX_SERVER_NAMES = 20
#: What a transport author needs (issue 32: "at most 30"); the protocol's constants are
#: in ``lowlevel.wire``, which has no budget: it is a list of spellings, not of concepts.
MAX_LOWLEVEL_NAMES = 30

#: Modules whose names are documented in the module rather than on each name.
MODULES = sorted(PUBLIC_MODULES - {"trio_mcp_cancel.backends.redis"})


def exported(module_name: str) -> list[tuple[str, object]]:
    module = importlib.import_module(module_name)
    return [(name, getattr(module, name)) for name in module.__all__]


def own_objects(module_name: str) -> list[tuple[str, object]]:
    """The exported classes and functions (aliases and constants have no module of their own)."""
    return [
        (name, obj)
        for name, obj in exported(module_name)
        if isinstance(obj, (type, types.FunctionType))
    ]


@pytest.mark.parametrize("module_name", MODULES)
def test_every_exported_name_exists_once_in_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.{name}"


@pytest.mark.parametrize("module_name", MODULES)
def test_every_exported_class_and_function_names_a_public_module(module_name: str) -> None:
    """``__module__`` is the module exporting it, or another public module that also
    exports it (a name in two public modules keeps the first: the root wins)."""
    for name, obj in own_objects(module_name):
        home = obj.__module__  # type: ignore[attr-defined]
        assert home in PUBLIC_MODULES, f"{module_name}.{name} says it lives in {home}"
        assert name in importlib.import_module(home).__all__, f"{home} does not export {name}"
        assert obj.__qualname__ == name  # type: ignore[attr-defined]


@pytest.mark.parametrize("module_name", MODULES)
def test_every_exported_class_and_function_has_a_docstring(module_name: str) -> None:
    missing = [
        name for name, obj in own_objects(module_name) if not (inspect.getdoc(obj) or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_module_says_what_it_is_for(module_name: str) -> None:
    assert (importlib.import_module(module_name).__doc__ or "").strip()


def test_the_tool_and_server_author_modules_stay_small() -> None:
    root = set(trio_mcp_cancel.__all__)
    server = set(trio_mcp_cancel.server.__all__)
    assert not root & server
    assert len(server) <= MAX_SERVER_NAMES


def test_lowlevel_stays_within_what_a_transport_author_needs() -> None:
    lowlevel = importlib.import_module("trio_mcp_cancel.lowlevel")
    wire = importlib.import_module("trio_mcp_cancel.lowlevel.wire")
    assert len(lowlevel.__all__) <= MAX_LOWLEVEL_NAMES
    assert not set(lowlevel.__all__) & set(wire.__all__)
    # The protocol's constants are all in ``wire``: no constant in ``lowlevel`` itself.
    assert [name for name in lowlevel.__all__ if name.isupper()] == []


def test_plumbing_is_only_in_lowlevel() -> None:
    core = set(trio_mcp_cancel.__all__) | set(trio_mcp_cancel.server.__all__)
    for name in ("Dispatcher", "Caller", "Exchange", "Channel", "Call", "TaskManager"):
        assert name not in core
        assert name in importlib.import_module("trio_mcp_cancel.lowlevel").__all__
    for name in ("sanitize_reason", "validate_request_id", "MAX_ID_BYTES", "namespace_from_asgi"):
        assert name not in core


#: Every public module's names, pinned: adding, moving or dropping a public name is a
#: decision made here on purpose (and a line of the CHANGELOG's migration table).
PINNED: dict[str, list[str]] = {
    "trio_mcp_cancel": [
        "CancelKind",
        "CancellationLimitReached",
        "CleanupEvent",
        "Event",
        "EvictionEvent",
        "HardCancelEvent",
        "LimitReachedEvent",
        "NoRegistry",
        "OverrunEvent",
        "Registry",
        "RegistryClosed",
        "RegistryConfig",
        "RequestCancelled",
        "RequestCancelledEvent",
        "RequestId",
        "RequestStoppedEvent",
        "ThreadAbandonedEvent",
        "cancel_token",
        "cancelled",
        "checkpoint_cancelled",
        "open_registry",
        "run_process",
        "run_sync",
        "tracked",
    ],
    "trio_mcp_cancel.backends": [
        "Backend",
        "BackendError",
        "BackendEvent",
        "BackendUnavailable",
        "CancelBus",
        "LocalBus",
        "MemoryBackend",
        "MemoryTaskStore",
        "TaskRecord",
        "TaskStore",
        "TaskStoreFull",
        "TaskStoreUnavailable",
    ],
    "trio_mcp_cancel.backends.redis": [
        "RedisBackend",
        "RedisBus",
        "RedisClient",
        "RedisCounters",
        "RedisSessionRecords",
        "RedisTaskStore",
    ],
    "trio_mcp_cancel.client": [
        "ClientCredentialsAuth",
        "ClientEra",
        "ClientHandlers",
        "ClientOptions",
        "InputHandler",
        "McpClient",
        "McpError",
        "McpTaskCancelled",
        "McpTaskError",
        "McpTransportError",
        "OAuthError",
        "PendingCall",
        "ProgressCallback",
        "TaskCallback",
        "TaskPolling",
        "open_client",
        "open_http_client",
        "open_stdio_client",
        "open_websocket_client",
    ],
    "trio_mcp_cancel.http": [
        "Authenticator",
        "HttpLimits",
        "McpHttpApp",
        "app_from_env",
        "backend_from_env",
        "bearer_auth",
        "serve",
        "server_config",
    ],
    "trio_mcp_cancel.lowlevel": [
        "Call",
        "Caller",
        "CancelOutcome",
        "CancelToken",
        "Cancellation",
        "Channel",
        "ClientResponseCall",
        "Dispatcher",
        "EventHub",
        "Exchange",
        "InvalidRequestId",
        "JsonRpcError",
        "LifespanFailed",
        "NotificationCall",
        "Registration",
        "Rejected",
        "RequestCall",
        "Served",
        "SubscriptionLimits",
        "TaskManager",
        "ThreadLimit",
        "TrackedRequest",
        "Tracking",
        "current_registry",
        "current_request",
        "namespace_for",
        "namespace_from_asgi",
        "track",
        "untrack",
        "validate_request_id",
    ],
    "trio_mcp_cancel.lowlevel.extensions": [
        "ALL_ERAS",
        "CallNext",
        "Extension",
        "ExtensionHost",
        "Filter",
        "HandlerInput",
        "LEGACY_ONLY",
        "MODERN_ONLY",
        "Method",
        "ToolCall",
    ],
    "trio_mcp_cancel.lowlevel.wire": [
        "Era",
        "HEADER_METHOD",
        "HEADER_MISMATCH",
        "HEADER_NAME",
        "HEADER_PARAM_PREFIX",
        "HEADER_PROTOCOL_VERSION",
        "HEADER_SESSION_ID",
        "INTERNAL_ERROR",
        "INVALID_PARAMS",
        "INVALID_REQUEST",
        "LATEST_LEGACY_VERSION",
        "LATEST_VERSION",
        "LEGACY_TOO_MANY_REQUESTS",
        "LEGACY_VERSIONS",
        "MAX_ID_BYTES",
        "META_CLIENT_CAPABILITIES",
        "META_CLIENT_INFO",
        "META_LOG_LEVEL",
        "META_PROTOCOL_VERSION",
        "META_SERVER_INFO",
        "META_SUBSCRIPTION_ID",
        "METHOD_NOT_FOUND",
        "MISSING_CLIENT_CAPABILITY",
        "MODERN_VERSIONS",
        "PARSE_ERROR",
        "REQUEST_CANCELLED",
        "TASKS_EXTENSION",
        "TASK_STATUSES",
        "TERMINAL_STATUSES",
        "TOO_MANY_REQUESTS",
        "TaskStatus",
        "UNSUPPORTED_PROTOCOL_VERSION",
        "too_many_requests_code",
    ],
    "trio_mcp_cancel.middleware": [
        "CallNext",
        "JsonRpcError",
        "Middleware",
        "MiddlewareRequest",
        "Outcome",
        "RateLimit",
        "RequestLog",
        "ResponseCache",
        "Timing",
    ],
    "trio_mcp_cancel.oauth": [
        "AccessToken",
        "AuthServerUnavailable",
        "IntrospectionVerifier",
        "InvalidToken",
        "JwtOrOpaque",
        "JwtVerifier",
        "OAuthResource",
        "TokenVerifier",
        "TooManyNewTokens",
        "oauth_from_env",
        "requesting_client",
    ],
    "trio_mcp_cancel.process": ["CLOSE_STDIN", "ProcessResult", "ProgressReporter", "run_process"],
    "trio_mcp_cancel.pytest_plugin": ["mcp_events", "mcp_registry", "mcp_registry_config"],
    "trio_mcp_cancel.server": [
        "Audio",
        "CancellationError",
        "ClientRequestError",
        "ClientRequestTimeout",
        "ConnectionLimits",
        "Context",
        "ElicitResult",
        "EmbeddedResource",
        "Image",
        "InputRequired",
        "McpServer",
        "PromptMessage",
        "ResourceData",
        "ResourceLink",
        "ServerLimits",
        "Tasks",
        "Telemetry",
        "Text",
        "ToolError",
        "ToolResult",
    ],
    "trio_mcp_cancel.stdio": ["run_stdio", "serve_mcp_stdio"],
    "trio_mcp_cancel.testing": [
        "EventRecorder",
        "McpError",
        "McpTaskError",
        "McpTestClient",
        "PendingCall",
        "advance_past_grace_period",
        "assert_no_leaks",
        "open_test_client",
    ],
    "trio_mcp_cancel.websocket": ["serve_mcp_websocket"],
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC_MODULES))
def test_every_public_module_exports_exactly_its_pinned_names(module_name: str) -> None:
    assert sorted(importlib.import_module(module_name).__all__) == PINNED[module_name]


def test_every_public_module_is_pinned() -> None:
    assert set(PINNED) == set(PUBLIC_MODULES)


#: Names that moved in issue 32 (a small public face): old import -> the import that
#: replaces it.  Each new one must resolve; each old one must be gone.
MOVED: dict[str, str] = {
    "trio_mcp_cancel.lowlevel.HandlerInput": "trio_mcp_cancel.lowlevel.extensions.HandlerInput",
    "trio_mcp_cancel.server.ToolContext": "trio_mcp_cancel.server.Context",
    "trio_mcp_cancel.lowlevel.InputRequired": "trio_mcp_cancel.server.InputRequired",
    "trio_mcp_cancel.lowlevel.elicit": "trio_mcp_cancel.server.InputRequired.elicit",
    "trio_mcp_cancel.lowlevel.sample": "trio_mcp_cancel.server.InputRequired.sample",
    "trio_mcp_cancel.lowlevel.list_roots": "trio_mcp_cancel.server.InputRequired.list_roots",
    "trio_mcp_cancel.lowlevel.CancellationError": "trio_mcp_cancel.server.CancellationError",
    **{
        f"trio_mcp_cancel.lowlevel.{name}": f"trio_mcp_cancel.lowlevel.wire.{name}"
        for name in (
            "LATEST_LEGACY_VERSION",
            "LATEST_VERSION",
            "LEGACY_TOO_MANY_REQUESTS",
            "LEGACY_VERSIONS",
            "MAX_ID_BYTES",
            "MODERN_VERSIONS",
            "REQUEST_CANCELLED",
            "TASKS_EXTENSION",
            "TOO_MANY_REQUESTS",
            "Era",
            "too_many_requests_code",
        )
    },
}

#: Names that left the public surface in issue 32, with what a user writes instead.
WITHDRAWN: dict[str, str] = {
    "trio_mcp_cancel.lowlevel.GLOBAL_NAMESPACE": 'the string "global" (the default namespace)',
    "trio_mcp_cancel.lowlevel.USE_CONFIG": "leave disconnect_grace_period at its default",
    "trio_mcp_cancel.lowlevel.UseConfig": "the type of that default; not needed",
    "trio_mcp_cancel.lowlevel.ValidRequestId": "what validate_request_id returns",
    "trio_mcp_cancel.lowlevel.is_valid_request_id": "validate_request_id (raises InvalidRequestId)",
    "trio_mcp_cancel.lowlevel.sanitize_reason": "the registry sanitizes every reason it keeps",
    "trio_mcp_cancel.lowlevel.client_bucket": "namespace_for / namespace_from_asgi",
    "trio_mcp_cancel.lowlevel.reason": "current_request().cancellation.reason",
    "trio_mcp_cancel.lowlevel.RequestLike": "any object with request_id and namespace",
    "trio_mcp_cancel.lowlevel.Envelope": "Dispatcher reads it; a transport passes what it parsed",
    "trio_mcp_cancel.lowlevel.LegacyState": "Channel.legacy (what initialize negotiated)",
    "trio_mcp_cancel.lowlevel.OnCancel": 'the literals "silent" / "error" of McpServer(on_cancel=)',
    "trio_mcp_cancel.lowlevel.ServerRuntime": "server.dispatcher.runtime",
    "trio_mcp_cancel.lowlevel.StateSigner": "McpServer(state_secret=, state_ttl=)",
    "trio_mcp_cancel.lowlevel.Tool": "server.registration.tools",
    "trio_mcp_cancel.lowlevel.TaskSupport": "the literals of @server.tool(task=...)",
    "trio_mcp_cancel.lowlevel.Content": "Text | Image | Audio | EmbeddedResource | ResourceLink",
}


def _resolve(path: str) -> object:
    """The object a dotted path names: its longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise AssertionError(path)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_a_moved_name_is_gone_from_its_old_module_and_found_at_its_new_one(
    old: str, new: str
) -> None:
    old_module, _, old_name = old.rpartition(".")
    assert not hasattr(importlib.import_module(old_module), old_name)
    assert _resolve(new) is not None


@pytest.mark.parametrize("old", sorted(WITHDRAWN))
def test_a_withdrawn_name_is_gone_from_the_public_surface(old: str) -> None:
    module_name, _, name = old.rpartition(".")
    assert not hasattr(importlib.import_module(module_name), name)
    assert all(name not in module.__all__ for module in map(importlib.import_module, PINNED))


def test_mrtr_by_hand_needs_only_input_required() -> None:
    from trio_mcp_cancel.server import InputRequired

    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    required = InputRequired(
        {
            "ok": InputRequired.elicit("Go?", schema),
            "llm": InputRequired.sample("Summarize", max_tokens=5),
            "roots": InputRequired.list_roots(),
        },
        state={"step": 1},
    )
    assert required.capabilities() == {"elicitation", "sampling", "roots"}
    assert required.requests["ok"]["params"]["requestedSchema"] == schema
    for builder in (InputRequired.elicit, InputRequired.sample, InputRequired.list_roots):
        assert (inspect.getdoc(builder) or "").strip()
    with pytest.raises(ValueError, match="unsupported method"):
        InputRequired({"x": {"method": "tools/call", "params": {}}})


def test_reprs_show_the_public_module() -> None:
    from trio_mcp_cancel.backends import MemoryBackend
    from trio_mcp_cancel.http import McpHttpApp
    from trio_mcp_cancel.lowlevel import Dispatcher
    from trio_mcp_cancel.testing import open_test_client

    assert repr(trio_mcp_cancel.Registry) == "<class 'trio_mcp_cancel.Registry'>"
    assert repr(trio_mcp_cancel.RequestCancelled) == "<class 'trio_mcp_cancel.RequestCancelled'>"
    assert repr(trio_mcp_cancel.server.McpServer) == "<class 'trio_mcp_cancel.server.McpServer'>"
    assert repr(McpHttpApp) == "<class 'trio_mcp_cancel.http.McpHttpApp'>"
    assert repr(Dispatcher) == "<class 'trio_mcp_cancel.lowlevel.Dispatcher'>"
    assert repr(MemoryBackend) == "<class 'trio_mcp_cancel.backends.MemoryBackend'>"
    assert trio_mcp_cancel.run_process.__module__ == "trio_mcp_cancel"
    assert open_test_client.__module__ == "trio_mcp_cancel.testing"
    error = trio_mcp_cancel.RequestCancelled("stop", "client")
    assert type(error).__module__ + "." + type(error).__qualname__ == (
        "trio_mcp_cancel.RequestCancelled"
    )


def test_a_prompt_message_is_not_the_json_rpc_message() -> None:
    assert "PromptMessage" in trio_mcp_cancel.server.__all__
    assert "Message" not in trio_mcp_cancel.server.__all__


# -- the settings objects ----------------------------------------------------------------


def test_settings_objects_are_frozen_and_documented() -> None:
    for cls in (ConnectionLimits, HttpLimits, ServerLimits):
        limits = cls()
        field = attrs.fields(cls)[0]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(limits, field.name, 1)
        # (inspect.getsource finds a class through __module__, now the public one.)
        home = "_protocol" if cls is ServerLimits else "transports"
        source = (ROOT / "trio_mcp_cancel" / home / "limits.py").read_text()
        source = source.split(f"class {cls.__name__}:", 1)[1].split("\n\n\n", 1)[0]
        for field in attrs.fields(cls):
            # Each field is followed by its docstring (the reason for its default).
            after = source.split(f"    {field.name}:", 1)[1].split("\n", 2)
            assert after[1].strip().startswith('"""') or after[2].strip().startswith('"""')


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (ConnectionLimits, "max_concurrent_calls", 0),
        (ConnectionLimits, "max_message_size", -1),
        (ConnectionLimits, "write_timeout", 0),
        (ConnectionLimits, "max_buffered_bytes", -1),
        (ConnectionLimits, "max_request_time", float("nan")),
        (ConnectionLimits, "keepalive_interval", True),
        (ConnectionLimits, "disconnect_grace_period", -1),
        (HttpLimits, "max_head_size", 0),
        (HttpLimits, "body_timeout", -5),
        (HttpLimits, "max_sessions", 1.5),
        (HttpLimits, "max_sessions_per_tenant", 0),
        (HttpLimits, "session_idle_timeout", "3600"),
        (ServerLimits, "max_calls", 0),
        (ServerLimits, "max_calls_per_tenant", True),
        (ServerLimits, "max_listen_streams", 1.5),
        (ServerLimits, "max_listen_streams_per_tenant", -1),
    ],
)
def test_a_bad_setting_fails_where_it_is_written(cls: type, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        cls(**{field: value})


def test_the_server_wide_caps_are_one_typed_value_with_one_name_each() -> None:
    # ``max_concurrent_calls`` is a connection's cap (ConnectionLimits) only.
    assert "max_concurrent_calls" not in {f.name for f in attrs.fields(ServerLimits)}
    with pytest.raises(TypeError):
        McpServer("old-keywords", max_concurrent_calls=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="limits"):
        McpServer("loose", limits={"max_calls": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="subscriptions"):
        ServerLimits(subscriptions={"max_uris": 1})  # type: ignore[arg-type]
    server = McpServer("typed", limits=ServerLimits(max_calls=None))
    assert server.limits.max_calls is None and server.limits.max_listen_streams_per_tenant == 32
    server.limits = ServerLimits(max_calls=2)  # replaced while serving: read at each admission
    assert server.dispatcher.registration.limits.max_calls == 2


def test_the_disconnect_grace_defaults_to_the_registry_grace_and_takes_none() -> None:
    assert ConnectionLimits().disconnect_grace_period is USE_CONFIG
    assert ConnectionLimits(disconnect_grace_period=None).disconnect_grace_period is None
    assert ConnectionLimits(disconnect_grace_period=0).disconnect_grace_period == 0


def test_every_transport_takes_the_same_connection_limits() -> None:
    from trio_mcp_cancel.http import McpHttpApp
    from trio_mcp_cancel.stdio import run_stdio, serve_mcp_stdio
    from trio_mcp_cancel.testing import open_test_client
    from trio_mcp_cancel.websocket import serve_mcp_websocket

    for fn in (serve_mcp_stdio, run_stdio, serve_mcp_websocket, open_test_client, McpHttpApp):
        parameters = inspect.signature(fn).parameters
        assert parameters["limits"].default == ConnectionLimits(), fn
        for old in ("grace", "stream_cancel_timeout", "write_timeout", "max_request_time"):
            assert old not in parameters, (fn, old)
        assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values()), fn
    assert inspect.signature(McpHttpApp).parameters["http_limits"].default == HttpLimits()


# -- server.run() ------------------------------------------------------------------------

RUN_SCRIPT = """
import sys

from trio_mcp_cancel import checkpoint_cancelled
from trio_mcp_cancel.server import McpServer

server = McpServer("run-test")


@server.tool
async def add(a: int, b: int) -> int:
    await checkpoint_cancelled()
    return a + b


if __name__ == "__main__":
    if sys.argv[1:] == ["http"]:
        server.run("http", port=0, grace_period=1)
    else:
        server.run()
"""

LEGACY = "2025-11-25"
_RUNNING_ON = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")


async def _launch(tmp_path: Path, *args: str) -> tuple[trio.Process, Path]:
    script = tmp_path / "run_server.py"
    script.write_text(RUN_SCRIPT)
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script), *args],
            cwd=str(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    return process, log


@pytest.mark.timeout(60)
@pytest.mark.subprocess
async def test_server_run_serves_stdio_by_default(tmp_path: Path) -> None:
    process, log = await _launch(tmp_path)
    try:
        assert process.stdin is not None and process.stdout is not None
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": LEGACY, "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "add", "arguments": {"a": 2, "b": 40}}},
        ]  # fmt: skip
        await process.stdin.send_all(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        received = b""
        with trio.fail_after(30):
            while received.count(b"\n") < 2:
                chunk = await process.stdout.receive_some()
                assert chunk, log.read_text()
                received += chunk
        answers = {m["id"]: m for m in map(json.loads, received.splitlines())}
        assert answers[1]["result"]["serverInfo"]["name"] == "run-test"
        assert answers[2]["result"]["content"] == [{"type": "text", "text": "42"}]
        await process.stdin.aclose()  # the host is done: a clean exit
        with trio.fail_after(20):
            await process.wait()
        assert process.returncode == 0, log.read_text()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.timeout(60)
@pytest.mark.subprocess
async def test_server_run_http_serves_on_the_port_it_logs_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    process, log = await _launch(tmp_path, "http")
    try:
        with trio.fail_after(30):
            while not (found := _RUNNING_ON.search(log.read_text())):
                assert process.returncode is None, log.read_text()
                await trio.sleep(0.05)
        url = f"http://127.0.0.1:{found.group(1)}/mcp"
        async with httpx.AsyncClient(timeout=10) as client:
            reply = await modern(
                client, url, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}
            )
        assert reply["result"]["content"] == [{"type": "text", "text": "3"}], reply
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await process.wait()
        assert process.returncode == 0, log.read_text()
        assert "INFO" in log.read_text()  # logging is configured like the CLI's
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_server_run_refuses_an_unknown_transport_before_serving() -> None:
    with pytest.raises(ValueError, match="transport"):
        trio_mcp_cancel.server.McpServer().run("carrier-pigeon")  # type: ignore[arg-type]


def test_nothing_a_tool_author_types_is_a_dispatcher_entry_point() -> None:
    server = trio_mcp_cancel.server.McpServer()
    for name in ("handle", "prepare", "notify", "admit", "refusal", "serve"):
        assert not hasattr(server, name), name
    assert inspect.signature(server.run).parameters["transport"].default == "stdio"
