"""All knowledge of hypercorn's internals, in this module and :mod:`.hypercorn_idle`, with
version checks and off switches.

The app speaks plain ASGI; hypercorn is the server we ship with and test
against.  Four things here reach into it, each guarded so that a hypercorn
release that renames something only loses the shortcut, never a request:

* **Two guards and the idle timer** (:func:`install`, applied when this
  package's HTTP app is made and when ``serve()`` runs, never at import, so
  ``serve()``, ``hypercorn --worker-class trio module:app`` and any runner
  that imports a module making the app all get them):

  - *a forgotten HTTP/2 stream's DATA is dropped, not a crash.*  hypercorn
    0.18 forgets a stream as soon as its response is complete; a ``DATA``
    frame the client sends afterwards reaches ``self.streams[stream_id]``
    in ``H2Protocol._handle_events`` and raises ``KeyError`` (its
    ``StreamEnded`` branch has the guard, its ``DataReceived`` branch does
    not), which escapes the connection and ends the worker.  The guard
    gives ``H2Protocol`` a stream table whose missing entries answer such
    data: it is acknowledged (so the connection's flow-control window is
    not drained) and, when our side of the stream is already ended, the
    stream is reset with ``NO_ERROR``, the way RFC 9113 section 8.1 tells a
    server to ask a client to stop sending a body it no longer needs.
    Reported upstream: ``docs/upstream/hypercorn-h2-data-after-reset.md``.
  - *one connection's protocol error ends that connection only.*  Any
    exception escaping hypercorn's per-connection ``TCPServer.run`` (the
    bug above, an h11 ``LocalProtocolError``, the next one) would cancel
    every connection of the worker and end the process.  The guard ends
    that connection (hypercorn has closed its socket and cancelled its
    requests by then), logs it once on ``trio_mcp_cancel.http`` (with a
    traceback the first time a given failure is seen in the process, one
    line after that, so a client cannot flood the log), and lets the
    server go on.
  - *the keep-alive idle timeout costs a request nothing.*  hypercorn
    restarts a task per keep-alive request for it; :mod:`.hypercorn_idle`
    keeps one watcher per connection and moves its deadline instead, same
    behaviour (on the releases in :data:`~.hypercorn_idle.IDLE_CHECKED`, when
    ``TCPServer`` has the shape it was written for; off with
    ``MCP_HYPERCORN_FAST_PATHS=off`` when the first app is made, like the
    sink's shortcuts; it is the process's server, so
    ``McpHttpApp(hypercorn_fast_paths=False)`` leaves it on).  Proposed
    upstream: ``docs/upstream/hypercorn-idle-timeout.md``.

* **The hypercorn sink** (:class:`HypercornSink`, the app's
  :class:`~.writer.Sink` under hypercorn): shortcuts of the hot path
  (:func:`receive_now`, :func:`can_write_now`, :func:`send_whole`) and one
  repair (:func:`mark_head_blocked`), duck-typed (or type-checked against
  hypercorn's own classes) and answering "no shortcut" when the shape is
  not hypercorn's.

**The off switch for the sink.**  The app uses it only when
:func:`fast_paths_default` says so: hypercorn is installed, its version is
one the sink was checked against (:data:`FAST_PATHS_CHECKED`), and
``MCP_HYPERCORN_FAST_PATHS=off`` (or ``0``/``false``/``no``) is not in the
environment.  ``McpHttpApp(hypercorn_fast_paths=False)`` turns it off for
one app.  Off, the app's sink is :class:`~.writer.AsgiSink`, plain ASGI:
every body is awaited, every response goes through a writer task, and a
response head left pending by a client that stopped reading is left to
hypercorn (whose connection guard below contains the error it then raises).

``MCP_HYPERCORN_GUARD=off`` (or ``0``/``false``/``no``) in the environment
when the first app is made leaves hypercorn unpatched (the idle timer too);
:func:`uninstall` restores it at run time.  :func:`status` says what is applied.
:data:`FIXED_IN` is the first hypercorn release whose ``DataReceived``
branch has the guard (``None``: none yet); from that version on the stream
guard is not applied (the containment always is).
"""

