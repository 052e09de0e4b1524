"""An in-memory ASGI driver for HTTP app tests: no sockets, so MockClock works.

``AsgiClient(app, nursery).start(...)`` runs one request through the app as
a task and returns an :class:`HttpExchange`, which

* feeds the body as ``http.request`` message(s), then blocks ``receive()``
  until the test calls :meth:`HttpExchange.disconnect` or the response is
  complete (as a server does, ``http.disconnect`` follows either);
* records every ``http.response.*`` message with the (mock) time it came,
  and every message sent after the disconnect (a real server drops them);
* parses the body into SSE items incrementally (:meth:`next_item`);
* notes ASGI protocol violations (a body before the head, anything after
  the last body), which :meth:`AsgiClient.check` turns into a failure.

Plus builders for MCP messages and headers of both eras.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from trio_mcp_cancel.testing import assert_no_leaks

Message = MutableMapping[str, Any]
App = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
PV = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
INFO = "io.modelcontextprotocol/clientInfo"
LEVEL = "io.modelcontextprotocol/logLevel"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


@attrs.frozen
class SseItem:
    """One SSE block: a comment (``data`` is the text) or a ``message`` event (``data`` JSON)."""

    kind: str  # "comment" | "message"
    data: Any
    at: float
    id: str | None = None
    """The event's ``id`` (resumable legacy streams number their events)."""


