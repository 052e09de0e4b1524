"""End-to-end demo: start the slow server on 127.0.0.1 and cancel its tool every way.

0. Modern HTTP (2026-07-28, stateless): the client closes the request's
   stream, the only way to cancel on that wire.
1. Legacy HTTP (a 2025-11-25 session), by notification: a streamed
   ``tools/call``, then ``notifications/cancelled`` on another POST; the
   stream ends with no response, as MCP requires.
2. Legacy HTTP, by disconnect: the client drops the SSE stream; the server
   sees ``http.disconnect`` and cancels the tool.
3. WebSocket, by notification.
4. WebSocket, by closing the socket.
5. A stubborn tool that ignores the flag is hard-cancelled after the grace period.
6. A tool running a child process (``child``), called through the library's
   own client (``trio_mcp_cancel.client``): cancelling the caller's scope
   closes the stream, the server sends the child SIGTERM, and no
   ``mcp-demo-child`` process is left.
7. The Tasks extension (modern HTTP): a ``tools/call`` declaring
   ``io.modelcontextprotocol/tasks`` is answered at once with
   ``resultType: "task"``; ``tasks/get`` (routed by ``Mcp-Name: <taskId>``)
   shows it ``working``, ``tasks/cancel`` gets the empty ack, and polling
   (spaced by ``pollIntervalMs``) sees it settle ``cancelled``.
8. stdio: the server as a child process (``slow_server.py --stdio``), a
   legacy session on its stdin/stdout, cancelled by
   ``notifications/cancelled``; a ``ping`` is still answered, request 2
   never is, and closing stdin ends the session with exit status 0.

Run with ``python3 dev.py demo`` (or ``python examples/client_demo.py``).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slow_server import CHILD_MARK, describe, run_demo_server

from trio_mcp_cancel import Event, Registry, RequestCancelledEvent, open_registry
from trio_mcp_cancel.client import open_http_client
from trio_mcp_cancel.lowlevel.wire import TASKS_EXTENSION

HERE = Path(__file__).resolve().parent
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
GRACE = 1.0
MODERN = "2026-07-28"


def say(text: str) -> None:
    print(text, flush=True)


class McpHttpClient:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url
        self.headers = dict(HEADERS)
        self.next_id = 1

    async def initialize(self) -> None:
        reply = await self.client.post(
            self.url,
            headers=self.headers,
            json=self.request(
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "client-demo", "version": "1"},
                },
            ),
        )
        self.headers["mcp-session-id"] = reply.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-11-25"
        say(f"[client] initialized, session {reply.headers['mcp-session-id'][:8]}…")

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.next_id += 1
        return message

    async def cancel(self, request_id: int, reason: str) -> int:
        notification = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
        reply = await self.client.post(self.url, headers=self.headers, json=notification)
        return reply.status_code


async def sse_messages(response: httpx.Response) -> Any:
    """The messages of a reply: an SSE stream, or one JSON body when nothing was streamed."""
    if response.headers["content-type"] == "application/json":
        yield json.loads(await response.aread())
        return
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def wait_for_event(registry: Registry, kind: str) -> RequestCancelledEvent:
    receive = registry.events.open_channel()
    async with receive:
        return await next_cancel(receive, kind)


async def http_by_notification(mcp: McpHttpClient) -> None:
    say("\n== 1. HTTP: cancel a streamed tools/call with notifications/cancelled")
    call = mcp.request(
        "tools/call",
        {"name": "count", "arguments": {"n": 50, "delay": 0.1}, "_meta": {"progressToken": "p1"}},
    )
    async with mcp.client.stream("POST", mcp.url, headers=mcp.headers, json=call) as response:
        async for message in sse_messages(response):
            if message.get("method") == "notifications/progress":
                progress = message["params"]["progress"]
                say(f"[client] progress {progress}/50")
                if progress == 3:
                    status = await mcp.cancel(call["id"], "user pressed stop")
                    say(f"[client] sent notifications/cancelled -> HTTP {status}")
            else:
                say(f"[client] final message: {json.dumps(message)}")
    say("[client] the stream ended with no response, as MCP requires after a cancel")


def modern_meta(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """The envelope every modern (2026-07-28) request carries in ``_meta``: no initialize."""
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "client-demo", "version": "1"},
    }


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    """The routing headers a modern request mirrors from its body (the server checks they agree)."""
    headers = {**HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


async def modern_by_stream_close(url: str, client: httpx.AsyncClient, registry: Registry) -> None:
    say("\n== 0. Modern HTTP (2026-07-28): cancel by closing the request's stream")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "count",
            "arguments": {"n": 50, "delay": 0.1},
            "_meta": {**modern_meta(), "progressToken": "m1"},
        },
    }
    headers = modern_headers("tools/call", "count")
    await close_after_progress(client, url, headers, call, registry)


async def http_by_disconnect(mcp: McpHttpClient, registry: Registry) -> None:
    say("\n== 2. HTTP: cancel by dropping the SSE stream (not resumed within resume_window, 5 s)")
    call = mcp.request(
        "tools/call",
        {"name": "count", "arguments": {"n": 200, "delay": 0.1}, "_meta": {"progressToken": "p2"}},
    )
    await close_after_progress(mcp.client, mcp.url, mcp.headers, call, registry)


async def close_after_progress(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    call: dict[str, Any],
    registry: Registry,
) -> None:
    """Stream *call*, close the stream at progress 2, and show the server's cancel."""
    async with trio.open_nursery() as nursery:
        seen: list[RequestCancelledEvent] = []
        done = trio.Event()

        async def watch() -> None:
            seen.append(await wait_for_event(registry, "disconnect"))
            done.set()

        nursery.start_soon(watch)
        async with client.stream("POST", url, headers=headers, json=call) as response:
            if "mcp-session-id" not in headers:
                session = response.headers.get("mcp-session-id")
                say(f"[client] no session: mcp-session-id={session}")
            async for message in sse_messages(response):
                params = message["params"]
                say(f"[client] progress {params['progress']}/{params.get('total')}")
                if message["params"]["progress"] == 2:
                    say("[client] closing the stream")
                    break
        # A legacy stream waits resume_window (5 s) for its client to resume it.
        with trio.fail_after(15):
            await done.wait()
    say(f"[client] server recorded: kind={seen[0].kind} reason={seen[0].reason!r}")
    with trio.fail_after(5):
        await registry.wait_idle()
    say("[client] the tool has stopped; nothing is left in flight")