from __future__ import annotations

import fcntl
import functools
import logging
import math
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import attrs
import trio

from ..._compat import installed, release, switched_off, why_off
from . import hypercorn_idle
from .writer import AsgiSink, head

__all__ = [
    "FAST_PATHS_CHECKED",
    "FAST_PATHS_ENV",
    "FIXED_IN",
    "GUARD_ENV",
    "GuardStatus",
    "HypercornSink",
    "can_write_now",
    "fast_paths_default",
    "idle_socket_of",
    "install",
    "mark_head_blocked",
    "receive_now",
    "send_whole",
    "status",
    "tcp_server_of",
    "uninstall",
]

logger = logging.getLogger("trio_mcp_cancel.http")

#: The environment variable that turns the guards off (``off``, ``0``, ``false``, ``no``).
GUARD_ENV: Final = "MCP_HYPERCORN_GUARD"
#: The first hypercorn release that guards ``DataReceived`` itself; ``None``: none yet.
FIXED_IN: Final[tuple[int, ...] | None] = None
#: Distinct failures logged with a traceback; later ones get one line each.
_TRACEBACKS: Final = 64


@attrs.frozen
class GuardStatus:
    """What :func:`install` applied.

    ``streams``: the HTTP/2 stream guard; ``connections``: the containment;
    ``idle``: the idle timer (:mod:`.hypercorn_idle`).
    """

    hypercorn: str | None
    """The installed hypercorn version (``None``: hypercorn is not installed)."""
    streams: bool
    connections: bool
    reason: str = ""
    """Why a guard or the idle timer is not applied (empty when all three are)."""
    idle: bool = False


_lock = threading.Lock()
_installed = False
#: hypercorn's own methods, captured on the first install and kept (the
#: wrappers call them, also on connections that outlive an uninstall).
_originals: dict[str, Any] = {}
_status = GuardStatus(None, False, False, "not installed")
_seen: set[tuple[str, str, int]] = set()


def status() -> GuardStatus:
    """What is applied right now."""
    return _status


def install(*, force: bool = False) -> GuardStatus:
    """Apply both guards and the idle timer to hypercorn's classes (idempotent; see the
    module docstring).

    Honours :data:`GUARD_ENV` unless *force*.  Never raises: a hypercorn
    whose shape is not the expected one is left alone, and the status says why.
    """
    global _status, _installed
    with _lock:
        if _installed:
            return _status
        if not force and switched_off(GUARD_ENV):
            _status = GuardStatus(_version(), False, False, f"{GUARD_ENV} turned it off")
            return _status
        try:
            from hypercorn.protocol.h2 import H2Protocol
            from hypercorn.trio.tcp_server import TCPServer
        except ImportError:
            _status = GuardStatus(None, False, False, "hypercorn is not installed")
            return _status
        version = _version()
        reasons = []
        streams = connections = False
        init = getattr(H2Protocol, "__init__", None)
        if FIXED_IN is not None and version is not None and release(version, 3) >= FIXED_IN:
            reasons.append(f"hypercorn {version} guards HTTP/2 DATA itself")
        elif callable(init) and callable(getattr(H2Protocol, "_handle_events", None)):
            _originals.setdefault("H2Protocol.__init__", init)
            H2Protocol.__init__ = _guarded_init  # type: ignore[method-assign]
            streams = True
        else:
            reasons.append("hypercorn's H2Protocol has changed shape")
        run = getattr(TCPServer, "run", None)
        if callable(run):
            _originals.setdefault("TCPServer.run", run)
            TCPServer.run = _contained_run  # type: ignore[method-assign]
            connections = True
        else:
            reasons.append("hypercorn's trio TCPServer has changed shape")
        if reasons:  # a missing guard is worth a warning; a missing shortcut only the status
            logger.warning("hypercorn guards partly not applied: %s", "; ".join(reasons))
        why_no_idle = _why_no_idle(version) or hypercorn_idle.apply(TCPServer)
        if why_no_idle:
            reasons.append(f"idle timer: {why_no_idle}")
        idle = not why_no_idle
        _installed = streams or connections or idle
        _status = GuardStatus(version, streams, connections, "; ".join(reasons), idle)
        return _status


