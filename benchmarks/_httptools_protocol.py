"""A prototype HTTP/1.1 protocol for hypercorn's Trio worker that parses with httptools.

The evaluation behind issue 35's "httptools" item (``benchmarks/eval_httptools.py``
runs it); not part of the library.  It does the job of hypercorn 0.18's
``hypercorn.protocol.h11.H11Protocol`` for the requests the end-to-end
benchmark sends: it feeds ``HTTPStream`` with ``Request``/``Body``/``EndBody``
events parsed by ``httptools.HttpRequestParser`` (llhttp, C) and writes the
response head itself, as h11 would (status line without a reason phrase, the
app's headers then hypercorn's ``date``/``server``, chunked framing when there
is no ``content-length``, ``connection: close`` when either side ends the
connection, no body for ``HEAD``).  A ``content-length`` response's head is
held until its body, so a whole response is one socket write, as the library's
``send_whole`` shortcut makes it over h11: both sides of the comparison write
each response once.

Left out, since the benchmark does not need them: websocket and h2c upgrades,
``Expect: 100-continue``, the incomplete-head size limit.  A full protocol
must add them; their per-request cost is a few attribute tests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from itertools import chain
from typing import Any

import httptools
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.events import (
    Body,
    Data,
    EndBody,
    EndData,
    InformationalResponse,
    Request,
    Response,
    StreamClosed,
)
from hypercorn.protocol.events import Event as StreamEvent
from hypercorn.protocol.http_stream import HTTPStream

STREAM_ID = 1
_REQUEST, _BODY, _END = 0, 1, 2


class HttptoolsProtocol:
    """``H11Protocol``'s interface over httptools (see the module docstring)."""

    def __init__(
        self,
        app: Any,
        config: Any,
        context: Any,
        task_group: Any,
        connection_state: Any,
        ssl: bool,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
    ) -> None:
        self.app = app
        self.config = config
        self.context = context
        self.task_group = task_group
        self.connection_state = connection_state
        self.ssl = ssl
        self.client = client
        self.server = server
        self.send = send
        self.can_read = context.event_class()
        self.parser = httptools.HttpRequestParser(self)
        self.pending: deque[tuple[int, Any]] = deque()
        self.stream: HTTPStream | None = None
        self.keep_alive_requests = 0
        # the request being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        # the request being answered
        self.method = b"GET"
        self.http11 = True
        self.keep_alive = True
        self.request_done = False
        self.response_done = False
        self.chunked = False
        self.head: bytes | None = None
        self.error = False
        #: a request is being answered (set until its stream is recycled)
        self.busy = False
        self.closed = False

    # -- httptools callbacks (synchronous, during feed_data) --------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        self.pending.append(
            (
                _REQUEST,
                (
                    parser.get_method(),
                    parser.get_http_version(),
                    parser.should_keep_alive(),
                    self._url,
                    self._headers,
                ),
            )
        )

    def on_body(self, body: bytes) -> None:
        self.pending.append((_BODY, body))

    def on_message_complete(self) -> None:
        self.pending.append((_END, None))

    # -- hypercorn's protocol interface -----------------------------------------

    async def initiate(self) -> None:
        pass

    async def handle(self, event: Event) -> None:
        if isinstance(event, RawData):
            if self.error:
                return
            try:
                self.parser.feed_data(event.data)
            except httptools.HttpParserError:
                self.error = True
                await self._handle_events()  # what parsed before the error
                if self.stream is None:
                    await self._send_error_response(400)
                await self.send(Closed())
                return
            await self._handle_events()
        elif isinstance(event, Closed):
            self.closed = True
            if self.stream is not None:
                await self._close_stream()

    async def _handle_events(self) -> None:
        pending = self.pending
        while pending:
            kind, value = pending[0]
            if kind == _REQUEST:
                if self.busy:
                    # pipelined: wait for the answer to the one before (h11's PAUSED)
                    await self.can_read.clear()
                    await self.can_read.wait()
                    if self.busy or self.closed:
                        return  # the connection closed
                    continue
                pending.popleft()
                await self.send(Updated(idle=False))
                await self._create_stream(*value)
            elif self.stream is None:
                pending.popleft()
            elif kind == _BODY:
                pending.popleft()
                await self.stream.handle(Body(stream_id=STREAM_ID, data=value))
            else:
                pending.popleft()
                self.request_done = True  # before the await: the app may answer in it
                await self.stream.handle(EndBody(stream_id=STREAM_ID))

    async def _create_stream(
        self,
        method: bytes,
        version: str,
        keep_alive: bool,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        self.method = method
        self.http11 = version == "1.1"
        self.keep_alive = keep_alive
        self.request_done = False
        self.response_done = False
        self.busy = True
        self.stream = HTTPStream(
            self.app,
            self.config,
            self.context,
            self.task_group,
            self.ssl,
            self.client,
            self.server,
            self.stream_send,
            STREAM_ID,
        )
        await self.stream.handle(
            Request(
                stream_id=STREAM_ID,
                headers=headers,
                http_version=version,
                method=method.decode("ascii").upper(),
                raw_path=target,
                state=self.connection_state,
            )
        )
        self.keep_alive_requests += 1
        await self.context.mark_request()

    async def stream_send(self, event: StreamEvent) -> None:
        if isinstance(event, Response):
            headers = list(chain(event.headers, self.config.response_headers("h11")))
            if event.status_code < 200:
                await self.send(RawData(data=self._head(event.status_code, headers)))
                return
            if self.keep_alive_requests >= self.config.keep_alive_max_requests:
                headers.append((b"connection", b"close"))
                self.keep_alive = False
            self.head = self._response_head(event.status_code, headers)
            if self.chunked or self._body_until_close:
                await self._flush_head()
        elif isinstance(event, InformationalResponse):
            pass
        elif isinstance(event, Body):
            data = event.data
            if self.chunked:
                data = b"%x\r\n%s\r\n" % (len(data), data)
            if self.head is not None:
                data = self.head + data
                self.head = None
            await self.send(RawData(data=data))
        elif isinstance(event, EndBody):
            data = b"0\r\n\r\n" if self.chunked else b""
            if self.head is not None:
                data = self.head + data
                self.head = None
            self.response_done = True
            if data:
                await self.send(RawData(data=data))
        elif isinstance(event, Data):
            await self.send(RawData(data=event.data))
        elif isinstance(event, EndData):
            pass
        elif isinstance(event, StreamClosed):
            await self._maybe_recycle()

    _body_until_close = False

    def _response_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """h11's ``_clean_up_response_headers_for_sending`` and writer, for our states."""
        self.chunked = self._body_until_close = False
        if status in (204, 304) or (
            self.method == b"HEAD" and not any(n == b"content-length" for n, _ in headers)
        ):
            pass
        elif not any(n == b"content-length" for n, _ in headers):
            headers = [h for h in headers if h[0] not in (b"content-length", b"transfer-encoding")]
            if self.http11:
                headers.append((b"transfer-encoding", b"chunked"))
                self.chunked = self.method != b"HEAD"
            elif self.method != b"HEAD":
                self.keep_alive = False
                self._body_until_close = True
        if not self.keep_alive:
            tokens = {
                t.strip().lower()
                for n, v in headers
                if n == b"connection"
                for t in v.split(b",")
                if t.strip()
            }
            tokens.discard(b"keep-alive")
            tokens.add(b"close")
            headers = [h for h in headers if h[0] != b"connection"]
            headers.append((b"connection", b", ".join(sorted(tokens))))
        return self._head(status, headers)

    @staticmethod
    def _head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        lines = [b"HTTP/1.1 %d \r\n" % status]
        lines.extend(b"%s: %s\r\n" % (n, v) for n, v in headers if n == b"host")
        lines.extend(b"%s: %s\r\n" % (n, v) for n, v in headers if n != b"host")
        lines.append(b"\r\n")
        return b"".join(lines)

    async def _flush_head(self) -> None:
        if self.head is not None:
            head, self.head = self.head, None
            await self.send(RawData(data=head))

    async def _send_error_response(self, status: int) -> None:
        headers = [(b"content-length", b"0"), (b"connection", b"close")]
        await self.send(
            RawData(data=self._head(status, headers + self.config.response_headers("h11")))
        )

    async def _maybe_recycle(self) -> None:
        await self._close_stream()
        await self._flush_head()
        if (
            not self.context.terminated.is_set()
            and self.request_done
            and self.response_done
            and self.keep_alive
        ):
            self.busy = False
            await self.can_read.set()
            await self.send(Updated(idle=True))
        else:
            self.closed = True
            await self.can_read.set()
            await self.send(Closed())

    async def _close_stream(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await stream.handle(StreamClosed(stream_id=STREAM_ID))
