"""One way to serve a server from a blocking call: ``server.run()`` and ``trio-mcp-cancel run``.

:meth:`McpServer.run <trio_mcp_cancel.server.McpServer.run>` calls
:func:`run_server`, importing this module only then: it sits above every
transport (it runs Trio and picks one, and imports hypercorn), so a server
that is only registered, or served by a transport of the application's
own, never loads it.  The console script (:mod:`.cli`) calls the same
:func:`serve_found`, so the two cannot drift apart.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable, Iterator
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.utils import LifespanFailureError

from .._core.registry import RegistryConfig
from .._protocol.lifespan import LifespanFailed
from ..stdio import run_stdio
from ..transports.http import hypercorn_httptools
from ..transports.http.app import McpHttpApp
from ..transports.http.deploy import limits_from_env, seconds_setting, server_settings_from_env
from ..transports.http.serving import AsgiApp, serve, server_config
from . import target
from .choices import FROM_ENVIRONMENT, FromEnvironment, Transport

__all__ = ["StartupFailed", "configure_logging", "run_server", "serve_found"]

_log = logging.getLogger("trio_mcp_cancel.run")


class StartupFailed(Exception):
    """Serving could not start (a port in use, an app that refused to start).

    Its message is one sentence for the user, which the command line
    prints as its one line of error; not a traceback, since nothing in the
    library failed.
    """


_LEVELS = ("debug", "info", "warning", "error", "critical")


def configure_logging(level: str) -> None:
    """Log lines to stderr, each with its process id (workers share the supervisor's stderr).

    INFO by default, so each cancelled request's one line (kind, reason,
    time from flag to stop) is visible without a logging setup of the user's.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(_LEVELS)}, not {level!r}")
    logging.basicConfig(
        level=level.upper(), format="[%(process)d] %(levelname)s %(name)s: %(message)s"
    )
    if level.lower() == "info":  # coredis logs each script-cache miss at INFO
        logging.getLogger("coredis").setLevel(logging.WARNING)


def serve_found(
    found: object,
    transport: Transport,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace_period: float | FromEnvironment | None = FROM_ENVIRONMENT,
    port_option: str = "port=",
    http: str = "h11",
) -> Callable[[], int]:
    """What serves *found* (an ``McpServer`` or an ASGI app): call it to serve until stopped.

    Checked before anything runs, so a target it cannot serve (a
    :class:`~.target.TargetError`) or a bad setting (:class:`ValueError`) is
    told apart from a failure while serving.  The returned function blocks
    and returns the exit status.  ``stdio``: until end of input, SIGTERM or
    Ctrl-C, with the environment's ``MCP_MAX_REQUEST_TIME``, ``MCP_TASK_TTL``
    and ``MCP_STATE_SECRET`` as over HTTP.  ``http``: with
    :func:`~..transports.http.serving.serve` and ``server_config()``'s safe
    settings, stopping gracefully on SIGINT/SIGTERM; it raises
    :class:`StartupFailed` when serving cannot start (*port_option* is how
    its message tells to pick another port).  *grace_period* is the
    registry's grace period (``None``: never hard-cancel).  *http* is
    ``serve()``'s HTTP/1.1 protocol, checked here (a missing extra is an
    :class:`ImportError`).
    """
    if grace_period is FROM_ENVIRONMENT:
        grace_period = seconds_setting(os.environ, "MCP_GRACE_PERIOD", 5.0)
    registry_config = RegistryConfig(grace_period=grace_period)
    if transport == "stdio":
        server = target.stdio_server(found)
        limits = limits_from_env(os.environ)
        server_settings_from_env(server, os.environ)

        def serve_stdio() -> int:
            try:
                run_stdio(server, registry_config=registry_config, limits=limits)
            except BaseException as exc:
                leaves = list(_leaves(exc))
                if not leaves or not all(isinstance(leaf, LifespanFailed) for leaf in leaves):
                    raise
                raise StartupFailed(str(leaves[0])) from exc
            return 0

        return serve_stdio
    if transport not in ("http", "streamable-http"):
        raise ValueError(f"transport must be 'stdio' or 'http', not {transport!r}")
    app = target.http_app(found, registry_config)
    config = server_config(host=host, port=port, errorlog=logging.getLogger("hypercorn.error"))
    config = hypercorn_httptools.choose(config, http)
    path = app.path if isinstance(app, McpHttpApp) else ""

    def serve_http() -> int:
        bound: list[str] = []
        try:
            trio.run(_serve_http, app, config, path, bound)
        except KeyboardInterrupt:
            pass  # Ctrl-C before or after serving: still a clean stop
        except BaseException as exc:
            problem = startup_problem(exc, host, port, port_option, listening=bool(bound))
            if problem is None:
                raise
            raise StartupFailed(problem) from exc
        return 0

    return serve_http