def uninstall() -> None:
    """Restore hypercorn's own methods (connections opened meanwhile keep their guard)."""
    global _status, _installed
    with _lock:
        if not _installed:
            return
        from hypercorn.protocol.h2 import H2Protocol
        from hypercorn.trio.tcp_server import TCPServer

        if H2Protocol.__init__ is _guarded_init:
            H2Protocol.__init__ = _originals["H2Protocol.__init__"]  # type: ignore[method-assign]
        if TCPServer.run is _contained_run:
            TCPServer.run = _originals["TCPServer.run"]  # type: ignore[method-assign]
        hypercorn_idle.restore(TCPServer)
        _installed = False
        _status = GuardStatus(_status.hypercorn, False, False, "uninstalled")


def _version() -> str | None:
    return installed("hypercorn")


def _why_no_idle(version: str | None) -> str:
    """Why the idle timer stays off on its release check and switch (``""``: it may apply)."""
    return why_off(FAST_PATHS_ENV, "hypercorn", version, hypercorn_idle.IDLE_CHECKED)


# -- the HTTP/2 stream guard --------------------------------------------------


def _guarded_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """``H2Protocol.__init__``, then the stream table swapped for a :class:`_Streams`."""
    _originals["H2Protocol.__init__"](self, *args, **kwargs)
    self.streams = _Streams(self.connection, self.streams)


class _Streams(dict[int, Any]):
    """hypercorn's ``H2Protocol.streams``, answering streams it already forgot.

    A plain ``dict`` for every stream it knows (``__missing__`` is only
    consulted on a miss, so lookups cost what they did); a forgotten one
    gets a :class:`_Forgotten` stand-in instead of a ``KeyError``.
    """

    __slots__ = ("connection",)

    def __init__(self, connection: Any, streams: Any = ()) -> None:
        super().__init__(streams)
        self.connection = connection

    def __missing__(self, stream_id: int) -> _Forgotten:
        return _Forgotten(self.connection, stream_id)


class _Forgotten:
    """A stream hypercorn no longer holds: its events are dropped, its body stopped."""

    __slots__ = ("connection", "stream_id")

    def __init__(self, connection: Any, stream_id: int) -> None:
        self.connection = connection
        self.stream_id = stream_id

    async def handle(self, event: object) -> None:
        """Drop *event*; on body data, ask the client to stop sending (RFC 9113 section 8.1).

        hypercorn acknowledges the data right after this returns, so the
        connection's window is handed back.  The reset is sent only once
        our ``END_STREAM`` went out (the response is complete): resetting
        earlier would cut a response that is still being written.
        """
        if type(event).__name__ != "Body":
            return
        import h2.errors
        import h2.exceptions
        import h2.stream

        stream = self.connection.streams.get(self.stream_id)
        state = getattr(getattr(stream, "state_machine", None), "state", None)
        if state == h2.stream.StreamState.HALF_CLOSED_LOCAL:
            try:
                self.connection.reset_stream(self.stream_id, h2.errors.ErrorCodes.NO_ERROR)
            except h2.exceptions.ProtocolError:
                pass  # closed meanwhile: nothing to stop


# -- containment: one connection's failure ends that connection only -----------


async def _contained_run(self: Any) -> None:
    """hypercorn's ``TCPServer.run``, with any exception ending this connection only."""
    try:
        await _originals["TCPServer.run"](self)
    except* Exception as group:
        _log_contained(self, group)


def _log_contained(server: Any, group: BaseExceptionGroup[Exception]) -> None:
    """Log a contained failure once: a traceback the first time it is seen, then one line."""
    leaves = list(_leaves(group))
    first = leaves[0]
    peer = getattr(getattr(server, "protocol", None), "client", None)
    tb = first.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = (
        type(first).__name__,
        tb.tb_frame.f_code.co_filename if tb else "",
        tb.tb_lineno if tb else 0,
    )
    message = "connection from %s ended by an error in hypercorn's protocol handling: %r"
    if where not in _seen and len(_seen) < _TRACEBACKS:
        _seen.add(where)
        logger.error(message, peer, first, exc_info=first)
    else:
        logger.error(message + " (traceback logged before)", peer, first)


