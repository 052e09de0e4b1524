"""MCP over stdio: newline-delimited JSON-RPC on the process's stdin and stdout.

The process is one client's session: the host that launched it writes one
JSON-RPC message per line to our stdin and reads our answers from stdout.
Everything beyond the framing is the shared
:class:`~trio_mcp_cancel.transports._connection.MessageConnection`:

* the session's cancellation namespace is a fresh ``session:stdio-<random>``;
* a request carrying the modern ``_meta`` envelope is served statelessly,
  and ``initialize`` makes the process a legacy session (MCP's "dual-era
  server answers ``initialize`` with legacy semantics scoped to the
  process");
* ``notifications/cancelled`` is the only way a stdio client can cancel
  (there is no per-request stream to close); once it is read, nothing more
  is written for that request;
* ``tasks/cancel`` (Tasks extension) stops a task the same way: the
  server's task manager runs while the process serves (unless the
  application runs it), so a task-capable tool becomes a task when the
  client declares the extension;
* end of file on stdin is the end of the client's requests, not of its
  reading (MCP's stdio shutdown: the host closes stdin, then waits for the
  process to exit, reading stdout until then): every request already read
  is still answered (a ``tools/list`` sent just before the end of file
  too), every tool call still running is cancelled (kind
  ``"disconnect"``: no answer), its tasks too, and serving returns once
  they have finished, at most the grace period later;
* so is a host that keeps the pipes open but stops reading stdout (a
  paused or wedged process): no tool ever blocks writing to it, and once a
  write has waited ``write_timeout`` seconds, or ``max_buffered_bytes`` of
  notifications pile up behind it, the session ends the same way.

**Stdout carries nothing but protocol messages.**  When this module opens
the real stdout itself, it first points file descriptor 1 at stderr for the
duration, so a stray ``print()`` in a tool (or in a C extension) lands in
the log instead of corrupting the stream the host is parsing, and it
restores it afterwards.  Logs go to stderr through :mod:`logging`.

**Bounded input.**  A line longer than ``max_message_size`` is never held
in memory: it is answered with ``-32600`` (the id is unknown, so ``null``)
as soon as it outgrows the bound, and the rest of it is skipped up to the
next newline.

The real stdin and stdout are read and written as non-blocking
:class:`trio.lowlevel.FdStream` objects (on duplicates of fds 0 and 1, so
closing them leaves the originals open), not through threads, so a
cancelled read is really cancelled and nothing outlives the call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator

import attrs
import trio

from .._core.registry import Registry, current_registry
from .._protocol.dispatcher import Served
from .._protocol.exchange import Caller
from .._protocol.lifespan import lifespan_served
from .._wire import jsonrpc
from ._connection import MessageConnection, connection_caller
from ._extensions import extensions_served
from ._shutdown import SHUTDOWN_REASON
from ._startup import require_running
from .limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits

__all__ = ["serve_mcp_stdio"]

logger = logging.getLogger("trio_mcp_cancel.stdio")

_CHUNK = 64 * 1024

#: The signals that stop a server started with ``handle_signals=True``.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@attrs.define(eq=False)
class _LineReader:
    """Splits a byte stream into bounded lines; can be told to stop reading.

    Stopping (a signal) ends the lines as end of file would, so the
    connection takes its ordinary cancel-everything-and-wait path.  The
    pending read is interrupted by a cancel scope of its own, entered only
    around the read, never across a ``yield``.
    """

    stream: trio.abc.ReceiveStream
    max_message_size: int
    on_oversize: Callable[[], Awaitable[None]]
    stopped: bool = False
    _scope: trio.CancelScope | None = None

    def stop(self) -> None:
        self.stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def _receive(self) -> bytes:
        """The next chunk; ``b""`` at end of file, on a broken stream or once stopped."""
        if self.stopped:
            return b""
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                return bytes(await self.stream.receive_some(_CHUNK))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
            finally:
                self._scope = None
        return b""  # only our own scope's cancel gets here: stop() was called

    async def lines(self) -> AsyncGenerator[bytes, None]:
        """Every non-blank line, without its newline; the last one may lack it."""
        limit = self.max_message_size
        buffer = bytearray()
        skipping = False  # inside a line that outgrew the limit
        while chunk := await self._receive():
            start = 0
            while start < len(chunk):
                newline = chunk.find(b"\n", start)
                end = len(chunk) if newline < 0 else newline
                if not skipping:
                    if len(buffer) + (end - start) > limit:
                        buffer.clear()
                        skipping = True
                        await self.on_oversize()
                    else:
                        buffer += chunk[start:end]
                if newline < 0:
                    break
                start = newline + 1
                if skipping:
                    skipping = False
                    continue
                line = bytes(buffer)
                buffer.clear()
                if line.strip():
                    yield line
        if not skipping and buffer.strip():
            yield bytes(buffer)


@contextlib.contextmanager
def _claim_stdout() -> Iterator[int]:
    """Own the protocol stream: yield a private duplicate of fd 1 and point
    fd 1 at stderr until exit, so stray writes cannot corrupt the stream."""
    protocol_fd = os.dup(1)
    original_fd = os.dup(1)
    try:
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr at all: stray writes go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        yield protocol_fd
    finally:
        if sys.stdout is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()  # buffered stray output still goes to stderr
        os.dup2(original_fd, 1)
        os.close(original_fd)


async def _watch_signals(
    reader: _LineReader,
    connection: MessageConnection,
    serving: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """SIGTERM or SIGINT once: shut down as at end of file; twice: at once.

    The first signal flags every running request (kind ``"server"``) and
    stops reading, so tools get the grace period to stop cleanly and the
    process exits normally; a second one (the grace period is ``None``, or
    the host lost patience) cancels serving outright.
    """
    with trio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if reader.stopped:
                logger.info("%s again: stopping now", name)
                serving.cancel()
                return
            logger.info("%s: shutting down", name)
            connection.channel.cancel_all(
                SHUTDOWN_REASON,
                kind="server",
                grace_period=connection.limits.disconnect_grace_period,
            )
            connection.tasks_end_as = (SHUTDOWN_REASON, "server")
            reader.stop()


async def serve_mcp_stdio(
    server: Served,
    registry: Registry | None = None,
    *,
    stdin: trio.abc.ReceiveStream | None = None,
    stdout: trio.abc.SendStream | None = None,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    handle_signals: bool = False,
    task_status: trio.TaskStatus[Caller] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *server* to the one client on stdin/stdout until end of file.

    Parameters:
        registry: the registry to track requests in (default: the one of
            the enclosing ``open_registry()``).
        stdin, stdout: Trio streams to use instead of the process's own
            (tests pass a ``trio.testing.memory_stream_pair()`` end).  Streams
            passed in are not closed: the caller owns them.
        limits: the :class:`~trio_mcp_cancel.server.ConnectionLimits` of the
            session.  ``disconnect_grace_period`` runs from end of file to the hard
            cancel of what still runs; ``max_message_size`` is the longest
            line read.  ``write_timeout``: tools never wait on stdout
            themselves; a host that stops reading for this long is treated
            as gone: every call is cancelled (kind ``"disconnect"``) and
            serving returns, instead of tools piling up behind a full pipe.
            ``max_buffered_bytes`` of progress and log notifications may
            wait for a slow host; more ends the session the same way.
            Replies (a large result too) are always accepted; while more
            than this waits in all, no new line is read.
        handle_signals: SIGTERM/SIGINT shut down cleanly (see
            ``_watch_signals``) instead of raising ``KeyboardInterrupt`` or
            killing the process.  Only from the main thread.

    ``task_status.started`` receives the session's :class:`Caller` (its
    ``namespace``, and its ``channel``, which knows whether ``initialize``
    made the session legacy).
    """
    if registry is None:
        registry = current_registry()
    require_running(registry, "serve_mcp_stdio")
    async with contextlib.AsyncExitStack() as stack:
        # Opened in this order and closed in reverse, so when fds 0 and 1
        # share one file description (a terminal) its blocking mode is
        # restored to what it was before either stream set it non-blocking.
        if stdin is None:
            stdin = trio.lowlevel.FdStream(os.dup(0))
            stack.push_async_callback(stdin.aclose)
        if stdout is None:
            stdout = trio.lowlevel.FdStream(stack.enter_context(_claim_stdout()))
            stack.push_async_callback(stdout.aclose)
        await _serve(
            server,
            registry,
            stdin,
            stdout,
            limits=limits,
            handle_signals=handle_signals,
            task_status=task_status,
        )


