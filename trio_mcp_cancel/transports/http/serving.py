"""Safe hypercorn defaults and a ``serve()`` that stops cleanly on Ctrl-C / SIGTERM.

hypercorn's own defaults are tuned for a general ASGI server; an MCP server
holds long, mostly silent SSE responses open while tools run, and is often
exposed to clients it does not control.  :func:`server_config` picks the
settings that bound what an idle or slow client can hold, and leaves alone
the one setting (``read_timeout``) that would cut long tool calls off.
:func:`serve` runs hypercorn's Trio worker with that configuration and turns
SIGINT/SIGTERM into a graceful shutdown bounded by ``graceful_timeout``, in
which the app (``McpHttpApp.begin_shutdown``) answers its calls in flight.
"""

from __future__ import annotations

import copy
import inspect
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as _hypercorn_serve
from hypercorn.typing import Framework

from . import hypercorn_compat, hypercorn_httptools

__all__ = ["AsgiApp", "server_config", "serve"]

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
AsgiApp = Callable[[_Scope, _Receive, _Send], Awaitable[None]]
"""An ASGI 3 application, such as :class:`~trio_mcp_cancel.http.McpHttpApp`."""

_SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Of a shutdown's graceful timeout, the seconds (at most; half of a shorter
#: timeout) kept after the hard cancel of the calls still running: for their
#: ``-32800`` to be written, their connections to close, the lifespan to end.
_ANSWER_TIME = 1.0
_MISSING = object()


def server_config(*, host: str = "127.0.0.1", port: int = 8000, **overrides: Any) -> Config:
    """Return a hypercorn :class:`~hypercorn.config.Config` with safe defaults.

    Binds *host*:*port* (``127.0.0.1`` by default: expose the server on
    purpose, e.g. ``host="0.0.0.0"``, usually behind a proxy).  Each keyword
    in *overrides* sets the ``Config`` attribute of that name after the
    defaults (``bind=[...]`` replaces *host*/*port*); an unknown name raises
    :class:`TypeError`, so a typo cannot silently leave a default in place.

    The defaults, and why:

    ``graceful_timeout=5.0``
        With :func:`serve`'s ``handle_signals=True``, the whole shutdown after
        a Ctrl-C or SIGTERM, from the signal until ``serve()`` returns: tool
        calls in flight are cancelled at once (kind ``"server"``) and
        answered ``-32800`` within it, see :func:`serve`.  (Run by
        hypercorn's own command, it is how long requests in flight may run
        before they are cut without an answer.)
    ``keep_alive_timeout=5.0``
        hypercorn's idle timer runs from the moment a connection opens (or a
        response finished) until the *complete* request head has arrived
        (HTTP/1.1: ``h11.Request``; HTTP/2: the stream's ``HEADERS``), and is
        stopped while a request is being handled.  So this one setting bounds
        both idle keep-alive connections and clients that trickle the request
        line and headers (slowloris), without touching long responses.
    ``read_timeout=None`` (deliberately not set)
        hypercorn applies ``read_timeout`` to *every* socket read for the whole
        life of the connection, including while a long SSE tool call streams
        and the client has nothing to send.  Any value would disconnect, and
        therefore cancel, every tool call longer than it.  Slow request *bodies*
        are bounded by the app itself (``McpHttpApp`` answers 408 when a body
        does not arrive in time), and slow headers by ``keep_alive_timeout``.
    ``ssl_handshake_timeout=10.0``
        With TLS the idle timer only starts after the handshake; hypercorn's
        default of 60 s would let a silent client hold a connection that long.
    ``h11_max_incomplete_size=16 KiB``
        The largest HTTP/1.1 request line plus headers hypercorn buffers;
        larger gets 431.  Enough for bearer tokens and session ids.
    ``h2_max_header_list_size=16 KiB``
        The same bound for HTTP/2 header blocks (hypercorn's default: 64 KiB).
    ``h2_max_concurrent_streams=64``
        Requests one HTTP/2 connection may have open at once (each may be a
        long tool call); matches ``McpHttpApp``'s default per-session
        ``max_concurrent_calls`` (hypercorn's default: 100).
    ``backlog=128``
        The kernel's queue of connections not yet accepted.  This is *not* a
        connection cap: the Trio worker accepts as fast as it can.
    ``errorlog="-"``
        hypercorn's error log (startup lines, exceptions escaping the app,
        protocol errors) goes to stderr, never to nowhere.  The ``"-"`` handler
        also propagates to the root logger; if your program configures logging
        itself, pass ``errorlog=logging.getLogger("hypercorn.error")`` to log
        through your handlers only (otherwise lines appear twice).
    ``accesslog=None``
        No line per request: noisy, and request paths and client addresses are
        better logged deliberately (``accesslog="-"`` turns it on).

    **No connection cap.**  hypercorn 0.18 has no setting that limits the
    number of open connections (``backlog`` is only the accept queue,
    ``max_requests`` restarts a worker process, ``keep_alive_max_requests``
    counts requests per connection).  The timeouts above bound how long an
    idle or slow connection lives; to cap how many there are, put a reverse
    proxy in front (nginx ``limit_conn``, HAProxy ``maxconn``) and bound the
    process's file descriptors (``ulimit -n``).
    """
    config = Config()
    config.bind = [
        f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    ]
    config.graceful_timeout = 5.0
    config.keep_alive_timeout = 5.0
    config.read_timeout = None
    config.ssl_handshake_timeout = 10.0
    config.h11_max_incomplete_size = 16 * 1024
    config.h2_max_header_list_size = 16 * 1024
    config.h2_max_concurrent_streams = 64
    config.backlog = 128
    config.errorlog = "-"
    config.accesslog = None
    for name, value in overrides.items():
        if not _is_setting(name):
            raise TypeError(f"server_config() got an unknown hypercorn setting {name!r}")
        setattr(config, name, value)
    return config