async def _serve_http(app: AsgiApp, config: Config, path: str, bound: list[str]) -> None:
    """Serve, and once bound log the URL clients use (the MCP endpoint's, path included).

    *bound* receives the URLs, so the caller knows whether listening started.
    """
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(partial(serve, app, config, handle_signals=True))
        bound.extend(urls)
        for url in urls:
            _log.info("serving MCP on %s%s", url, path)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


_LIFESPAN_FAILURE = re.compile(r"Lifespan failure in (\w+)\. '(.*)'\Z", re.DOTALL)


def startup_problem(
    exc: BaseException, host: str, port: int, port_option: str, *, listening: bool = False
) -> str | None:
    """One sentence for what stopped serving from starting, or ``None`` (a real bug).

    hypercorn binds inside its nursery, after the app's lifespan started,
    so a taken port (or the app refusing to start) arrives wrapped in
    exception groups; every leaf must be such a startup failure, else the
    traceback is kept, as it says more than a sentence could.  Once
    *listening*, an :class:`OSError` is no longer about the address.
    """
    sentences: list[str] = []
    for leaf in _leaves(exc):
        if isinstance(leaf, LifespanFailed):
            sentences.append(str(leaf))
        elif isinstance(leaf, LifespanFailureError):
            match = _LIFESPAN_FAILURE.match(str(leaf))
            sentences.append(f"the app did not start: {match[2] if match else leaf}")
        elif isinstance(leaf, OSError) and not listening:
            sentences.append(_listen_problem(leaf, host, port, port_option))
        else:
            return None
    return "; ".join(dict.fromkeys(sentences)) or None


def _listen_problem(exc: OSError, host: str, port: int, port_option: str) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use; pick another with {port_option}"
            f" (0: any free port)"
        )
    if exc.errno == errno.EACCES:
        return f"not allowed to listen on {host}:{port} (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: not an address of this machine"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def run_server(
    server: object,
    transport: Transport,
    *,
    host: str,
    port: int,
    grace_period: float | FromEnvironment | None,
    log_level: str,
    http: str = "h11",
) -> None:
    """``McpServer.run``: serve *server* until stopped, a startup failure as one line.

    When serving cannot start (the port is in use, the app refused to
    start, the *http* protocol's extra is not installed), raises
    :class:`SystemExit` whose message is the one sentence saying why: a
    script exits with status 1 and that line, not a traceback; the
    :class:`StartupFailed` (or :class:`ImportError`) is its ``__cause__``.
    An *http* other than ``"h11"`` with stdio, or an unknown one, is a
    :class:`ValueError`: a mistake in the call, not in the machine.
    """
    if http != "h11" and transport == "stdio":
        raise ValueError(f"http={http!r} applies to transport='http', not to stdio")
    configure_logging(log_level)
    try:
        serving = serve_found(
            server, transport, host=host, port=port, grace_period=grace_period, http=http
        )
    except ImportError as exc:
        raise SystemExit(f"trio-mcp-cancel: error: {exc}") from exc
    try:
        serving()
    except StartupFailed as exc:
        raise SystemExit(f"trio-mcp-cancel: error: {exc}") from exc
