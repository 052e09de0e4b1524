"""The package as a user installs it: metadata, extras, the pytest-free test client,
the floors, and the one log line the runner prints per cancelled request."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import tomllib
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp_cancel import RegistryConfig, RequestStoppedEvent
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

from _support.repo_paths import ROOT, TESTS, load_dev_py

PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT: dict[str, Any] = PYPROJECT["project"]


def names(requirements: list[str]) -> set[str]:
    return {r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for r in requirements}


# -- metadata ------------------------------------------------------------------------------


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    assert "LICENSE" in PYPROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]


def test_the_metadata_names_authors_urls_and_only_tested_python_versions() -> None:
    assert PROJECT["authors"] and all(a.get("name") for a in PROJECT["authors"])
    assert {"Homepage", "Source"} <= set(PROJECT["urls"])
    classified = {
        c.rsplit(" :: ", 1)[1]
        for c in PROJECT["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    }
    # CI runs the tests with this interpreter: it is classified, and nothing older
    # than requires-python is.
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in classified
    floor = PROJECT["requires-python"].removeprefix(">=")
    assert all(
        tuple(map(int, v.split("."))) >= tuple(map(int, floor.split("."))) for v in classified
    )


def test_the_extras_split_what_users_need_from_what_contributors_need() -> None:
    extras: dict[str, list[str]] = PROJECT["optional-dependencies"]
    assert names(extras["redis"]) == {"coredis"}
    assert names(extras["testing"]) == {"pytest", "pytest-trio"}
    assert names(extras["demo"]) == {"httpx", "httpx2"}
    assert names(extras["client"]) == {"httpx2"}  # the client's HTTP; a server needs none
    # Telemetry: the OpenTelemetry API only; the SDK is the application's choice (and the tests').
    assert names(extras["otel"]) == {"opentelemetry-api"}
    assert names(extras["httptools"]) == {"httptools"}
    assert "httptools" in names(extras["dev"])  # so the tests run it against h11
    assert "opentelemetry-sdk" in names(extras["dev"])
    tools = {"ruff", "mypy", "pytest", "pytest-trio", "hypothesis", "httpx", "httpx2", "mcp"}
    assert tools | {"coredis"} <= names(extras["dev"])
    assert extras["test"] == ["trio-mcp-cancel[dev]"]  # the old name still installs it all
    # No tool of the project's own is a dependency of every user.
    assert not names(PROJECT["dependencies"]) & names(extras["dev"])


def test_ci_and_dev_py_install_the_dev_extra() -> None:
    assert "pip install --quiet -e '.[dev]'" in (ROOT / ".ci" / "run").read_text()
    assert "python3 dev.py floors" in (ROOT / ".ci" / "run").read_text()
    dev = load_dev_py()
    assert dev.COMMANDS["test"][1] == ("dev",) and dev.COMMANDS["demo"][1] == ("demo",)


def test_the_floors_pin_every_dependency_at_its_lower_bound() -> None:
    pins = load_dev_py().floor_constraints()
    assert names(pins) == names(PROJECT["dependencies"])
    for pin, requirement in zip(pins, PROJECT["dependencies"], strict=True):
        assert pin.split("==")[1] == requirement.split(">=")[1].split(",")[0].strip()
    assert "trio==0.25" in pins and "attrs==23.2" in pins  # trio 0.25 needs attrs >= 23.2
    for test_file in load_dev_py().FLOORS_TESTS:
        assert (ROOT / test_file).exists(), test_file


# -- the test client without pytest --------------------------------------------------------

_WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None  # importing pytest now raises ImportError
sys.modules["pytest_trio"] = None
import trio, trio.testing
from trio_mcp_cancel.server import McpServer, Context
from trio_mcp_cancel.testing import open_test_client, assert_no_leaks

server = McpServer("no-pytest")

@server.tool()
async def add(ctx: Context, a: int, b: int) -> str:
    return str(a + b)

async def main():
    async with open_test_client(server) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert_no_leaks(client.registry)
    print(result["content"][0]["text"])

trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
try:
    from trio_mcp_cancel.pytest_plugin import mcp_registry
except ImportError:
    print("fixtures need pytest")
"""