def _is_setting(name: str) -> bool:
    """Whether *name* is a settable, public attribute of hypercorn's ``Config``."""
    if name.startswith("_"):
        return False
    attribute = inspect.getattr_static(Config, name, _MISSING)
    if attribute is _MISSING:
        return False
    if isinstance(attribute, property):
        return attribute.fset is not None
    return not isinstance(attribute, staticmethod | classmethod) and not inspect.isfunction(
        attribute
    )


async def serve(
    app: AsgiApp,
    config: Config | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    handle_signals: bool = False,
    http: str = "h11",
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *app* with hypercorn's Trio worker; for ``await`` or ``nursery.start``.

    *config* defaults to ``server_config(host=..., port=...)`` (``127.0.0.1:8000``
    when neither is given); passing *host* or *port* together with *config* is
    a :class:`TypeError`, as they would be ignored.  ``task_status.started``
    receives hypercorn's bound URLs, e.g. ``["http://127.0.0.1:54321"]`` (the
    real port when *port* is 0).

    *http* picks the HTTP/1.1 protocol: ``"h11"`` (hypercorn's own, the
    default) or ``"httptools"`` (the ``httptools`` extra; the same bytes on
    the wire for less CPU per request, see
    :mod:`~trio_mcp_cancel.transports.http.hypercorn_httptools`).

    Without *handle_signals* it serves until cancelled (cancelling stops at
    once: connections and their tool calls are cancelled).

    With ``handle_signals=True`` the first SIGINT (Ctrl-C) or SIGTERM starts
    a graceful shutdown that ends within ``config.graceful_timeout`` seconds
    (*T*) of the signal, when ``serve()`` *returns* normally:

    * an app with a ``begin_shutdown(within=...)`` method
      (:meth:`McpHttpApp.begin_shutdown`) is told first: every tool call in
      flight is cancelled (kind ``"server"``, reason ``"server shutting
      down"``; a tool sees ``cancelled()`` at once) and logged when it stops,
      and one still running ``T - min(1, T/2)`` seconds after the signal (or
      after its grace period, if sooner) is hard-cancelled, leaving time for
      its ``-32800`` to reach the client;
    * hypercorn stops accepting, closes idle connections, and cuts the
      connections still open ``T - min(1, T/2)/2`` seconds after the signal
      (a client that does not read its answer);
    * what is left (the ASGI lifespan's shutdown: the registry, a backend)
      is cancelled *T* seconds after the signal.

    While it runs, Trio does not turn SIGINT into a ``KeyboardInterrupt``
    (which would surface inside an exception group as a traceback and exit
    status 1), so a program can simply finish.  A second signal during the
    shutdown stops at once, by cancellation.  Signals can only be handled in
    the main thread (:func:`trio.open_signal_receiver`).
    """
    if config is None:
        config = server_config(
            host="127.0.0.1" if host is None else host, port=8000 if port is None else port
        )
    elif host is not None or port is not None:
        raise TypeError("serve(): pass host/port to server_config(), or a config, not both")
    # Whatever app it is given: one connection's failure never ends the server
    # (see .hypercorn_compat); installed when serving, not at import.  Idempotent.
    hypercorn_compat.install()
    config = hypercorn_httptools.choose(config, http)
    framework = cast(Framework, app)
    if not handle_signals:
        await _hypercorn_serve(framework, config, task_status=task_status)
        return

    stated = config.graceful_timeout
    answer_time = min(_ANSWER_TIME, stated / 2)
    # hypercorn cuts the connections still open this long after the trigger,
    # then shuts the lifespan down: half the answer time is left for that.
    # (A copy, so the caller's config is left as it was; its logger, made on
    # first use, is the one hypercorn uses too.)
    connections = copy.copy(config)
    connections.graceful_timeout = stated - answer_time / 2
    bound = trio.CancelScope()
    with trio.open_signal_receiver(*_SHUTDOWN_SIGNALS) as signals:
        shutdown = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    if not shutdown.is_set():
                        # Everything, lifespan included, ends by then.
                        bound.deadline = trio.current_time() + stated
                        await connections.log.info(
                            f"{name} received: shutting down gracefully"
                            f" (up to {stated}s; send it again to stop now)"
                        )
                        begin_shutdown = getattr(app, "begin_shutdown", None)
                        try:
                            if callable(begin_shutdown):
                                begin_shutdown(within=stated - answer_time)
                        except Exception:  # the shutdown goes on without the app's part
                            await connections.log.exception("the app's begin_shutdown failed")
                        shutdown.set()
                    else:
                        await connections.log.info(f"{name} received again: stopping now")
                        nursery.cancel_scope.cancel()
                        return

            nursery.start_soon(watch_signals)
            with bound:
                await _hypercorn_serve(
                    framework, connections, shutdown_trigger=shutdown.wait, task_status=task_status
                )
            nursery.cancel_scope.cancel()
        if bound.cancelled_caught:
            await connections.log.warning(
                f"shutdown: still running {stated}s after the signal; stopped"
            )
