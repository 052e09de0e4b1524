"""The TARGET of ``trio-mcp-cancel list`` and ``call``: a module, a URL or a command.

* ``MODULE:ATTR``: the server is imported and served in this process, on
  the in-memory connection of :func:`~trio_mcp_cancel.testing.open_test_client`
  (the real message path, no socket, no child);
* ``http(s)://...`` (or ``ws(s)://``): the library's client over the network,
  in either era (``auto``: the modern ``server/discover`` first);
* anything else is a command line (split as a POSIX shell would, with
  :mod:`shlex`) started as a stdio server.

Every way of failing to reach the server is a :class:`Unreachable` (exit 1)
or a :class:`~.target.TargetError` (exit 2, something the user typed), each
with a one-line message.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shlex
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import trio

from .. import __version__
from .._client.engine import ClientEngine
from .._client.errors import McpError, McpTransportError
from . import target

__all__ = [
    "Era",
    "Unreachable",
    "UsageError",
    "add_target_options",
    "kind_of",
    "open_target",
    "run_client_command",
    "settle_cancel",
]

Era = Literal["modern", "legacy", "auto"]

# A dotted module, a colon, a dotted attribute: what `run` serves.  A command
# ("python server.py") has a space or a slash; a URL a scheme.
_MODULE_ATTR = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


class Unreachable(Exception):
    """The server could not be reached, or went away (the command exits 1)."""


def kind_of(spec: str) -> Literal["module", "url", "command"]:
    """What *spec* names: see the module docstring."""
    if spec.startswith(("http://", "https://", "ws://", "wss://")):
        return "url"
    if _MODULE_ATTR.match(spec):
        return "module"
    return "command"


@contextlib.asynccontextmanager
async def open_target(spec: str, era: Era) -> AsyncIterator[ClientEngine]:
    """A connected client of *spec*, for one ``async with``."""
    kind = kind_of(spec)
    if kind == "module":
        async with _in_process(spec, era) as client:
            yield client
        return
    if kind == "url":
        opened: Any = _network(spec, era)
    else:
        opened = _command(spec, era)
    entered = False
    try:
        async with opened as client:
            entered = True
            yield client
    except OSError as exc:  # a command that cannot start, or a socket that broke
        raise Unreachable(_why(spec, exc)) from None
    except McpError as exc:
        if entered:
            raise
        raise Unreachable(f"cannot reach {spec}: {exc.message}") from None


@contextlib.asynccontextmanager
async def _in_process(spec: str, era: Era) -> AsyncIterator[ClientEngine]:
    from ..testing import open_test_client

    # Our stdout is the command's output (--json is parsed by scripts): what
    # the module prints while it is imported goes to stderr.
    with target.stdout_to_stderr():
        server = target.stdio_server(target.load(spec))
    # In memory the server is this library's, which serves both eras: "auto"
    # has nothing to find out, so it is the modern era.
    async with open_test_client(server, era="legacy" if era == "legacy" else "modern") as client:
        yield client


def _network(url: str, era: Era) -> Any:
    from ..client import open_client

    return open_client(url, era=era, client_info=_CLIENT_INFO)


def _command(spec: str, era: Era) -> Any:
    from ..client import open_stdio_client

    try:
        argv = shlex.split(spec)
    except ValueError as exc:
        raise target.TargetError(f"cannot split the command {spec!r}: {exc}") from None
    if not argv:
        raise target.TargetError("the target is empty (MODULE:ATTR, a URL or a command)")
    if shutil.which(argv[0]) is None:
        raise target.TargetError(
            f"{argv[0]!r} is not a command found on PATH, nor MODULE:ATTR, nor an http(s):// URL"
        )
    return open_stdio_client(argv, era=era, client_info=_CLIENT_INFO)


_CLIENT_INFO = {"name": "trio-mcp-cancel-cli", "version": __version__}


def _why(spec: str, exc: OSError) -> str:
    return f"cannot reach {spec}: {exc.strerror or exc}"


async def settle_cancel(client: ClientEngine) -> None:
    """Give a cancel just sent a moment to reach the server before the connection closes.

    On stdio and WebSocket the ``notifications/cancelled`` waits in the
    client's outbox, which closing the client drops; a cheap request of the
    era (``ping``, ``server/discover``) sent after it and answered proves it
    went out, since the outbox is written in order.  At most a second,
    shielded (it runs after Ctrl-C cancelled the call); a server that does
    not answer is told by the connection closing instead.
    """
    method = "ping" if client.era == "legacy" else "server/discover"
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        with contextlib.suppress(McpError, trio.ClosedResourceError, trio.BrokenResourceError):
            await client.request(method)


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """TARGET and ``--era``, the same on ``list`` and ``call``."""
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="MODULE:ATTR (served in this process), an http(s):// URL, or a stdio command"
        " such as 'python server.py' (one argument: quote it)",
    )
    parser.add_argument(
        "--era",
        choices=("auto", "modern", "legacy"),
        default="auto",
        help="the protocol era to speak (auto: modern 2026-07-28 if the server speaks it)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run_client_command(
    prog: str, body: Callable[[], Awaitable[int]], *, on_interrupt: Callable[[], int] | None = None
) -> int:
    """Run *body* under Trio; every failure a one-line error and an exit status.

    2: what the user typed (a target not found, bad arguments); 1: the
    server (unreachable, gone, an error answer).  Never a traceback: this
    is a command for people, and the message says what to fix.
    """
    try:
        return trio.run(body)
    except target.TargetError as exc:
        return _fail(prog, str(exc), 2)
    except UsageError as exc:
        return _fail(prog, str(exc), 2)
    except Unreachable as exc:
        return _fail(prog, str(exc), 1)
    except McpTransportError as exc:
        return _fail(prog, f"lost the connection: {exc.message}", 1)
    except McpError as exc:
        code = f" ({exc.code})" if exc.code else ""
        return _fail(prog, f"the server answered an error{code}: {exc.message}", 1)
    except ImportError as exc:  # the target's module failed to import something
        return _fail(prog, f"importing the target failed: {exc}", 2)
    except SyntaxError as exc:  # the target's module does not compile
        return _fail(prog, f"{exc.filename}:{exc.lineno}: {exc.msg}", 2)
    except KeyboardInterrupt:
        if on_interrupt is not None:
            return on_interrupt()
        return 130


class UsageError(Exception):
    """Something the user typed cannot be used (the command exits 2)."""


def _fail(prog: str, message: str, status: int) -> int:
    print(f"trio-mcp-cancel {prog}: error: {message}", file=sys.stderr)
    return status