@pytest.mark.subprocess
def test_open_test_client_imports_and_runs_without_pytest() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYTEST],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "fixtures", "need", "pytest"]


def test_the_pytest_plugin_serves_the_fixtures_and_testing_imports_no_pytest() -> None:
    entry = PROJECT["entry-points"]["pytest11"]["trio_mcp_cancel"]
    plugin = importlib.import_module(entry)
    from trio_mcp_cancel import testing

    for fixture in ("mcp_registry", "mcp_registry_config", "mcp_events"):
        assert callable(getattr(plugin, fixture))
        assert not hasattr(testing, fixture)  # one home: the plugin


# -- one log line per cancelled request -------------------------------------------------------

SERVER = McpServer("cancel-log")


@SERVER.tool()
async def polite(ctx: Context) -> str:
    await ctx.request.wait_cancelled()
    return "stopped"


@SERVER.tool()
async def stubborn(ctx: Context) -> str:
    await trio.sleep_forever()  # ignores the flag: only the hard cancel stops it
    return "never"


def cancel_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "trio_mcp_cancel" and r.levelno >= logging.INFO and "request" in r.message
    ]


async def test_a_cancel_logs_one_readable_info_line_when_the_request_stops(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_mcp_cancel")
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=5)) as client:
        stopped = client.registry.events.open_channel()
        call = client.start_call("polite", {})
        await client.wait_in_flight(call)
        await trio.sleep(0.25)
        await call.cancel("user pressed stop")
        event = await stopped.receive()
        while not isinstance(event, RequestStoppedEvent):
            event = await stopped.receive()
    [line] = cancel_lines(caplog)
    assert line.levelno == logging.INFO
    assert line.getMessage() == (
        f"request {call.id!r} in {client.namespace} cancelled by the client"
        " ('user pressed stop'): stopped 0.000 s after the flag"
    )
    assert (event.kind, event.reason, event.hard) == ("client", "user pressed stop", False)


async def test_a_hard_cancel_logs_its_line_with_the_grace_it_took(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_mcp_cancel")
    async with open_test_client(SERVER, registry_config=RegistryConfig(grace_period=5)) as client:
        call = client.start_call("stubborn", {})
        await client.wait_in_flight(call)
        await call.cancel(None)
        await client.registry.wait_idle()
    [line] = cancel_lines(caplog)
    assert line.getMessage().endswith(
        "cancelled by the client (no reason given): hard-cancelled 5.000 s after the flag"
    )


# -- the same line from the CLI, and --log-level -----------------------------------------------


def run_cli_and_cancel(*options: str) -> str:
    """``trio-mcp-cancel run _support.runner_app:server`` on stdio: call ``hold``, cancel, close."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "hold", "arguments": {"seconds": 60}}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled",
         "params": {"requestId": 2, "reason": "enough"}},
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "RUNNER_APP_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT)])
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_mcp_cancel", "run", "_support.runner_app:server",
         "--grace-period", "0", *options],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    process.stdin.flush()
    # The initialize answer: the session is up and the call was read after it.
    assert json.loads(process.stdout.readline())["id"] == 1
    try:
        _, stderr = process.communicate(timeout=60)  # closes stdin: the session ends
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    return stderr.decode(errors="replace")


@pytest.mark.subprocess
def test_the_cli_logs_each_cancel_at_info_by_default() -> None:
    stderr = run_cli_and_cancel()
    [line] = [line for line in stderr.splitlines() if " cancelled by " in line]
    assert "INFO trio_mcp_cancel: request 2 in session:stdio-" in line
    # --grace-period 0: hard-cancelled at once (in real time, so the seconds are not judged).
    assert re.search(
        r"cancelled by the client \('enough'\): hard-cancelled \d+\.\d{3} s after", line
    )


@pytest.mark.subprocess
def test_the_cli_log_level_silences_it() -> None:
    stderr = run_cli_and_cancel("--log-level", "warning")
    assert " cancelled by " not in stderr and "Traceback" not in stderr