async def websocket_demo(ws_url: str, registry: Registry) -> None:
    say("\n== 3. WebSocket: cancel by notification")
    async with open_websocket_url(ws_url) as ws:
        await ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "count",
                        "arguments": {"n": 50, "delay": 0.1},
                        "_meta": {"progressToken": 1},
                    },
                }
            )
        )
        while True:
            message = json.loads(await ws.get_message())
            if message["params"]["progress"] == 2:
                say("[client] progress 2/50, sending notifications/cancelled")
                await ws.send_message(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/cancelled",
                            "params": {"requestId": 1, "reason": "changed my mind"},
                        }
                    )
                )
                break
        with trio.fail_after(5):
            await registry.wait_idle()
        with trio.move_on_after(0.2):  # anything for request 1 now would break MCP's rule
            say(f"[client] unexpected message: {await ws.get_message()}")
        say("[client] the tool has stopped, and no response followed the cancel")
        say("\n== 4. WebSocket: cancel by closing the socket")
        await ws.send_message(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "count", "arguments": {"n": 50, "delay": 0.1}},
                }
            )
        )
        await trio.sleep(0.3)
        say(f"[client] closing the socket with {registry.in_flight_count} request in flight")
    with trio.fail_after(5):
        await registry.wait_idle()
    say("[client] the tool has stopped; nothing is left in flight")


async def stubborn_demo(mcp: McpHttpClient) -> None:
    say(f"\n== 5. A tool that ignores the flag is hard-cancelled after the {GRACE}s grace period")
    call = mcp.request("tools/call", {"name": "stubborn", "arguments": {"seconds": 60}})
    async with trio.open_nursery() as nursery:

        async def cancel_soon() -> None:
            await trio.sleep(0.3)
            await mcp.cancel(call["id"], "too slow")
            say("[client] sent notifications/cancelled")

        nursery.start_soon(cancel_soon)
        start = trio.current_time()
        async with mcp.client.stream("POST", mcp.url, headers=mcp.headers, json=call) as response:
            async for message in sse_messages(response):
                say(f"[client] unexpected message: {json.dumps(message)}")
        elapsed = trio.current_time() - start
        say(f"[client] after {elapsed:.1f}s the stream ended, with no response")