async def _serve(
    server: Served,
    registry: Registry,
    stdin: trio.abc.ReceiveStream,
    stdout: trio.abc.SendStream,
    *,
    limits: ConnectionLimits,
    handle_signals: bool,
    task_status: trio.TaskStatus[Caller],
) -> None:
    caller = connection_caller("stdio", registry, max_concurrent_calls=limits.max_concurrent_calls)
    max_message_size = limits.max_message_size

    async def write_line(text: str) -> None:
        # The encoder escapes every control character, so the text holds no
        # newline of its own: one message is exactly one line.
        await stdout.send_all(text.encode("ascii") + b"\n")

    # A closed stdin is a half-close: the host may still read stdout.
    connection = MessageConnection(
        server, caller, write_line, limits=limits, half_closed_input=True
    )

    async def too_large() -> None:
        logger.warning("skipped a message longer than %d bytes", max_message_size)
        await connection.send(jsonrpc.message_too_large(max_message_size))

    reader = _LineReader(stdin, max_message_size, too_large)
    logger.debug("serving MCP over stdio as %s", caller.namespace)
    async with lifespan_served(server), extensions_served(server), trio.open_nursery() as nursery:
        if handle_signals:
            await nursery.start(_watch_signals, reader, connection, nursery.cancel_scope)
        task_status.started(caller)
        async with contextlib.aclosing(reader.lines()) as lines:
            await connection.serve(lines)
        nursery.cancel_scope.cancel()  # the signal watcher
    if connection.stalled:
        logger.info("stdio session %s ended: the host stopped reading stdout", caller.namespace)
    else:
        logger.debug("stdio session %s ended", caller.namespace)