@attrs.define(eq=False)
class HttpExchange:
    """One request/response through the app; see the module docstring."""

    body: bytes
    chunk_size: int | None = None
    status: int | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    raw_headers: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    started_at: float | None = None
    chunks: list[tuple[float, bytes]] = attrs.field(factory=list)
    complete: bool = False
    completed_at: float | None = None
    disconnected_at: float | None = None
    after_disconnect: list[Message] = attrs.field(factory=list)
    """Messages the app sent after the client was gone (a server drops them)."""
    violations: list[str] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _gone: trio.Event = attrs.field(factory=trio.Event)
    _fed: bool = False
    _stalled_body: bool = False
    reading: bool = True
    """Whether the client reads its response (see :meth:`stop_reading`)."""
    blocked_sends: int = 0
    """Sends blocked right now on a client that does not read."""
    closed_at: float | None = None
    """When the server closed the connection (the app returned)."""
    _closed: trio.Event = attrs.field(factory=trio.Event)
    _pending: list[bytes] = attrs.field(factory=list)
    _buffer: bytes = b""
    _items: list[SseItem] = attrs.field(factory=list)
    _read: int = 0
    last_event_id: str | None = None
    """The last SSE ``id`` seen (what a client resumes from)."""
    retry: int | None = None
    """The last SSE ``retry`` field seen, in milliseconds."""
    primed: bool = False
    """A priming event (an id, no data) came."""
    disconnect_first: bool = False
    """hypercorn's order: the app's waiting ``receive()`` gets ``http.disconnect`` before
    the ``send()`` of the last body returns (hypercorn queues it while it closes the
    stream, and its socket writes let the app's other tasks run first)."""
    _receiving: bool = False
    _disconnect_seen: trio.Event = attrs.field(factory=trio.Event)

    # -- the app's side ------------------------------------------------------

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def receive(self) -> Message:
        if self.disconnected_at is not None:
            await trio.lowlevel.checkpoint()
            return {"type": "http.disconnect"}
        if not self._fed:
            size = self.chunk_size or max(len(self.body), 1)
            pieces = [self.body[i : i + size] for i in range(0, len(self.body), size)]
            self._pending = pieces or [b""]
            self._fed = True
        if self._pending:
            piece = self._pending.pop(0)
            await trio.lowlevel.checkpoint()
            if self._stalled_body and not self._pending:
                await self._gone.wait()  # the last piece never comes
                return {"type": "http.disconnect"}
            return {"type": "http.request", "body": piece, "more_body": bool(self._pending)}
        self._receiving = True
        try:
            await self._gone.wait()
        finally:
            self._receiving = False
        self._disconnect_seen.set()
        return {"type": "http.disconnect"}

    def stall_body(self) -> None:
        """Send every body piece but the last, then nothing (a slow-body client)."""
        self._stalled_body = True

    def stop_reading(self) -> None:
        """From now on, a send blocks until the server closes the connection.

        That is what hypercorn does with a client that stopped reading: its
        socket write waits inside a shielded cancel scope, so nothing but the
        connection closing (which happens once the app returned) ends it.
        """
        self.reading = False

    async def send(self, message: Message) -> None:
        await trio.lowlevel.checkpoint()
        if not self.reading and not self._closed.is_set():
            self.blocked_sends += 1
            with trio.CancelScope(shield=True):
                await self._closed.wait()
            self.blocked_sends -= 1
        if self._closed.is_set():
            return  # written to a closed socket: silently lost, as in hypercorn
        now = trio.current_time()
        if self.disconnected_at is not None:
            self.after_disconnect.append(message)
            return
        kind = message["type"]
        if self.complete:
            self.violations.append(f"{kind} after the response was complete")
        elif kind == "http.response.start":
            if self.status is not None:
                self.violations.append("a second http.response.start")
            self.status = message["status"]
            self.raw_headers = list(message.get("headers", []))
            self.headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self.raw_headers
            }
            self.started_at = now
        elif kind == "http.response.body":
            if self.status is None:
                self.violations.append("http.response.body before http.response.start")
            data = message.get("body", b"")
            if data:
                self.chunks.append((now, data))
                self._parse(data, now)
            if not message.get("more_body", False):
                self.complete = True
                self.completed_at = now
                self._gone.set()  # as a server does once the response is sent
                if self.disconnect_first and self._receiving:
                    self._touch()
                    await self._disconnect_seen.wait()
                    return
        else:
            self.violations.append(f"unexpected message {kind!r}")
        self._touch()

    def _parse(self, data: bytes, now: float) -> None:
        self._buffer += data
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            text = block.decode("utf-8")
            if text.startswith(":"):
                self._items.append(SseItem("comment", text[1:].strip(), now))
                continue
            fields: dict[str, str] = {}
            for line in text.split("\n"):
                name, _, value = line.partition(":")
                fields[name] = fields.get(name, "") + value.lstrip(" ")
            if "id" in fields:
                self.last_event_id = fields["id"]
            if "retry" in fields:
                self.retry = int(fields["retry"])
            if not fields.get("data"):
                # A priming event (an id, maybe a retry, no data): SSE
                # dispatches nothing for it.
                self.primed = self.primed or "id" in fields
                continue
            if fields.get("event", "message") != "message":
                self.violations.append(f"unexpected SSE event {fields.get('event')!r}")
            item = SseItem("message", json.loads(fields["data"]), now, fields.get("id"))
            self._items.append(item)

    # -- the test's side -----------------------------------------------------

    def disconnect(self) -> None:
        """The client goes away: ``receive()`` answers ``http.disconnect`` now."""
        if self.disconnected_at is None:
            self.disconnected_at = trio.current_time()
        self._gone.set()

    async def _until(self, ready: Callable[[], bool], what: str) -> None:
        while not ready():
            if self.done.is_set():
                raise AssertionError(f"the app finished without {what}")
            await self._changed.wait()  # set by every send, and when the app returns

    async def wait_started(self) -> None:
        await self._until(lambda: self.status is not None, "a response head")

    async def wait_complete(self) -> None:
        await self._until(lambda: self.complete, "a complete response")

    async def next_item(self) -> SseItem:
        """The next SSE item (comment or event), waiting for it."""
        await self._until(lambda: len(self._items) > self._read, "another SSE item")
        item = self._items[self._read]
        self._read += 1
        return item

    async def next_message(self) -> Any:
        """The next SSE ``message`` event's JSON, skipping comments."""
        while True:
            item = await self.next_item()
            if item.kind == "message":
                return item.data

    @property
    def items(self) -> list[SseItem]:
        """Every SSE item received so far."""
        return list(self._items)

    def messages(self) -> list[Any]:
        return [item.data for item in self._items if item.kind == "message"]

    def comments(self) -> list[SseItem]:
        return [item for item in self._items if item.kind == "comment"]

    @property
    def content(self) -> bytes:
        return b"".join(data for _, data in self.chunks)

    def json(self) -> Any:
        assert self.complete, "response not complete"
        assert self.headers.get("content-type") == "application/json", self.headers
        return json.loads(self.content)

    @property
    def is_sse(self) -> bool:
        return self.headers.get("content-type") == "text/event-stream"

    def answer(self) -> Any:
        """The JSON-RPC answer, however the server chose to send it (MCP lets it choose):
        the one JSON body, or the SSE stream's last message, which must be the only one
        with an ``id``.  ``None`` for an SSE stream that ended without one (a call its
        client cancelled)."""
        if not self.is_sse:
            return self.json()
        assert self.complete, "response not complete"
        messages = self.messages()
        assert all("id" not in m for m in messages[:-1]), messages
        if not messages or "id" not in messages[-1]:
            return None
        return messages[-1]