def demo_children() -> list[int]:
    """Like ``pgrep -f mcp-demo-child``, limited to our own children (the server
    runs in this process), so demos run by others on the machine do not count."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if CHILD_MARK.encode() in cmdline and int(fields[1]) == os.getpid() and fields[0] != "Z":
            pids.append(int(entry))
    return pids


async def child_process_demo(url: str, registry: Registry) -> None:
    say("\n== 6. A child process, stopped by a cancel (through trio_mcp_cancel.client)")
    started = trio.Event()

    def on_progress(params: dict[str, Any]) -> None:
        say(f"[client] progress: {params.get('message')}")
        started.set()

    async with open_http_client(url) as client:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: client.call_tool("child", {"seconds": 60}, progress=on_progress)
                )
                with trio.fail_after(10):
                    await started.wait()
                say(f"[client] running: {len(demo_children())} {CHILD_MARK} process")
                say("[client] cancelling the call (the client closes the stream)")
                scope.cancel()
    with trio.fail_after(10):
        await registry.wait_idle()
    # run_process reaps the child before the tool ends: nothing to wait for.
    left = demo_children()
    if left:
        say(f"[client] UNEXPECTED: {CHILD_MARK} processes still running: {left}")
    else:
        say(f"[client] the tool has stopped, and no {CHILD_MARK} process is left")


async def modern_rpc(
    client: httpx.AsyncClient,
    url: str,
    request_id: int,
    method: str,
    params: dict[str, Any],
    *,
    capabilities: dict[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Send one modern request (envelope in ``_meta``, routing headers) and return its result."""
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": modern_meta(capabilities)},
    }
    headers = modern_headers(method, name)
    async with client.stream("POST", url, headers=headers, json=message) as response:
        async for reply in sse_messages(response):
            if reply.get("id") != request_id:
                say(f"[client] unexpected message: {json.dumps(reply)}")
            elif "error" in reply:
                raise RuntimeError(f"{method} failed: {json.dumps(reply['error'])}")
            else:
                result: dict[str, Any] = reply["result"]
                return result
    raise RuntimeError(f"{method}: the stream ended with no response")


async def next_cancel(
    receive: trio.MemoryReceiveChannel[Event], kind: str, namespace_prefix: str = ""
) -> RequestCancelledEvent:
    """The next cancel the server records of *kind*, in a namespace with that prefix."""
    async for event in receive:
        if (
            isinstance(event, RequestCancelledEvent)
            and event.kind == kind
            and event.namespace.startswith(namespace_prefix)
        ):
            return event
    raise AssertionError("the event hub closed")


async def task_demo(url: str, client: httpx.AsyncClient, registry: Registry) -> None:
    say("\n== 7. Tasks extension (modern HTTP): a tools/call run as a task, then tasks/cancel")
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
    ids = itertools.count(1)
    say(f"[client] tools/call count, declaring {TASKS_EXTENSION} in _meta clientCapabilities")
    created = await modern_rpc(
        client,
        url,
        next(ids),
        "tools/call",
        {"name": "count", "arguments": {"n": 600, "delay": 0.1}},
        capabilities=capabilities,
        name="count",
    )
    task_id = created["taskId"]
    short = f"{task_id[:8]}…"
    say(
        f"[client] answered at once: resultType={created['resultType']!r} taskId={short}"
        f" status={created['status']!r} pollIntervalMs={created.get('pollIntervalMs')}"
    )
    interval = created.get("pollIntervalMs", 1000) / 1000

    async def get() -> str:
        # Mcp-Name carries the task id, so a load balancer can route the poll.
        task = await modern_rpc(
            client,
            url,
            next(ids),
            "tasks/get",
            {"taskId": task_id},
            capabilities=capabilities,
            name=task_id,
        )
        message = task.get("statusMessage")
        detail = f" statusMessage={message!r}" if message is not None else ""
        say(f"[client] tasks/get (Mcp-Name: {short}) -> status={task['status']!r}{detail}")
        status: str = task["status"]
        return status

    await get()
    await trio.sleep(interval)  # polls are spaced by the server's pollIntervalMs
    await get()
    receive = registry.events.open_channel()
    async with receive:
        ack = await modern_rpc(
            client,
            url,
            next(ids),
            "tasks/cancel",
            {"taskId": task_id},
            capabilities=capabilities,
            name=task_id,
        )
        task_fields = sorted(set(ack) - {"resultType", "_meta"})
        verdict = f"UNEXPECTED task fields {task_fields}" if task_fields else "the empty ack"
        say(f"[client] tasks/cancel (Mcp-Name: {short}) -> {verdict}: {json.dumps(ack)}")
        with trio.fail_after(5):
            event = await next_cancel(receive, "client", "task:")
    say(
        f"[client] server recorded: kind={event.kind} reason={event.reason!r}"
        f" for task {str(event.request_id)[:8]}…"
    )
    with trio.fail_after(10):
        while True:  # cancellation is eventually consistent: poll until it settles
            await trio.sleep(interval)
            if await get() != "working":
                break
    with trio.fail_after(5):
        await registry.wait_idle()
    say("[client] the task has stopped; nothing is left in flight")