def _leaves(error: BaseException) -> Any:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


# -- hot-path shortcuts and one repair ----------------------------------------

#: The environment variable that turns the shortcuts and the repair off.
FAST_PATHS_ENV: Final = "MCP_HYPERCORN_FAST_PATHS"
#: The hypercorn releases (major, minor; first and last) whose internals the
#: shortcuts were checked against; outside them the app is plain ASGI.
FAST_PATHS_CHECKED: Final = ((0, 16), (0, 18))


def fast_paths_default() -> tuple[bool, str]:
    """Whether the shortcuts apply by default (the app's option overrides), and why not."""
    why = why_off(FAST_PATHS_ENV, "hypercorn", _version(), FAST_PATHS_CHECKED)
    return not why, why


_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


def receive_now(receive: _Receive) -> MutableMapping[str, Any] | None:
    """The next ASGI message if it is queued already, else ``None`` (then ``receive()`` it).

    hypercorn's Trio worker delivers a request's messages through a Trio
    memory channel, whose ``receive_nowait`` says so without waiting, and a
    small body is nearly always there by the time the app runs; reading it
    this way saves arming the body timeout's cancel scope on most requests.
    Other servers' ``receive`` is only awaited.
    """
    channel = getattr(receive, "__self__", None)
    if not isinstance(channel, trio.MemoryReceiveChannel):
        return None
    try:
        message: MutableMapping[str, Any] = channel.receive_nowait()
    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
        return None  # receive() waits, or raises the same
    return message


def mark_head_blocked(send: Any, head: MutableMapping[str, Any]) -> None:
    """Let hypercorn know a response started whose head write is still pending.

    hypercorn marks a response as started only once its head was written;
    an app that returns while that write is blocked makes hypercorn try a
    ``500`` on a connection h11 already sees as sending a body, and the
    ``LocalProtocolError`` escapes into (and stops) the whole server.
    Marking it started makes hypercorn close the connection instead, which
    releases the write.  Servers other than hypercorn are left alone.
    """
    stream: Any = getattr(send, "__self__", None)  # hypercorn.protocol.http_stream.HTTPStream
    state: Any = getattr(stream, "state", None)
    if stream is None or getattr(state, "name", None) != "REQUEST":
        return
    stream.response = head
    stream.state = type(state)["RESPONSE"]


#: hypercorn's HTTP/1.1 protocol and ours (.hypercorn_httptools): both hold the
#: TCPServer's ``protocol_send`` as ``send``.
_HTTP1_PROTOCOLS = frozenset({"H11Protocol", "HttptoolsProtocol"})


def tcp_server_of(send: Any) -> Any:
    """hypercorn's ``TCPServer`` behind an ASGI *send*, over HTTP/1.1 only; else ``None``.

    It holds the connection's ``send_lock`` and ``stream`` (the socket),
    which :func:`can_write_now` reads to tell whether a write can block.
    """
    stream = getattr(send, "__self__", None)  # hypercorn.protocol.http_stream.HTTPStream
    protocol = getattr(getattr(stream, "send", None), "__self__", None)
    if type(protocol).__name__ not in _HTTP1_PROTOCOLS:
        return None
    return getattr(getattr(protocol, "send", None), "__self__", None)


def idle_socket_of(send: Any) -> Any:
    """The socket behind an HTTP/1.1 *send* when no write holds its connection; else ``None``.

    hypercorn's ``TCPServer`` writes under its ``send_lock``; while nobody
    holds it, what :func:`can_write_now` reads from the socket (the bytes
    queued in the kernel) says whether the next write can block.
    """
    server = tcp_server_of(send)
    lock = getattr(server, "send_lock", None)
    sock = getattr(getattr(server, "stream", None), "socket", None)
    locked = getattr(lock, "locked", None)
    if sock is None or not callable(locked) or locked():
        return None
    return sock


# -- one socket write per whole response -----------------------------------------