@attrs.define(eq=False)
class AsgiClient:
    """Runs requests through *app* as tasks of *nursery*."""

    app: App
    nursery: trio.Nursery
    client: tuple[str, int] = ("127.0.0.1", 50000)
    path: str = "/mcp"
    exchanges: list[HttpExchange] = attrs.field(factory=list)
    disconnect_first: bool = False
    """Every exchange reports the disconnect in hypercorn's order (see
    :attr:`HttpExchange.disconnect_first`)."""

    def start(
        self,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        body: object = None,
        *,
        path: str | None = None,
        chunk_size: int | None = None,
        client: tuple[str, int] | None = None,
    ) -> HttpExchange:
        """Start one request; it runs in the background."""
        if body is None:
            raw = b""
        elif isinstance(body, bytes):
            raw = body
        else:
            raw = json.dumps(body).encode()
        header_list = [
            (k.lower().encode(), v.encode("latin-1")) for k, v in (headers or {}).items()
        ]
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path or self.path,
            "raw_path": (path or self.path).encode(),
            "query_string": b"",
            "root_path": "",
            "headers": header_list,
            "client": client or self.client,
            "server": ("127.0.0.1", 8000),
        }
        exchange = HttpExchange(raw, chunk_size, disconnect_first=self.disconnect_first)
        self.exchanges.append(exchange)

        async def run() -> None:
            try:
                await self.app(scope, exchange.receive, exchange.send)
            finally:
                if not exchange.complete:
                    # The server closes a connection whose response the app
                    # left unfinished, which releases any blocked write.
                    exchange.closed_at = trio.current_time()
                    exchange._closed.set()
                exchange.done.set()
                exchange._touch()

        self.nursery.start_soon(run)
        return exchange

    async def request(
        self,
        method: str = "POST",
        headers: dict[str, str] | None = None,
        body: object = None,
        **options: Any,
    ) -> HttpExchange:
        """One whole request: start it and wait until the app returns."""
        exchange = self.start(method, headers, body, **options)
        await exchange.done.wait()
        return exchange

    async def post(self, headers: dict[str, str], body: object) -> HttpExchange:
        return await self.request("POST", headers, body)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the app's ASGI lifespan around the block, as a server does."""
        to_app, app_receive = trio.open_memory_channel[Message](1)
        from_app, app_events = trio.open_memory_channel[Message](1)
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}

        async def run() -> None:
            await self.app(scope, app_receive.receive, from_app.send)

        self.nursery.start_soon(run)
        await to_app.send({"type": "lifespan.startup"})
        started = await app_events.receive()
        assert started["type"] == "lifespan.startup.complete", started
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await to_app.send({"type": "lifespan.shutdown"})
                done = await app_events.receive()
                assert done["type"] == "lifespan.shutdown.complete", done

    async def wait_all_done(self) -> None:
        for exchange in list(self.exchanges):
            await exchange.done.wait()

    def check(self) -> None:
        """Fail on any ASGI protocol violation seen so far."""
        problems = [v for exchange in self.exchanges for v in exchange.violations]
        assert not problems, problems


