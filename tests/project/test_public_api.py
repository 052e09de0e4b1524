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
from deploy_harness import modern
from repo_paths import ROOT

import trio_mcp_cancel
import trio_mcp_cancel.server
from trio_mcp_cancel._core.registry import USE_CONFIG
from trio_mcp_cancel._public import PUBLIC_MODULES
from trio_mcp_cancel.http import HttpLimits
from trio_mcp_cancel.server import ConnectionLimits, McpServer, ServerLimits

#: The tool author's and the server author's modules together (issue 21: "about 40";
#: one more since ``ServerLimits`` replaced five loose ``McpServer`` keywords).
MAX_CORE_NAMES = 41

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
    assert len(root) + len(server) <= MAX_CORE_NAMES


def test_plumbing_is_only_in_lowlevel() -> None:
    core = set(trio_mcp_cancel.__all__) | set(trio_mcp_cancel.server.__all__)
    for name in ("Dispatcher", "Caller", "Exchange", "Channel", "Call", "TaskManager"):
        assert name not in core
        assert name in importlib.import_module("trio_mcp_cancel.lowlevel").__all__
    for name in ("sanitize_reason", "validate_request_id", "MAX_ID_BYTES", "namespace_from_asgi"):
        assert name not in core


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