@attrs.frozen
class _Names:
    """hypercorn's (and h11's) names :func:`send_whole` uses, imported once."""

    h11: Any
    raw_data: Any
    stream_closed: Any
    h11_protocol: Any
    http_stream: Any
    request_state: Any
    closed_state: Any
    build_and_validate_headers: Callable[[Any], list[tuple[bytes, bytes]]]
    suppress_body: Callable[[str, int], bool]


@functools.cache
def _whole_names() -> _Names | None:
    """hypercorn's names, imported on first use (``None``: not there, or renamed)."""
    try:
        import h11
        from hypercorn.events import RawData
        from hypercorn.protocol.events import StreamClosed
        from hypercorn.protocol.h11 import H11Protocol
        from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
        from hypercorn.utils import build_and_validate_headers, suppress_body

        return _Names(
            h11,
            RawData,
            StreamClosed,
            H11Protocol,
            HTTPStream,
            ASGIHTTPState.REQUEST,
            ASGIHTTPState.CLOSED,
            build_and_validate_headers,
            suppress_body,
        )
    except (ImportError, AttributeError):
        return None


async def send_whole(send: Any, head: MutableMapping[str, Any], body: bytes) -> bool:
    """Write a whole HTTP/1.1 response (*head*, then all of *body*) in one socket write.

    hypercorn writes a response in three: the head when
    ``http.response.start`` arrives, the body, then the (empty, for a
    ``Content-Length`` response) end of the message, each under the
    connection's send lock, in a shielded cancel scope, with a scheduling
    point.  An app that hands over the whole response at once can have the
    same bytes written in one: this does what ``HTTPStream.app_send`` and
    ``H11Protocol.stream_send`` do with the two messages, in their order and
    with their state changes (the h11 connection, the stream's ASGI state,
    the access log, the keep-alive recycle), with one ``RawData`` instead of
    three.  The bytes on the wire are the same.

    Only for a write that cannot block (the caller asked
    :func:`can_write_now`: nobody holds the send lock).  Once the
    h11 state moved on the bytes must go out, and they do: the only point
    where ``protocol_send`` could raise ``Cancelled`` before writing is the
    lock's ``checkpoint_if_cancelled``, and a task found not cancelled here
    reaches it without a scheduling point in between (hypercorn shields the
    write itself).  ``False``, having done nothing, when the task is
    cancelled or *send* is not hypercorn's HTTP/1.1 stream in the state this
    expects.
    """
    names = _whole_names()
    stream: Any = getattr(send, "__self__", None)
    if names is None or type(stream) is not names.http_stream:
        return False
    protocol: Any = getattr(stream.send, "__self__", None)
    if type(protocol) is not names.h11_protocol or protocol.stream is not stream:
        return False
    h11 = names.h11
    connection = protocol.connection
    status = int(head["status"])
    if (
        stream.state is not names.request_state
        or stream.closed
        or status < 200
        or connection.our_state is not h11.SEND_RESPONSE
        or connection.their_state is h11.ERROR
        or trio.current_effective_deadline() == -math.inf  # cancelled: see above
    ):
        return False
    config = protocol.config
    headers = [
        *names.build_and_validate_headers(head.get("headers", [])),
        *config.response_headers("h11"),
    ]
    if protocol.keep_alive_requests >= config.keep_alive_max_requests:
        headers.append((b"connection", b"close"))
    data = connection.send(h11.Response(headers=headers, status_code=status))
    stream.response = head
    if body and not names.suppress_body(stream.scope["method"], status):
        data += connection.send(h11.Data(data=body))
    data += connection.send(h11.EndOfMessage())
    stream.state = names.closed_state
    await protocol.send(names.raw_data(data=data))
    await config.log.access(stream.scope, head, time.time() - stream.start_time)
    await stream.send(names.stream_closed(stream_id=stream.stream_id))
    return True


# -- whether a whole response can be written in the request's own task ------------
#
# Over HTTP/1.1 on a plain TCP socket served by hypercorn, a write blocks
# only when the kernel's send buffer is full or too many bytes wait unsent
# (``TCP_NOTSENT_LOWAT``).  hypercorn's own state cannot tell: its
# ``TCPServer`` hands the bytes to ``SocketStream.send_all``, which blocks
# in the kernel, so the socket's queue (``SIOCOUTQ``, ``SIOCOUTQNSD``) is
# asked.  When it leaves room for the whole response with a wide margin, and
# no other write holds the connection's send lock, the write completes at
# once.  Everything else (HTTP/2, where a write also waits on flow control;
# TLS; another ASGI server; a platform other than Linux; any attribute this
# does not find) answers ``False``: the response goes through a writer task.

