"""``trio-mcp-cancel dev MODULE:ATTR``: serve over HTTP, restarting on every source change.

This process binds the port once (a free one unless ``--port``) and serves
the target in a worker process (:mod:`.worker`, as ``run --workers N``
does), so the URL stays the same across restarts and a client connecting
during one waits in the listen backlog instead of being refused.  Every
half second it compares the modification times of the target's sources:
the ``.py`` files of its top-level package, or of the directory of a
top-level module (found without importing them, so this process never runs
stale code).  On a change the worker gets SIGTERM (its graceful shutdown:
calls in flight answered ``-32800``), is killed if it still runs a few
seconds later, and a new one starts; a worker that fails to start (a syntax
error) is reported and the next change tries again.  Polling needs no
dependency, and a source tree is small.

Once serving, the URL is printed, and the MCP Inspector is started pointed
at it (``npx @modelcontextprotocol/inspector --transport http --server-url
URL``) when ``npx`` is on ``PATH`` and ``--no-inspector`` is not given;
otherwise the line says how to start it.  Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from .._client.streams import stop_child
from ..transports.http.serving import server_config
from . import target
from .runner import startup_problem

__all__ = ["INSPECTOR", "add_parser", "main", "sources"]

INSPECTOR = "@modelcontextprotocol/inspector"

#: How often the sources' modification times are compared.
POLL_INTERVAL = 0.5
#: A source tree bigger than this is watched only in part (a virtualenv in the project
#: directory, say): the first files found, in a stable order.
MAX_WATCHED = 5000
#: Seconds a worker gets from SIGTERM to exit (its graceful shutdown takes at most 5).
STOP_TIMEOUT = 7.0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "dev",
        help="serve MODULE:ATTR over HTTP, restarting it when its files change",
        description="Serve MODULE:ATTR over HTTP on 127.0.0.1, restart it when its source files"
        " change, and open the MCP Inspector on it (when npx is available).",
    )
    parser.add_argument("target", metavar="MODULE:ATTR", help="an McpServer or an ASGI app")
    parser.add_argument("--port", type=int, default=0, help="the port (default: any free one)")
    parser.add_argument(
        "--no-inspector", action="store_true", help="do not start the MCP Inspector"
    )


def main(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        return _error("--port must be 0-65535", 2)
    try:
        watched = sources(args.target)
    except target.TargetError as exc:
        return _error(str(exc), 2)
    config = server_config(host="127.0.0.1", port=args.port)
    try:
        (listener,) = config.create_sockets().insecure_sockets
    except OSError as exc:
        return _error(startup_problem(exc, "127.0.0.1", args.port, "--port") or str(exc), 1)
    try:
        listener.listen(config.backlog)
        dev = Dev(args.target, watched, listener.fileno(), listener.getsockname()[1])
        dev.inspector = not args.no_inspector
        return trio.run(dev.run)
    except KeyboardInterrupt:
        return 0
    finally:
        listener.close()


def _error(message: str, status: int) -> int:
    print(f"trio-mcp-cancel dev: error: {message}", file=sys.stderr)
    return status


def sources(spec: str) -> Path:
    """The directory whose ``.py`` files are the target's sources (see the module docstring).

    A package: its directory, recursively.  A top-level module: its own
    directory (its helpers usually sit beside it), not recursively.
    """
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise target.TargetError(f"expected MODULE:ATTR (e.g. weather:server), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise target.TargetError(f"no module named {module.partition('.')[0]!r}")
    if found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    if found.origin is None or not os.path.exists(found.origin):
        raise target.TargetError(f"{module!r} has no source file to watch")
    return Path(found.origin).parent


def _files(root: Path, recursive: bool) -> Iterator[Path]:
    pattern = root.rglob("*.py") if recursive else root.glob("*.py")
    for count, path in enumerate(sorted(pattern)):
        if count >= MAX_WATCHED:
            return
        yield path


def snapshot(root: Path, recursive: bool) -> dict[Path, tuple[int, int]]:
    """Each source file's (modification time, size): a change of either is an edit."""
    stamps: dict[Path, tuple[int, int]] = {}
    for path in _files(root, recursive):
        try:
            stat = path.stat()
        except OSError:
            continue  # removed meanwhile: the next snapshot tells
        stamps[path] = (stat.st_mtime_ns, stat.st_size)
    return stamps


