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

Run with ``python3 dev.py demo`` (or ``python examples/client_demo.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slow_server import CHILD_MARK, describe, run_demo_server

from trio_mcp_cancel import Event, Registry, RequestCancelledEvent, open_registry
from trio_mcp_cancel.client import open_http_client

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
GRACE = 1.0


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
        async for event in receive:
            if isinstance(event, RequestCancelledEvent) and event.kind == kind:
                return event
    raise AssertionError("unreachable")


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


async def modern_by_stream_close(url: str, client: httpx.AsyncClient, registry: Registry) -> None:
    say("\n== 0. Modern HTTP (2026-07-28): cancel by closing the request's stream")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "client-demo", "version": "1"},
        "progressToken": "m1",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "count", "arguments": {"n": 50, "delay": 0.1}, "_meta": meta},
    }
    headers = {
        **HEADERS,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "count",
    }
    await close_after_progress(client, url, headers, call, registry)


async def http_by_disconnect(mcp: McpHttpClient, registry: Registry) -> None:
    say("\n== 2. HTTP: cancel by dropping the SSE stream")
    call = mcp.request(
        "tools/call",
        {"name": "count", "arguments": {"n": 50, "delay": 0.1}, "_meta": {"progressToken": "p2"}},
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
                say(f"[client] progress {message['params']['progress']}/50")
                if message["params"]["progress"] == 2:
                    say("[client] closing the stream")
                    break
        with trio.fail_after(5):
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


async def main() -> None:
    def show(event: Event) -> None:
        say(describe(event))

    async with open_registry(grace_period=GRACE) as registry, trio.open_nursery() as nursery:
        registry.subscribe(show)
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
        say(
            f"\ndone: {registry.in_flight_count} requests in flight, {registry.row_count} rows left"
        )
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
