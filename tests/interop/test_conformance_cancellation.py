"""Our cancellation scenarios (``conformance/scenarios/``) against the example conformance server.

The scenarios are TypeScript in the official suite's scenario format; their
runner (``run.ts``) drives a real server over 127.0.0.1, so the example
server is served here in process (hypercorn's Trio worker) and the runner
runs under the pinned Node 22, strictly (a warning fails too), once per era.
Also here: the fixture tools' own bounds (a hostile probe name, a flood of
probes), in memory.

Node tooling: ``python3 dev.py conformance`` (into ``.tools/``); skipped
locally when missing, installed under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest
import trio

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.http import McpHttpApp, serve, server_config
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import open_test_client

from _support.repo_paths import ROOT

RUNNER = ROOT / "conformance" / "scenarios" / "run.ts"
BOUND = 120


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "conformance_server_example", ROOT / "examples" / "conformance_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPECTED = {
    "2025-11-25": [
        "server-cancellation-no-messages-after-cancel",
        "server-cancellation-notification-stops-tool",
        "server-cancellation-unknown-or-foreign-id",
    ],
    "2026-07-28": [
        "server-cancellation-stream-close-stops-tool",
        "server-cancellation-tasks-cancel-stops-task",
        "server-cancellation-unknown-or-foreign-id",
    ],
}
"""The scenarios that apply at each era (the runner skips the others, as the suite does)."""


def results(out: Path) -> tuple[list[str], dict[str, str]]:
    """The scenarios that wrote ``checks.json`` under *out*, and every check's status."""
    found = sorted(out.glob("*/checks.json"))
    ran = sorted(re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", path.parent.name) for path in found)
    statuses = {c["id"]: c["status"] for path in found for c in json.loads(path.read_text())}
    return ran, statuses


async def run_scenarios(node: Path, served: McpServer, args: list[str], out: Path) -> str:
    """Serve *served* on 127.0.0.1 and run the scenario runner against it; its output."""
    async with open_registry(grace_period=2.0) as registry, trio.open_nursery() as nursery:
        app = McpHttpApp(served, registry)
        binds = await nursery.start(partial(serve, app, server_config(host="127.0.0.1", port=0)))
        done = await trio.run_process(
            [str(node), str(RUNNER), "--url", f"{binds[0]}/mcp", "-o", str(out), *args],
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
        )
        nursery.cancel_scope.cancel()
    return f"exit {done.returncode}\n{done.stdout.decode()}"


def deaf_server() -> McpServer:
    """The two fixtures, but the work ignores cancellation (shielded) for 6 s."""
    deaf = McpServer("deaf", "1.0.0")
    probes: dict[str, str] = {}

    @deaf.tool()
    async def test_cancellable_work(ctx: Context, probe: str, seconds: float = 30.0) -> str:
        probes[probe] = "running"
        with trio.CancelScope(shield=True):
            await trio.sleep(6)
        probes[probe] = "completed"
        return "done"

    @deaf.tool()
    async def test_cancellation_status(ctx: Context, probe: str) -> str:
        return probes.get(probe, "unknown")

    return deaf


@pytest.mark.node
@pytest.mark.subprocess
async def test_a_server_that_ignores_a_closed_stream_fails_the_stream_close_scenario(
    node: Path, tmp_path: Path
) -> None:
    with trio.fail_after(BOUND):
        args = [
            "--spec-version",
            "2026-07-28",
            "--scenario",
            "cancellation-stream-close-stops-tool",
        ]
        out = await run_scenarios(node, deaf_server(), args, tmp_path)
    assert out.startswith("exit 1"), out
    _, statuses = results(tmp_path)
    assert statuses == {
        "cancellation-stream-close-stops-work": "FAILURE",
        "cancellation-stream-close-still-serves": "SUCCESS",
    }, out


@pytest.mark.node
@pytest.mark.subprocess
@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
async def test_every_cancellation_scenario_passes_against_the_example_server(
    node: Path, era: str, tmp_path: Path
) -> None:
    with trio.fail_after(BOUND):
        args = ["--spec-version", era, "--strict"]
        out = await run_scenarios(node, example().server, args, tmp_path)
    assert out.startswith("exit 0"), out
    ran, statuses = results(tmp_path)
    assert ran == EXPECTED[era], out
    assert statuses and set(statuses.values()) == {"SUCCESS"}, statuses


async def test_the_probe_fixtures_refuse_oversized_names_and_keep_a_bounded_table() -> None:
    served = example()
    async with open_test_client(served.server) as client:
        refused = await client.call_tool("test_cancellation_status", {"probe": "x" * 1_000_000})
        assert refused["isError"] is True
        refused = await client.call_tool("test_cancellable_work", {"probe": "", "seconds": 0})
        assert refused["isError"] is True
        for n in range(served.PROBE_LIMIT + 50):
            await client.call_tool("test_cancellable_work", {"probe": f"p{n}", "seconds": 0})
        assert len(served.PROBES) == served.PROBE_LIMIT  # the oldest were forgotten
        first = await client.call_tool("test_cancellation_status", {"probe": "p0"})
        newest = f"p{served.PROBE_LIMIT + 49}"
        last = await client.call_tool("test_cancellation_status", {"probe": newest})
        assert [first["content"][0]["text"], last["content"][0]["text"]] == ["unknown", "completed"]
        assert max(map(len, served.PROBES)) <= served.PROBE_NAME_MAX
