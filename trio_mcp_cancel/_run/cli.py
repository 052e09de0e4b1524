"""``trio-mcp-cancel run MODULE:ATTR`` (also ``python -m trio_mcp_cancel``).

::

    trio-mcp-cancel run MODULE:ATTR [--transport stdio|http|websocket] [--host H] [--port P]
                        [--workers N] [--allow-unshared] [--grace-period S]
                        [--max-request-time S] [--http h11|httptools] [--log-level L]
    trio-mcp-cancel list TARGET [--era E] [--json]
    trio-mcp-cancel call TARGET TOOL [key=value ...] [--args JSON] [--era E] [--json]
    trio-mcp-cancel install claude-desktop|cursor|claude-code MODULE:ATTR [--name N]
                            [--env K=V ...] [--dry-run]
    trio-mcp-cancel dev MODULE:ATTR [--port P] [--no-inspector]
    trio-mcp-cancel --version

ATTR is an :class:`~trio_mcp_cancel.server.McpServer` or an ASGI app built
by :func:`~trio_mcp_cancel.http.app_from_env`.  ``stdio`` (the default, as
an MCP host launches servers) serves it on stdin/stdout; ``http`` with
``serve()`` and ``server_config()``'s safe settings, stopping gracefully on
SIGINT/SIGTERM; ``--workers N`` (N > 1) under :mod:`.supervisor`, which
needs a shared backend (``MCP_REDIS_URL``) unless ``--allow-unshared``
says the sessions are routed to their worker by something else
(``streamable-http``, the specification's name, is the same as ``http``);
``websocket`` with :func:`~trio_mcp_cancel.websocket.serve_mcp_websocket`
(:mod:`.serve_websocket`).  The other commands live in modules of their
own (``cmd_*``), each adding its parser here.
On stdio, anything the target's module prints while it is imported goes to
stderr, since stdout is the protocol stream.  Exit status: 0 after a
requested stop, 1 when serving failed (one line: a port in use, an app
that refused to start) or the supervisor gave up, 2 for a bad command line
or a target it cannot serve.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys

import trio

from .. import __version__
from ..transports.http import hypercorn_httptools
from ..transports.http.deploy import backend_from_env, limits_from_env, seconds_setting
from ..transports.http.hypercorn_httptools import HTTP_PROTOCOLS
from ..transports.http.serving import server_config
from . import cmd_call, cmd_dev, cmd_install, cmd_list, target
from .runner import StartupFailed, configure_logging, serve_found, startup_problem

__all__ = ["main"]

_LEVELS = ("debug", "info", "warning", "error", "critical")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-mcp-cancel",
        description="Serve, call, install and develop MCP servers built with trio-mcp-cancel.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="serve MODULE:ATTR",
        description="Serve MODULE:ATTR (an McpServer, or an ASGI app from app_from_env)"
        " on stdio, or over HTTP with --workers N supervised worker processes.",
    )
    run.add_argument("target", metavar="MODULE:ATTR", help="an McpServer or an ASGI app")
    run.add_argument(
        "--transport",
        choices=("stdio", "http", "streamable-http", "websocket"),
        default="stdio",
        help="stdio (default), http (alias streamable-http), or websocket",
    )
    run.add_argument("--host", default=None, help="http: address to bind (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=None, help="http: port (default 8000; 0: any)")
    run.add_argument("--workers", type=int, default=1, help="http: worker processes (default 1)")
    run.add_argument(
        "--allow-unshared",
        action="store_true",
        help="--workers N without MCP_REDIS_URL (you route each session to its worker)",
    )
    run.add_argument(
        "--grace-period", default=None, help="seconds from a cancel to its hard cancel, or 'none'"
    )
    run.add_argument(
        "--max-request-time",
        default=None,
        metavar="SECONDS",
        help="cancel a tool call after this long (MCP_MAX_REQUEST_TIME; default: never)",
    )
    run.add_argument(
        "--http",
        choices=HTTP_PROTOCOLS,
        default="h11",
        help="http: the HTTP/1.1 parser, h11 (default) or httptools (the httptools extra)",
    )
    run.add_argument("--log-level", type=str.lower, choices=_LEVELS, default="info")
    for command in (cmd_list, cmd_call, cmd_install, cmd_dev):
        command.add_parser(commands)
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.transport == "streamable-http":
        args.transport = "http"
    if args.transport == "stdio":
        for flag, value in (("--host", args.host), ("--port", args.port)):
            if value is not None:
                parser.error(f"{flag} is for --transport http or websocket")
    if args.http != "h11" and args.transport != "http":
        parser.error("--http is for --transport http")
    if args.workers != 1 and args.transport != "http":
        parser.error("--workers is for --transport http")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error("--port must be 0-65535")
    if args.grace_period is not None:
        try:
            seconds_setting({"--grace-period": args.grace_period}, "--grace-period", None)
        except ValueError as exc:
            parser.error(str(exc))
        os.environ["MCP_GRACE_PERIOD"] = (
            args.grace_period
        )  # read by app_from_env, here and in workers
    if args.max_request_time is not None:
        variables = {"MCP_MAX_REQUEST_TIME": args.max_request_time}
        try:
            limits_from_env(variables)
        except ValueError as exc:
            parser.error(str(exc).replace("MCP_MAX_REQUEST_TIME", "--max-request-time"))
        os.environ.update(variables)  # read on stdio and by app_from_env, here and in workers
    if args.workers > 1 and not os.environ.get("MCP_REDIS_URL", "").strip():
        if not args.allow_unshared:
            parser.error(
                "--workers N needs a shared backend: set MCP_REDIS_URL (tasks, sessions and"
                " cancellations then work across workers), or pass --allow-unshared if you"
                " route every session to its worker yourself"
            )


_COMMANDS = {"list": cmd_list, "call": cmd_call, "install": cmd_install, "dev": cmd_dev}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # `call T add a=1 --json b=2`: argparse leaves key=value words that follow an
    # option over (a positional list does not resume after one); they are arguments.
    if extra and args.command == "call" and not any(e.startswith("-") for e in extra):
        args.arguments += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    command = _COMMANDS.get(args.command)
    if command is not None:
        status: int = command.main(args)
        return status
    _check(parser, args)
    configure_logging(args.log_level)
    host = "127.0.0.1" if args.host is None else args.host
    port = 8000 if args.port is None else args.port
    try:
        if args.workers > 1:
            hypercorn_httptools.choose(server_config(), args.http)  # the extra is there
            return _supervise(args.target, args.workers, host, port, args.log_level, args.http)
        if args.transport == "websocket":
            from .serve_websocket import serve_websocket_found

            serving = serve_websocket_found(target.load(args.target), host=host, port=port)
        elif args.transport == "stdio":
            with target.stdout_to_stderr():  # stdout is the protocol stream
                found = target.load(args.target)
            serving = serve_found(found, "stdio")
        else:
            found = target.load(args.target)
            serving = serve_found(
                found, "http", host=host, port=port, port_option="--port", http=args.http
            )
    except (target.TargetError, ValueError, ImportError) as exc:
        parser.exit(2, f"trio-mcp-cancel: error: {exc}\n")
    try:
        return serving()
    except StartupFailed as exc:
        print(f"trio-mcp-cancel: error: {exc}", file=sys.stderr)
        return 1


def _supervise(
    spec: str, workers: int, host: str, port: int, log_level: str, http: str = "h11"
) -> int:
    """Bind, then hand the socket to :class:`~.supervisor.Supervisor`'s workers."""
    from .supervisor import Supervisor

    environ = dict(os.environ)
    # One MRTR secret for every worker, so a requestState sealed by one verifies on another.
    environ.setdefault("MCP_STATE_SECRET", secrets.token_urlsafe(32))
    shared = {k: v for k, v in environ.items() if k != "MCP_INSTANCE_ID"}
    backend = backend_from_env(shared)  # the supervisor's own instance
    config = server_config(host=host, port=port)
    try:
        sockets = config.create_sockets()
    except OSError as exc:
        problem = startup_problem(exc, host, port, "--port")
        print(f"trio-mcp-cancel: error: {problem}", file=sys.stderr)
        return 1
    (listener,) = sockets.insecure_sockets
    listener.listen(config.backlog)
    bound = config.bind[0].rsplit(":", 1)[0]
    logging.getLogger("trio_mcp_cancel.run").info(
        "supervisor (pid %d) listening on http://%s:%d with %d workers",
        os.getpid(), bound, listener.getsockname()[1], workers,
    )  # fmt: skip
    supervisor = Supervisor(
        spec, workers, listener, environ, backend=backend, log_level=log_level, http=http,
        url=f"http://{bound}:{listener.getsockname()[1]}",
        # A worker's serve() returns within graceful_timeout of its SIGTERM;
        # one still running a second later is stuck (a tool blocking without
        # a checkpoint) and is killed.
        stop_timeout=config.graceful_timeout + 1.0,
    )  # fmt: skip
    try:
        return trio.run(supervisor.run)
    finally:
        listener.close()