_LINUX: Final = sys.platform.startswith("linux")
_SIOCOUTQ: Final = 0x5411  # bytes queued on the socket, sent or not (TIOCOUTQ)
_SIOCOUTQNSD: Final = 0x894B  # of those, not sent yet
_NOTSENT_LOWAT: Final[int | None] = getattr(socket, "TCP_NOTSENT_LOWAT", None)
#: The send buffer also accounts per-packet overhead; stay well below it.
_SHARE: Final = 4
#: Per socket: ``_limits()``, read on its first response.
_LIMITS: Final[weakref.WeakKeyDictionary[Any, tuple[int, int | None]]] = weakref.WeakKeyDictionary()


def can_write_now(send: Any, size: int) -> bool:
    """Whether *size* bytes written through *send* now cannot block (see above).

    Linux blocks a TCP write when the socket's buffer is full, and, when
    ``TCP_NOTSENT_LOWAT`` is set (Trio sets it to 16 KiB on every socket
    stream), as soon as that many bytes are queued and not sent yet: the
    common case of a client that stopped reading, its receive window
    closed.  So both must leave room for *size*.  The two limits are read
    once per socket; an empty queue (a client that read everything so far,
    the usual case between requests) then needs one ``ioctl``.
    """
    if not _LINUX:
        return False
    sock = idle_socket_of(send)
    if sock is None:
        return False
    try:
        fd = sock.fileno()
        if fd < 0:
            return False
        limits = _LIMITS.get(sock)
        if limits is None:
            limits = _LIMITS[sock] = _limits(sock)
        room, lowat = limits
        queued = _ioctl_int(fd, _SIOCOUTQ)
        if queued + size > room:
            return False
        if lowat is None:
            return queued == 0  # cannot tell sent from unsent: only an empty queue is sure
        if lowat <= 0:
            return True
        return size <= lowat and (queued == 0 or _ioctl_int(fd, _SIOCOUTQNSD) + size <= lowat)
    except (OSError, AttributeError, TypeError, ValueError):
        return False


def _limits(sock: Any) -> tuple[int, int | None]:
    """The bytes a socket's send buffer holds for our use, and its ``TCP_NOTSENT_LOWAT``.

    Read once: the kernel only ever grows a TCP send buffer by itself
    (autotuning), so the first value stays a safe bound.
    """
    sndbuf: int = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    lowat = None if _NOTSENT_LOWAT is None else sock.getsockopt(socket.IPPROTO_TCP, _NOTSENT_LOWAT)
    return sndbuf // _SHARE, lowat


def _ioctl_int(fd: int, request: int) -> int:
    value: int = struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0]
    return value


# -- the sink -------------------------------------------------------------------------


class HypercornSink(AsgiSink):
    """The app's :class:`~.writer.Sink` under hypercorn: plain ASGI plus the shortcuts
    above, each of which answers "no shortcut" on anything that is not hypercorn's
    (another server's ``send``, HTTP/2, TLS), so that request goes the plain way."""

    __slots__ = ()

    receive_now = staticmethod(receive_now)
    can_write_now = staticmethod(can_write_now)

    async def write_now(
        self, send: Any, status: int, body: bytes, extra: Any = (), *, json: bool | None = None
    ) -> bool:
        """A whole response in one socket write on hypercorn's HTTP/1.1 (:func:`send_whole`),
        else as its two messages; a server that raises because the connection is gone is a
        ``False``, as with a writer task."""
        start = head(status, body, extra, json=json)
        try:
            if not await send_whole(send, start, body):
                await send(start)
                await send({"type": "http.response.body", "body": body, "more_body": False})
        except Exception:
            return False
        return True

    def head_blocked(self, send: Any, head: MutableMapping[str, Any]) -> None:
        mark_head_blocked(send, head)