@asynccontextmanager
async def served(
    app: Any, *, settle: float = 3600, no_leaks: bool = True
) -> AsyncIterator[AsgiClient]:
    """Serve *app* (an ``McpHttpApp`` on a running registry) in memory for one block.

    The one setup every in-memory HTTP test shares: a nursery, an
    :class:`AsgiClient`, the app's lifespan around the block.  Leaving the
    block waits (at most *settle* seconds of mock time) for every exchange
    to finish, then fails on any ASGI protocol violation and (unless
    *no_leaks* is false: a test that leaves an early cancel's row on purpose)
    on anything the app's registry still holds.
    """
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            yield client
            with trio.fail_after(settle):
                await client.wait_all_done()
    client.check()
    if no_leaks:
        assert_no_leaks(app.registry)


def bare_app(
    handle: Callable[[Any], Awaitable[None]],
) -> Callable[[Any, Any, Any], Awaitable[None]]:
    """A raw ASGI app for tests below the MCP layer: it completes the lifespan, reads each
    request's body whole, then hands the request's ``send`` to *handle*."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": f"{message['type']}.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        await handle(send)

    return app


# -- MCP message and header builders -------------------------------------------


def b64_header(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def request(
    request_id: object, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        out["params"] = params
    return out


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        out["params"] = params
    return out


def cancelled(request_id: object, reason: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"requestId": request_id}
    if reason is not None:
        params["reason"] = reason
    return notification("notifications/cancelled", params)


def modern_meta(
    *,
    version: str = MODERN,
    capabilities: dict[str, Any] | None = None,
    log_level: str | None = None,
    client_info: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {PV: version, CAPS: capabilities or {}}
    meta[INFO] = client_info or {"name": "harness", "version": "0"}
    if log_level is not None:
        meta[LEVEL] = log_level
    meta.update(extra)
    return meta


def modern_request(
    request_id: object,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    progress_token: object = None,
    **meta_options: Any,
) -> dict[str, Any]:
    """A modern request: *params* plus the ``_meta`` envelope."""
    meta = modern_meta(**meta_options)
    if progress_token is not None:
        meta["progressToken"] = progress_token
    return request(request_id, method, {**(params or {}), "_meta": meta})


def modern_call(
    request_id: object,
    name: str,
    arguments: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    return modern_request(
        request_id, "tools/call", {"name": name, "arguments": arguments or {}}, **options
    )


def modern_headers(
    method: str | None, name: str | None = None, *, version: str | None = MODERN, **extra: str
) -> dict[str, str]:
    """Headers of a modern POST: Accept, Content-Type, MCP-Protocol-Version, Mcp-Method/Name."""
    headers = {"accept": ACCEPT, "content-type": "application/json"}
    if version is not None:
        headers["mcp-protocol-version"] = version
    if method is not None:
        headers["mcp-method"] = method
    if name is not None:
        headers["mcp-name"] = name
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def headers_of(message: dict[str, Any]) -> dict[str, str]:
    """The modern headers that agree with *message*."""
    params = message.get("params") or {}
    method = message.get("method")
    name = params.get("name") if method in ("tools/call", "prompts/get") else None
    if isinstance(method, str) and method.startswith("tasks/"):
        name = params.get("taskId")  # Tasks extension: Mcp-Name carries the task id
    return modern_headers(method, name)


def legacy_headers(
    session_id: str | None = None, *, version: str | None = LEGACY, **extra: str
) -> dict[str, str]:
    headers = {"accept": ACCEPT, "content-type": "application/json"}
    if session_id is not None:
        headers["mcp-session-id"] = session_id
    if version is not None:
        headers["mcp-protocol-version"] = version
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def legacy_call(
    request_id: object, name: str, arguments: dict[str, Any] | None = None, token: object = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return request(request_id, "tools/call", params)


def initialize_message(
    version: str = LEGACY, capabilities: dict[str, Any] | None = None, request_id: object = 0
) -> dict[str, Any]:
    return request(
        request_id,
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "harness", "version": "0"},
        },
    )


async def initialize(
    client: AsgiClient, version: str = LEGACY, capabilities: dict[str, Any] | None = None
) -> str:
    """Open a legacy session; return its ``Mcp-Session-Id``."""
    exchange = await client.post(
        legacy_headers(version=None), initialize_message(version, capabilities)
    )
    assert exchange.status == 200, exchange.content
    session_id = exchange.headers["mcp-session-id"]
    notified = await client.post(
        legacy_headers(session_id), notification("notifications/initialized")
    )
    assert notified.status == 202
    return session_id
