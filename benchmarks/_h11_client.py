"""The client's former Streamable HTTP transport (one POST per connection, over h11),
kept for the client benchmark's "before" rows (:mod:`benchmarks.bench_client`).

It was ``trio_mcp_cancel/_client/http.py`` until the client moved to httpx2.

Each request is its own POST on its own connection, and the answer comes
back on that POST's response, as one JSON body or as an SSE stream
(progress and log notifications, then the answer).  That makes the modern
era's cancellation exactly what MCP says it is: the client *closes the
request's stream*; here the connection, by cancelling the task that reads
it.  Legacy sessions (``initialize`` + ``Mcp-Session-Id``) send
``notifications/cancelled`` as a POST of its own, and stop reading.

One connection per request costs a TCP handshake per call, which is small
next to a tool call, and keeps every request independently cancellable
with no connection pool to get wrong.  h11 (hypercorn's own HTTP/1.1
engine, so no new dependency) frames it; ``https`` URLs use Trio's TLS.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import h11
import trio

from trio_mcp_cancel._client.base import Receiver
from trio_mcp_cancel._client.calls import PendingCall, cancel_notification, deliver, fail
from trio_mcp_cancel._client.errors import McpTransportError, Message
from trio_mcp_cancel._wire.names import (
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    LATEST_VERSION,
    NAME_BEARING,
    encode_header_value,
)

__all__ = ["HttpTransport", "SseDecoder"]

logger = logging.getLogger("trio_mcp_cancel.client")


@attrs.define(eq=False)
class SseDecoder:
    """Incremental ``text/event-stream`` parsing: bytes in, event data out.

    Only ``data`` matters to MCP (each event is one JSON-RPC message);
    comments (keep-alives), ``id``, ``event`` and ``retry`` are skipped.
    *max_event* bounds one event's size.
    """

    max_event: int
    _buffer: bytearray = attrs.field(factory=bytearray)
    _data: list[bytes] = attrs.field(factory=list)
    _size: int = 0

    def feed(self, chunk: bytes) -> Iterator[str]:
        self._buffer += chunk
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > self.max_event:
                    raise ValueError("SSE line too long")
                return
            line = bytes(self._buffer[:end]).rstrip(b"\r")
            del self._buffer[: end + 1]
            if not line:
                if self._data:
                    data, self._data, self._size = b"\n".join(self._data), [], 0
                    yield data.decode("utf-8", "replace")
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                value = value[1:] if value.startswith(b" ") else value
                self._size += len(value)
                if self._size > self.max_event:
                    raise ValueError("SSE event too large")
                self._data.append(value)


@attrs.define(eq=False)
class HttpTransport:
    """POSTs the messages of one client engine to one MCP endpoint.

    A :class:`~._client.base.ClientTransport`; what comes back goes to *receiver*.
    """

    url: str
    nursery: trio.Nursery
    headers: Mapping[str, str] = attrs.field(factory=dict)
    connect_timeout: float = 10.0
    max_response: int = 16 * 1024 * 1024
    ssl_context: ssl.SSLContext | None = None
    session_id: str | None = None
    """The legacy session (``Mcp-Session-Id``), once ``initialize`` made one."""
    receiver: Receiver = attrs.field(kw_only=True)
    _streams: dict[int, trio.CancelScope] = attrs.field(factory=dict)
    _host: str = attrs.field(init=False)
    _port: int = attrs.field(init=False)
    _target: str = attrs.field(init=False)
    _tls: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {self.url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    # -- what the engine calls -----------------------------------------------

    def transmit(self, message: Message, call: PendingCall | None) -> None:
        scope = trio.CancelScope()
        if call is not None:
            self._streams[call.id] = scope
        self.nursery.start_soon(self._post, message, call, scope)

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        """Modern: close the request's stream.  Legacy: ``notifications/cancelled``, then close.

        In the legacy era a closed stream is not a cancel (servers SHOULD
        NOT read it as one), so the stream stays open until the cancel's own
        POST has been answered: the notification is what the server sees.
        """
        if call.finished:
            return  # MCP: never cancel what has finished (the id may be reused by then)
        scope = self._streams.pop(call.id, None)
        if self.receiver.era != "legacy":
            if scope is not None:
                scope.cancel()
            return
        notification = cancel_notification(call.id, reason)
        self.nursery.start_soon(self._cancel_legacy, notification, scope)

    async def send(self, message: Message) -> None:
        """POST a message that expects no answer, and wait until the server took it.

        Every message is its own POST: waiting keeps a notification from
        being overtaken by the request that follows it.
        """
        await self.post(message)

    async def post(self, message: Message) -> None:
        """POST a message that expects no answer, and wait until the server took it."""
        await self._post(message, None, trio.CancelScope())

    async def _cancel_legacy(self, notification: Message, stream: trio.CancelScope | None) -> None:
        try:
            await self.post(notification)
        finally:
            if stream is not None:
                stream.cancel()

    async def end_session(self, patience: float = 2.0) -> None:
        """Legacy: ``DELETE`` the session (best effort: a server may answer 405)."""
        if self.session_id is None:
            return
        with trio.move_on_after(patience) as scope:
            scope.shield = True
            try:
                async with await self._connect() as stream:
                    conn = h11.Connection(h11.CLIENT)
                    await stream.send_all(
                        conn.send(
                            h11.Request(
                                method="DELETE", target=self._target, headers=self._base_headers()
                            )
                        )
                        + conn.send(h11.EndOfMessage())
                    )
                    await self._next_event(conn, stream)
            except (OSError, trio.BrokenResourceError, h11.ProtocolError, McpTransportError):
                pass
        self.session_id = None

    # -- one POST ------------------------------------------------------------

    async def _connect(self) -> trio.abc.Stream:
        try:
            with trio.fail_after(self.connect_timeout):
                if self._tls:
                    return await trio.open_ssl_over_tcp_stream(
                        self._host, self._port, ssl_context=self.ssl_context
                    )
                return await trio.open_tcp_stream(self._host, self._port)
        except (OSError, trio.TooSlowError) as exc:
            raise McpTransportError(f"cannot connect to {self.url}: {exc!r}") from exc

    def _base_headers(self) -> list[tuple[str, str]]:
        port = "" if self._port == (443 if self._tls else 80) else f":{self._port}"
        headers = [("Host", f"{self._host}{port}"), ("User-Agent", "trio-mcp-cancel")]
        headers += [(name, value) for name, value in self.headers.items()]
        if self.receiver.era == "legacy":
            if self.session_id is not None:
                headers.append((HEADER_SESSION_ID, self.session_id))
            version = self.receiver.session_version
            if version is not None:
                headers.append((HEADER_PROTOCOL_VERSION, version))
        return headers

    def _headers(self, message: Message, length: int) -> list[tuple[str, str]]:
        headers = self._base_headers()
        headers += [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Content-Length", str(length)),
        ]
        method = message.get("method")
        if self.receiver.era == "modern" and isinstance(method, str):
            headers.append((HEADER_PROTOCOL_VERSION, LATEST_VERSION))
            if "id" in message:
                headers.append((HEADER_METHOD, method))
                params = message.get("params")
                key = NAME_BEARING.get(method)
                if key is not None and isinstance(params, dict):
                    value = params.get(key)
                    if isinstance(value, str):
                        headers.append((HEADER_NAME, encode_header_value(value)))
        return headers

    async def _post(
        self, message: Message, call: PendingCall | None, scope: trio.CancelScope
    ) -> None:
        try:
            with scope:
                await self._exchange(message, call)
        except McpTransportError as exc:
            self._lost(call, exc)
        except (OSError, trio.BrokenResourceError, h11.ProtocolError, ValueError) as exc:
            self._lost(call, McpTransportError(f"HTTP exchange with {self.url} failed: {exc!r}"))
        finally:
            if call is not None:
                self._streams.pop(call.id, None)
        if call is not None and not call.finished and not scope.cancelled_caught:
            fail(call, McpTransportError("the response ended without an answer"))

    def _lost(self, call: PendingCall | None, failure: McpTransportError) -> None:
        if call is None:
            logger.warning("posting a notification failed: %s", failure)
        else:
            fail(call, failure)

    async def _exchange(self, message: Message, call: PendingCall | None) -> None:
        body = json.dumps(message).encode()
        async with await self._connect() as stream:
            conn = h11.Connection(h11.CLIENT)
            request = h11.Request(
                method="POST", target=self._target, headers=self._headers(message, len(body))
            )
            await stream.send_all(
                conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            )
            response = await self._next_event(conn, stream)
            assert isinstance(response, h11.Response)
            headers = {
                name.decode().lower(): value.decode("latin-1") for name, value in response.headers
            }
            session_header = HEADER_SESSION_ID.lower()
            if message.get("method") == "initialize" and session_header in headers:
                self.session_id = headers[session_header]
            elif response.status_code == 404 and self.session_id is not None:
                # MCP: the server ended the session; the id is dead for good.
                self.session_id = None
                raise McpTransportError(
                    "the server ended the session (HTTP 404): open a new client",
                    {"status": 404, "session_ended": True},
                )
            if headers.get("content-type", "").startswith("text/event-stream"):
                await self._read_sse(conn, stream, call)
                return
            data = await self._read_body(conn, stream)
            if call is None:
                if response.status_code >= 400:
                    logger.warning(
                        "%s answered HTTP %d to a notification", self.url, response.status_code
                    )
                return
            answer: Any = None
            if data:
                try:
                    answer = json.loads(data)
                except ValueError:
                    answer = None
            if isinstance(answer, dict) and ("result" in answer or "error" in answer):
                if "error" in answer and answer.get("id") != call.id:
                    deliver(call, answer)  # an error about the POST itself (id null)
                else:
                    self.receiver.receive(answer)
            else:
                fail(
                    call,
                    McpTransportError(
                        f"HTTP {response.status_code} without a JSON-RPC answer: {data[:200]!r}",
                        {"status": response.status_code},
                    ),
                )

    async def _next_event(self, conn: h11.Connection, stream: trio.abc.Stream) -> Any:
        """The next h11 event that is not an informational response."""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                chunk = await stream.receive_some(65536)
                if not chunk and conn.their_state is h11.SEND_RESPONSE:
                    raise McpTransportError(f"{self.url} closed the connection without answering")
                conn.receive_data(bytes(chunk))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            return event

    async def _read_body(self, conn: h11.Connection, stream: trio.abc.Stream) -> bytes:
        body = bytearray()
        while True:
            event = await self._next_event(conn, stream)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_response:
                    raise McpTransportError(f"response larger than {self.max_response} bytes")
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return bytes(body)

    async def _read_sse(
        self, conn: h11.Connection, stream: trio.abc.Stream, call: PendingCall | None
    ) -> None:
        decoder = SseDecoder(self.max_response)
        while True:
            event = await self._next_event(conn, stream)
            if isinstance(event, h11.Data):
                for data in decoder.feed(event.data):
                    self.receiver.receive_text(data)
                if call is not None and call.finished:
                    return  # the answer ends the stream; no need to wait for the close
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return
