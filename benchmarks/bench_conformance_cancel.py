"""Our cancellation conformance scenarios against our server and the official Python SDK's.

``conformance/scenarios/`` holds cancellation scenarios written in the
official suite's scenario format (the suite has none: conformance#433).
This runs them, with their runner under the pinned Node 22, at both eras
against ``examples/conformance_server.py`` and against the same two
fixture tools on the official MCP Python SDK (``mcp`` 2.x, its streamable
HTTP app with sessions on uvicorn: :mod:`benchmarks._sdk_cancel_fixtures`),
and reports per server and era how many checks pass and which do not (a
warning is a SHOULD the server does not do).  No timing: a record of
behaviour.  ``--quick`` runs our server at 2025-11-25 only.  Not run
without the Node tooling (``python3 dev.py conformance`` installs it); the
SDK's rows need ``mcp``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio

from ._common import Row

NAME = "conformance_cancel"
BENCH = "12 conformance cancel"
ROOT = Path(__file__).resolve().parent.parent
ERAS = ("2025-11-25", "2026-07-28")

sys.path.insert(0, str(ROOT / "conformance"))
import node_tools  # noqa: E402


@asynccontextmanager
async def _server(command: list[str], ready: str) -> AsyncIterator[str]:
    """A server child process; yields its MCP URL, read from the line holding *ready*."""
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process,
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        process: trio.Process = await nursery.start(run)
        assert process.stdout is not None
        text = ""
        with trio.fail_after(60):
            while ready not in text or not text.endswith("\n"):
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    raise RuntimeError(f"the server exited before {ready!r}: {text}")
                text += chunk.decode()
        line = next(line for line in text.splitlines() if ready in line)
        url = line.split()[-1]
        try:
            yield url if url.startswith("http") else f"http://127.0.0.1:{url}/mcp"
        finally:
            process.terminate()


async def _run(url: str, era: str) -> list[dict[str, str]]:
    with tempfile.TemporaryDirectory() as out:
        command = [str(node_tools.node()), str(ROOT / "conformance/scenarios/run.ts")]
        await trio.run_process(
            [*command, "--url", url, "--spec-version", era, "-o", out],
            capture_stdout=True,
            check=False,
        )
        return _checks(Path(out))


def _checks(out: Path) -> list[dict[str, str]]:
    """Every check the runner wrote under *out* (one ``checks.json`` per scenario)."""
    checks: list[dict[str, str]] = []
    for path in sorted(out.glob("*/checks.json")):
        checks.extend(json.loads(path.read_text()))
    return checks


def _row(server: str, era: str, checks: list[dict[str, str]], ours: bool) -> Row:
    passing = [c for c in checks if c["status"] == "SUCCESS"]
    others = [f"{c['id']} ({c['status'].lower()})" for c in checks if c["status"] != "SUCCESS"]
    value = f"{len(passing)} of {len(checks)} checks pass"
    if others:
        value += "; not: " + ", ".join(others)
    status = "PASS" if ours and not others else ("MISS" if ours else "")
    return Row(BENCH, f"{server}, {era}", value, "all" if ours else "info", status)


async def run(quick: bool) -> list[Row]:
    if not node_tools.installed():
        return [
            Row(BENCH, "scenario rows", "not run: Node tooling not installed (dev.py conformance)")
        ]
    servers = [
        (
            "ours (examples/conformance_server.py)",
            True,
            [sys.executable, "examples/conformance_server.py", "--port", "0"],
            "conformance server:",
        ),
    ]
    try:
        import mcp  # noqa: F401

        servers.append(
            (
                "MCP Python SDK (mcp 2.x, sessions, uvicorn)",
                False,
                [sys.executable, "-m", "benchmarks._sdk_cancel_fixtures"],
                "READY",
            ),
        )
    except ImportError:
        pass
    if quick:  # a smoke test: our server, one era (the full run takes about a minute)
        servers = servers[:1]
    rows: list[Row] = []
    for label, ours, command, ready in servers:
        async with _server(command, ready) as url:
            for era in ERAS[:1] if quick else ERAS:
                rows.append(_row(label, era, await _run(url, era), ours))
    return rows
