"""One HTTP worker of ``trio-mcp-cancel run --workers N`` (started by the supervisor).

``python -m trio_mcp_cancel._run.worker --fd N --ready-fd R --lifeline-fd L MODULE:ATTR``
serves the app on the listening socket the supervisor bound (file
descriptor *N*, hypercorn's ``fd://`` bind) with :func:`server_config`'s
safe settings, and SIGINT/SIGTERM start ``serve(handle_signals=True)``'s
graceful shutdown (calls in flight answered ``-32800``, within the graceful
timeout).  Two pipes tie it to the supervisor:
it writes a line to *R* once it serves, ``serving PATH`` (how the
supervisor knows a replacement is up, and the MCP endpoint's path it
logs), and when *L* reaches end of file (the supervisor is gone, even by
SIGKILL) it shuts down gracefully as on SIGTERM, so an orphaned worker
never keeps the port.  With ``--heartbeat-fd H`` its event loop writes a
byte to *H* every ``--heartbeat-interval`` seconds, which the supervisor
watches (:mod:`.heartbeat`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from functools import partial

import trio

from ..transports.http.app import McpHttpApp
from ..transports.http.serving import AsgiApp, serve, server_config
from . import heartbeat, target
from .runner import configure_logging


async def _serve_worker(
    app: AsgiApp,
    fd: int,
    ready_fd: int,
    lifeline_fd: int,
    beats: tuple[int, float] | None = None,
    http: str = "h11",
) -> None:
    # The ready line names the MCP endpoint's path: the supervisor, which
    # never imports the target, logs the URL clients use from it.
    path = app.path if isinstance(app, McpHttpApp) else ""
    config = server_config(bind=[f"fd://{fd}"], errorlog=logging.getLogger("hypercorn.error"))
    async with trio.open_nursery() as nursery:

        async def serving(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, config, handle_signals=True, http=http, task_status=task_status)
            nursery.cancel_scope.cancel()

        await nursery.start(serving)
        if beats is not None:  # from the event loop: a stuck loop stops beating
            nursery.start_soon(heartbeat.beat, *beats)
        with contextlib.suppress(BrokenPipeError):  # the supervisor is gone: see below
            os.write(ready_fd, f"serving {path}\n".encode(errors="replace"))
        os.close(ready_fd)
        async with trio.lowlevel.FdStream(lifeline_fd) as lifeline:
            while await lifeline.receive_some(64):
                pass
        logging.getLogger("trio_mcp_cancel.run").warning(
            "worker (pid %d): the supervisor is gone; shutting down", os.getpid()
        )
        os.kill(os.getpid(), signal.SIGTERM)  # serve()'s graceful shutdown
        await trio.sleep_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trio_mcp_cancel._run.worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--lifeline-fd", type=int, required=True)
    parser.add_argument("--heartbeat-fd", type=int)
    parser.add_argument("--heartbeat-interval", type=float, default=heartbeat.INTERVAL)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--http", default="h11")
    parser.add_argument("target")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        app = target.http_app(target.load(args.target))
    except target.TargetError as exc:
        print(f"trio-mcp-cancel worker: error: {exc}", file=sys.stderr)
        return 3
    try:
        beats = None if args.heartbeat_fd is None else (args.heartbeat_fd, args.heartbeat_interval)
        serving = partial(
            _serve_worker, app, args.fd, args.ready_fd, args.lifeline_fd, beats, args.http
        )
        trio.run(serving)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
