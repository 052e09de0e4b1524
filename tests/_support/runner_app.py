"""A server for the runner's subprocess tests (``trio-mcp-cancel run _support.runner_app:server``).

Its tools say which worker process answers, so a test can tell the
workers apart behind one socket.  ``RUNNER_APP_EXIT=N`` makes the import
exit with status N: a worker that dies at once, every time.  While the
file ``RUNNER_APP_HOLD_START`` names exists, the import waits (at most a
minute): a worker that is still starting, for as long as a test needs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time

import trio

from trio_mcp_cancel import RequestCancelled, checkpoint_cancelled
from trio_mcp_cancel.http import app_from_env
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks

if os.environ.get("RUNNER_APP_EXIT"):
    os._exit(int(os.environ["RUNNER_APP_EXIT"]))
if os.environ.get("RUNNER_APP_HOLD_START"):
    _until = time.monotonic() + 60
    while os.path.exists(os.environ["RUNNER_APP_HOLD_START"]) and time.monotonic() < _until:
        time.sleep(0.02)

server = McpServer("runner-test", extensions=[Tasks()])


@server.tool()
async def whoami(ctx: Context) -> str:
    """This process: its pid, its MCP_INSTANCE_ID, and a digest of its MCP_STATE_SECRET."""
    secret = os.environ.get("MCP_STATE_SECRET", "")
    digest = hashlib.sha256(secret.encode()).hexdigest()[:12] if secret else "-"
    return f"{os.getpid()} {os.environ.get('MCP_INSTANCE_ID', '-')} {digest}"


@server.tool(task="optional")
async def hold(ctx: Context, seconds: float = 120.0) -> str:
    """Say which process runs it (as the task's statusMessage), then run *seconds*."""
    logging.getLogger("runner_app").warning("hold started in pid %d", os.getpid())
    await ctx.report_progress(1, message=f"pid {os.getpid()}")
    await trio.sleep(seconds)
    return "held"


@server.tool()
async def until_cancelled(ctx: Context) -> str:
    """Poll the flag until the request is cancelled, then stop (``-32800``) saying why."""
    logging.getLogger("runner_app").warning("until_cancelled started in pid %d", os.getpid())
    while True:
        await trio.sleep(0.05)
        try:
            await checkpoint_cancelled()
        except RequestCancelled as exc:
            logging.getLogger("runner_app").warning(
                "until_cancelled saw kind=%s reason=%s", exc.kind, exc.reason
            )
            raise


@server.tool()
async def confirm(ctx: Context, item: str) -> str | InputRequired:
    """MRTR: ask first; the retry (which may reach another worker) says which pid it ran in."""
    if ctx.input_responses is None or ctx.request_state != {"item": item}:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        return InputRequired(
            {"ok": InputRequired.elicit(f"Delete {item}?", schema)}, state={"item": item}
        )
    return f"{os.getpid()} confirmed {item}"


app = app_from_env(server)