class JsonLines:
    """Newline-delimited JSON-RPC read from a child's stdout (stdio framing)."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> bytes | None:
        """The next line without its newline; ``None`` at end of file."""
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some()
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    async def receive(self) -> dict[str, Any] | None:
        line = await self.line()
        if line is None:
            return None
        message: dict[str, Any] = json.loads(line)
        return message


async def stdio_demo() -> None:
    say("\n== 8. stdio: the server as a child process, cancelled by notifications/cancelled")
    command = [
        sys.executable,
        str(HERE / "slow_server.py"),
        "--stdio",
        "--grace-period",
        str(GRACE),
    ]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
            )
        )
        assert process.stdin and process.stdout and process.stderr
        stdin = process.stdin
        say(f"[client] started {HERE.name}/slow_server.py --stdio (pid {process.pid})")
        recorded = trio.Event()

        async def relay_stderr(stderr: trio.abc.ReceiveStream) -> None:
            """The server's events arrive as log lines on its stderr."""
            lines = JsonLines(stderr)
            while (line := await lines.line()) is not None:
                text = line.decode(errors="replace")
                say(f"[stdio server] {text}")
                if text.startswith("request 2 ") and "cancelled by the client" in text:
                    recorded.set()  # it has stopped

        nursery.start_soon(relay_stderr, process.stderr)
        stdout = JsonLines(process.stdout)

        async def send(message: dict[str, Any]) -> None:
            say(f"[client] -> {json.dumps(message)}")
            await stdin.send_all(json.dumps(message).encode() + b"\n")

        async def receive() -> dict[str, Any]:
            with trio.fail_after(10):
                message = await stdout.receive()
            if message is None:
                raise RuntimeError("the stdio server closed stdout")
            return message

        await send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "client-demo", "version": "1"},
                },
            }
        )
        reply = await receive()
        info = reply["result"]["serverInfo"]
        say(f"[client] <- initialized: {info['name']} {reply['result']['protocolVersion']}")
        await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "count",
                    "arguments": {"n": 600, "delay": 0.1},
                    "_meta": {"progressToken": "s1"},
                },
            }
        )
        while True:
            message = await receive()
            if message.get("method") != "notifications/progress":
                say(f"[client] unexpected message: {json.dumps(message)}")
                continue
            say(f"[client] <- progress {message['params']['progress']}/600")
            if message["params"]["progress"] == 2:
                break
        await send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 2, "reason": "stop counting"},
            }
        )
        with trio.fail_after(5):
            await recorded.wait()
        # The session goes on: a ping after the cancel is answered; request 2 never is.
        await send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        while (message := await receive()).get("id") != 3:
            if message.get("id") == 2:
                say(f"[client] unexpected message: {json.dumps(message)}")
        say(f"[client] <- ping answered: {json.dumps(message)}")
        say("[client] closing stdin: the end of the session")
        await stdin.aclose()
        with trio.fail_after(10):
            while (late := await stdout.receive()) is not None:
                if late.get("id") == 2:
                    say(f"[client] unexpected message: {json.dumps(late)}")
            await process.wait()
    say("[client] stdout closed, and no response followed the cancel")
    say(f"[client] the stdio server exited with status {process.returncode}")


async def main() -> None:
    def show(event: Event) -> None:
        say(describe(event))

    async with open_registry(grace_period=GRACE) as registry, trio.open_nursery() as nursery:
        registry.events.subscribe(show)
        http_url, ws_url = await nursery.start(run_demo_server, registry)
        say(f"server up: {http_url} and {ws_url}")
        async with httpx.AsyncClient(timeout=10) as client:
            await modern_by_stream_close(http_url, client, registry)
            mcp = McpHttpClient(client, http_url)
            await mcp.initialize()
            await http_by_notification(mcp)
            await http_by_disconnect(mcp, registry)
            await websocket_demo(ws_url, registry)
            await stubborn_demo(mcp)
        await child_process_demo(http_url, registry)
        async with httpx.AsyncClient(timeout=10) as client:
            await task_demo(http_url, client, registry)
        await stdio_demo()
        say(
            f"\ndone: {registry.in_flight_count} requests in flight, {registry.row_count} rows left"
        )
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