@attrs.define(eq=False)
class Dev:
    """Keep one worker serving *spec* on the listening socket *fd*; see the module docstring."""

    spec: str
    root: Path
    fd: int
    port: int
    inspector: bool = True
    url: str | None = None

    async def run(self) -> int:
        recursive = (self.root / "__init__.py").exists()
        stamps = snapshot(self.root, recursive)
        lifeline_read, lifeline_write = os.pipe()  # the workers stop when this process is gone
        try:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._until_signal, signals, nursery.cancel_scope)
                    while True:
                        await self._serve_until_change(nursery, lifeline_read, stamps, recursive)
                        stamps = snapshot(self.root, recursive)
        finally:
            os.close(lifeline_read)
            os.close(lifeline_write)
        return 0  # stopped by a signal (the nursery's scope caught the cancellation)

    async def _until_signal(self, signals: Any, scope: trio.CancelScope) -> None:
        async for _ in signals:
            print("stopping", file=sys.stderr, flush=True)
            scope.cancel()
            return

    async def _serve_until_change(
        self,
        nursery: trio.Nursery,
        lifeline: int,
        stamps: dict[Path, tuple[int, int]],
        recursive: bool,
    ) -> None:
        """Start a worker and return once a source changed and the worker has stopped."""
        ready_read, ready_write = os.pipe()
        command = [sys.executable, "-m", "trio_mcp_cancel._run.worker", "--fd", str(self.fd)]
        command += ["--ready-fd", str(ready_write), "--lifeline-fd", str(lifeline), self.spec]
        try:
            process = await trio.lowlevel.open_process(
                command,
                stdin=subprocess.DEVNULL,
                pass_fds=(self.fd, ready_write, lifeline),
                process_group=0,  # a terminal's Ctrl-C reaches it through us, as SIGTERM
            )
        finally:
            os.close(ready_write)
        try:
            async with trio.lowlevel.FdStream(ready_read) as ready, trio.open_nursery() as inner:
                inner.start_soon(self._announce, ready, nursery)
                inner.start_soon(self._report_exit, process)
                changed = await _wait_for_change(self.root, stamps, recursive)
                print(f"trio-mcp-cancel dev: {changed} changed: restarting", file=sys.stderr,
                      flush=True)  # fmt: skip
                inner.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process)

    async def _announce(self, ready: trio.lowlevel.FdStream, nursery: trio.Nursery) -> None:
        line = b""
        while b"\n" not in line and len(line) < 4096:
            chunk = await ready.receive_some(4096)
            if not chunk:
                return  # it exited before serving: _report_exit says so
            line += chunk
        if self.url is not None:
            print("trio-mcp-cancel dev: serving again", file=sys.stderr, flush=True)
            return
        path = line.partition(b"\n")[0].decode(errors="replace").removeprefix("serving").strip()
        self.url = f"http://127.0.0.1:{self.port}{path}"
        print(f"serving MCP on {self.url} (restarting when {self.root} changes; Ctrl-C stops)",
              flush=True)  # fmt: skip
        if self.inspector:
            nursery.start_soon(run_inspector, self.url)
        else:
            print(inspector_hint(self.url), flush=True)

    async def _report_exit(self, process: trio.Process) -> None:
        status = await process.wait()
        print(f"trio-mcp-cancel dev: the server exited (status {status}); fix it and save,"
              " it restarts on the next change", file=sys.stderr, flush=True)  # fmt: skip


async def _wait_for_change(root: Path, stamps: dict[Path, tuple[int, int]], recursive: bool) -> str:
    """The name of the first source found added, removed or modified."""
    while True:
        await trio.sleep(POLL_INTERVAL)
        now = await trio.to_thread.run_sync(snapshot, root, recursive)
        if now != stamps:
            differing = sorted(set(now.items()) ^ set(stamps.items()))
            return differing[0][0].name if differing else str(root)


async def _stop(process: trio.Process) -> None:
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    with trio.move_on_after(STOP_TIMEOUT):
        await process.wait()
        return
    process.kill()
    await process.wait()


def inspector_command(url: str) -> list[str]:
    return ["npx", "-y", INSPECTOR, "--transport", "http", "--server-url", url]


def inspector_hint(url: str) -> str:
    return (
        f"MCP Inspector: with Node.js installed, run: npx {INSPECTOR} --transport http"
        f" --server-url {url}"
    )


async def run_inspector(url: str) -> None:
    """The MCP Inspector, pointed at *url*, until this command stops (then it is stopped)."""
    npx = shutil.which("npx")
    if npx is None:
        print(inspector_hint(url) + " (npx was not found on PATH)", flush=True)
        return
    command = [npx, *inspector_command(url)[1:]]
    print(f"starting the MCP Inspector: {' '.join(command)}", flush=True)
    process = await trio.lowlevel.open_process(
        command, stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        status = await process.wait()
        print(f"the MCP Inspector exited (status {status})", file=sys.stderr, flush=True)
    finally:
        await stop_child(process, 2.0)
