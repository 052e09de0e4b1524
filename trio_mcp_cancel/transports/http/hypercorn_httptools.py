"""An opt-in HTTP/1.1 protocol for hypercorn's Trio worker that parses with httptools.

Why: h11 (pure Python) parses every request and writes every response head
on a no-op ``tools/call``'s path; httptools (llhttp, C) does the parsing for
a fraction of the cost, as uvicorn's ``--http httptools`` does.  Measured for
issue 35 (``python -m benchmarks.eval_httptools``: callgrind instructions the
server process executes per no-op call, 500 sequential keep-alive calls after
200 of warm-up): the floor app 2,244k -> 1,409k (-37%), ours legacy 2,240k ->
1,727k (-23%), ours modern 2,279k -> 1,772k (-22%).  Selected per server with
``serve(..., http="httptools")``; h11 stays the default.

What it must not change is the bytes: every response is the one hypercorn's
``H11Protocol`` writes for the same request (status line without a reason
phrase, the app's headers then ``config.response_headers``, and h11's own
clean-up of framing and ``Connection`` headers, title-cased where h11 adds
them), ``100 Continue`` where h11 sends it, pipelined requests answered in
turn (the next one is parsed but not started until the answer before it is
written, h11's ``PAUSED``).  Rather than re-implement h11's error answers and
strictness, anything outside the plain path is *handed over* to hypercorn's
``H11Protocol``: a request llhttp rejects, an ``Upgrade`` (websocket, h2c),
``CONNECT``, the HTTP/2 preface, a head over ``h11_max_incomplete_size``, and
the headers h11 is stricter about (``Host`` missing or repeated,
``Transfer-Encoding`` other than ``chunked``, ``Content-Length`` repeated or
beside it).  The hand-over replays the connection's bytes since the last
point where no request was half-received, so h11 sees exactly what the
client sent and answers (or upgrades) as it always does.  It is possible as
long as no request from those bytes was started; where one was (an error in
the middle of a request body, or a too-large head right behind it), this
answers as h11 does: ``400`` (``431`` for the head) unless the response has
begun, then closes.  Where the two parsers disagree the same way holds:
forms llhttp rejects and h11 accepts (a bare LF line end, obsolete line
folding, a lower-case method) are handed over and served by h11; a few
hundred mutated requests sent to both protocols got the same bytes back.

The library's hypercorn shortcuts (:mod:`.hypercorn_compat`) see this
protocol as an HTTP/1.1 one for ``tcp_server_of`` (a write that cannot block
is made in the request's task) and ``receive_now``; ``send_whole`` knows only
h11's connection and answers "no shortcut", and this protocol holds a
``Content-Length`` response's head until its body, so a whole response is
still one socket write.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Awaitable, Callable
from itertools import chain
from typing import Any, Final

from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import h11 as _hypercorn_h11
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

try:  # the `httptools` extra (typed; the ignores are for an environment without it)
    import httptools  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - the extra is not installed
    httptools = None  # type: ignore[assignment, unused-ignore]

__all__ = ["HTTP_PROTOCOLS", "HttptoolsProtocol", "choose", "install"]

#: What ``serve(..., http=...)`` accepts.
HTTP_PROTOCOLS: Final = ("h11", "httptools")
#: The attribute of a hypercorn ``Config`` that selects this protocol.
_MARK: Final = "_trio_mcp_cancel_http"
_STREAM_ID: Final = 1
#: Pending items: a request head, a body chunk, a request's end, a hand-over.
_REQUEST, _BODY, _END, _HANDOVER = 0, 1, 2, 3
#: Request headers whose forms h11 checks more strictly than llhttp.
_WATCHED: Final = frozenset({b"host", b"transfer-encoding", b"content-length", b"upgrade"})
_EXPECT: Final = b"expect"
_CONNECTION: Final = b"connection"


class _HandOver(Exception):
    """Raised in a parser callback: the rest of the connection is h11's."""


def choose(config: Config, http: str) -> Config:
    """*config*, or a copy that selects the httptools protocol; checks *http*.

    Raises :class:`ValueError` for an unknown name and :class:`ImportError`
    naming the extra when httptools is missing.
    """
    if http not in HTTP_PROTOCOLS:
        raise ValueError(f"http must be one of {', '.join(HTTP_PROTOCOLS)}, not {http!r}")
    if http == "h11":
        return config
    if httptools is None:
        raise ImportError(
            "http='httptools' needs httptools: pip install 'trio-mcp-cancel[httptools]'"
        )
    chosen = copy.copy(config)
    setattr(chosen, _MARK, True)
    install()
    return chosen


def install() -> None:
    """Let hypercorn's ``ProtocolWrapper`` build this protocol for a marked config.

    ``ProtocolWrapper`` makes its HTTP/1.1 protocol by the module-level name
    ``hypercorn.protocol.H11Protocol``; this puts a factory under that name
    that builds :class:`HttptoolsProtocol` for a config :func:`choose` marked
    and hypercorn's own ``H11Protocol`` for any other.  Idempotent.
    """
    import hypercorn.protocol as wrapper_module

    if getattr(wrapper_module.H11Protocol, "_trio_mcp_cancel_factory", False):  # type: ignore[attr-defined]
        return
    wrapper_module.H11Protocol = _protocol_for  # type: ignore[attr-defined, assignment]


def _protocol_for(app: Any, config: Config, *args: Any) -> Any:
    if getattr(config, _MARK, False):
        return HttptoolsProtocol(app, config, *args)
    return _hypercorn_h11.H11Protocol(app, config, *args)


_protocol_for._trio_mcp_cancel_factory = True  # type: ignore[attr-defined]


class HttptoolsProtocol:
    """hypercorn's ``H11Protocol`` interface over httptools (see the module docstring)."""

    def __init__(
        self,
        app: Any,
        config: Config,
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
        self.limit: int = config.h11_max_incomplete_size
        self.raw_names: bool = config.h11_pass_raw_headers
        self.pending: deque[tuple[int, Any]] = deque()
        self.stream: HTTPStream | None = None
        self.fallback: Any = None  # hypercorn's H11Protocol, once handed over
        self.keep_alive_requests = 0
        # Invariant: `held` is every byte received since the last point where no
        # request was half-received, and `handover_ok` says no request that began
        # in them has been started; once one has, `held` is no longer kept and a
        # hand-over is impossible until the next such point.
        self.held = b""
        self.handover_ok = True
        self.in_message = False
        self.in_head = False
        self.head_bytes = 0  # received while a head is incomplete and `held` is not kept
        # the request being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._odd = False  # a header h11 checks more strictly
        self._hosts = 0
        self._framing = 0
        self._expect = False
        self._close = False
        # the request being answered.  Invariant: `busy` from its stream's
        # creation until recycled; `head` is a response head not yet written (a
        # Content-Length response waiting for its body); `chunked` and
        # `until_close` are the response's framing, set with its head.
        self.busy = False
        self.closed = False
        self.errored = False
        self.method = b"GET"
        self.http11 = True
        self.keep_alive = True
        self.request_done = False
        self.response_started = False
        self.response_done = False
        self.chunked = False
        self.head: bytes | None = None

    # -- httptools callbacks (synchronous, inside feed_data) -------------------------

    def on_message_begin(self) -> None:
        self.in_message = self.in_head = True
        self._url = b""
        self._headers = []
        self._odd = self._expect = self._close = False
        self._hosts = self._framing = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        self._headers.append((name if self.raw_names else lower, value.strip()))
        if lower in _WATCHED:
            if lower == b"host":
                self._hosts += 1
            elif lower == b"upgrade":
                self._odd = True
            else:
                self._framing += 1
                if lower == b"transfer-encoding" and value.strip().lower() != b"chunked":
                    self._odd = True
        elif lower == _EXPECT:
            self._expect = b"100-continue" in _tokens(value)
        elif lower == _CONNECTION:
            self._close = self._close or b"close" in _tokens(value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        parser = self.parser
        version = parser.get_http_version()
        method = parser.get_method()
        if (
            self._odd
            or self._framing > 1
            or method == b"CONNECT"
            or version not in ("1.1", "1.0")
            or (self._hosts != 1 and (version == "1.1" or self._hosts > 1))
        ):
            raise _HandOver
        self.pending.append(
            (_REQUEST, (method, version, self._url, self._headers, self._expect, self._close))
        )

    def on_body(self, body: bytes) -> None:
        self.pending.append((_BODY, body))

    def on_message_complete(self) -> None:
        self.in_message = False
        self.pending.append((_END, None))

    # -- hypercorn's protocol interface --------------------------------------------

    async def initiate(self) -> None:
        pass

    async def handle(self, event: Event) -> None:
        if self.fallback is not None:
            await self.fallback.handle(event)
        elif isinstance(event, RawData):
            if not self.errored:
                await self._receive(event.data)
        elif isinstance(event, Closed):
            self.closed = True
            await self.can_read.set()
            await self._close_stream()

    async def _receive(self, data: bytes) -> None:
        if self.handover_ok:
            self.held += data
        elif self.in_head:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            # what llhttp rejects, or a callback's _HandOver (HttpParserCallbackError)
            await self._hand_over_or_fail(400)
            return
        if self.in_head and (len(self.held) if self.handover_ok else self.head_bytes) > self.limit:
            await self._hand_over_or_fail(431)
            return
        await self._handle_events()
        if not self.in_message and self.fallback is None:
            # no request half-received: a hand-over would start from here
            self.held = b""
            self.handover_ok = True
            self.head_bytes = 0

    async def _hand_over_or_fail(self, status: int) -> None:
        """Give the held bytes to h11, or answer *status* and close (module docstring)."""
        if self.handover_ok:
            self.pending.clear()
            self.pending.append((_HANDOVER, self.held))
            self.held = b""
            await self._handle_events()
            return
        self.errored = True
        await self._handle_events()  # what parsed before the error
        if not self.response_started:
            await self._send_error_response(status)
        self.response_started = True
        await self.send(Closed())

    async def _handle_events(self) -> None:
        pending = self.pending
        while pending:
            kind, value = pending[0]
            if kind == _REQUEST or kind == _HANDOVER:
                if self.busy:
                    # pipelined: parsed, started once the answer before is written
                    await self.can_read.clear()
                    await self.can_read.wait()
                    if self.busy or self.closed:
                        return  # the connection is closing
                    continue
                pending.popleft()
                if kind == _HANDOVER:
                    await self._start_fallback(value)
                    return
                self.handover_ok = False
                self.held = b""
                await self.send(Updated(idle=False))
                await self._create_stream(*value)
            elif self.stream is None:
                pending.popleft()
            elif kind == _BODY:
                pending.popleft()
                await self.stream.handle(Body(stream_id=_STREAM_ID, data=value))
            else:
                pending.popleft()
                self.request_done = True  # before the await: the app may answer in it
                await self.stream.handle(EndBody(stream_id=_STREAM_ID))

    async def _start_fallback(self, data: bytes) -> None:
        fallback = _hypercorn_h11.H11Protocol(
            self.app,
            self.config,
            self.context,
            self.task_group,
            self.connection_state,
            self.ssl,
            self.client,
            self.server,
            self.send,
        )
        fallback.keep_alive_requests = self.keep_alive_requests
        self.fallback = fallback
        await fallback.initiate()
        if data:
            # may raise hypercorn's H2CProtocolRequiredError / H2ProtocolAssumedError,
            # which its ProtocolWrapper (our caller's caller) turns into HTTP/2
            await fallback.handle(RawData(data=data))

    async def _create_stream(
        self,
        method: bytes,
        version: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        expect: bool,
        close: bool,
    ) -> None:
        self.method = method
        self.http11 = version == "1.1"
        self.keep_alive = self.http11 and not close  # h11's _keep_alive
        self.request_done = self.response_started = self.response_done = False
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
            _STREAM_ID,
        )
        await self.stream.handle(
            Request(
                stream_id=_STREAM_ID,
                headers=headers,
                http_version=version,
                method=method.decode("ascii").upper(),
                raw_path=target,
                state=self.connection_state,
            )
        )
        self.keep_alive_requests += 1
        await self.context.mark_request()
        if expect and self.http11 and not self.response_started:
            # h11 sends it as soon as the request is in (hypercorn's _handle_events)
            head = _head(100, self.config.response_headers("h11"))
            await self.send(RawData(data=head))

    async def stream_send(self, event: StreamEvent) -> None:
        if self.errored and not isinstance(event, StreamClosed):
            return  # h11 drops what the app sends after the client's error
        if isinstance(event, Response):
            await self._send_response(event)
        elif isinstance(event, Body):
            data = event.data
            if self.chunked:
                if not data:
                    return
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
        elif isinstance(event, StreamClosed):
            await self._maybe_recycle()
        # InformationalResponse (HTTP/2 early hints) and EndData: nothing, as over h11
        elif not isinstance(event, InformationalResponse | EndData):  # pragma: no cover
            raise TypeError(f"unexpected stream event {event!r}")

    async def _send_response(self, event: Response) -> None:
        headers = list(chain(event.headers, self.config.response_headers("h11")))
        if event.status_code < 200:
            await self.send(RawData(data=_head(event.status_code, headers)))
            return
        if self.keep_alive_requests >= self.config.keep_alive_max_requests:
            headers.append((b"connection", b"close"))
        self.response_started = True
        self.head = self._response_head(event.status_code, headers)
        if self.chunked or self.until_close or self.method == b"HEAD":
            # no Content-Length body to wait for (a HEAD answer has no body)
            head, self.head = self.head, None
            await self.send(RawData(data=head))

    until_close = False

    def _response_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """h11's ``_clean_up_response_headers_for_sending``, its framing, and its writer."""
        names = [name.lower() for name, _ in headers]
        self.chunked = self.until_close = False
        need_close = False
        if status not in (204, 304) and (
            b"transfer-encoding" in names or b"content-length" not in names
        ):
            # a body of unknown length (a HEAD answer as a GET's would be)
            headers = [h for h, n in zip(headers, names, strict=True) if n != b"content-length"]
            headers = [h for h in headers if h[0].lower() != b"transfer-encoding"]
            if self.http11:
                headers.append((b"Transfer-Encoding", b"chunked"))
                self.chunked = self.method != b"HEAD"
            elif self.method != b"HEAD":
                need_close = self.until_close = True
        if not self.keep_alive or need_close:
            tokens = {
                t for name, value in headers if name.lower() == _CONNECTION for t in _tokens(value)
            }
            tokens.discard(b"keep-alive")
            tokens.add(b"close")
            headers = [h for h in headers if h[0].lower() != _CONNECTION]
            headers.extend((b"Connection", token) for token in sorted(tokens))
        elif b"close" in (t for n, v in headers if n.lower() == _CONNECTION for t in _tokens(v)):
            pass  # the response itself ends the connection (h11 keeps its header as is)
        else:
            return _head(status, headers)
        self.keep_alive = False
        return _head(status, headers)

    async def _send_error_response(self, status: int) -> None:
        headers = [(b"content-length", b"0"), (b"connection", b"close")]
        headers.extend(self.config.response_headers("h11"))
        await self.send(RawData(data=self._response_head(status, headers)))

    async def _maybe_recycle(self) -> None:
        await self._close_stream()
        if self.head is not None:  # a response ended without its EndBody
            head, self.head = self.head, None
            await self.send(RawData(data=head))
        if (
            not self.context.terminated.is_set()
            and not self.errored
            and self.request_done
            and self.response_done
            and self.keep_alive
        ):
            self.busy = self.response_started = False
            await self.can_read.set()
            await self.send(Updated(idle=True))
        else:
            self.closed = True
            await self.can_read.set()
            await self.send(Closed())

    async def _close_stream(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await stream.handle(StreamClosed(stream_id=_STREAM_ID))


def _tokens(value: bytes) -> list[bytes]:
    """h11's ``get_comma_header`` for one header value."""
    return [token for token in (t.strip() for t in value.lower().split(b",")) if token]


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    """h11's ``write_any_response``: no reason phrase, ``Host`` first."""
    lines = [b"HTTP/1.1 %d \r\n" % status]
    lines.extend(b"%s: %s\r\n" % (n, v) for n, v in headers if n.lower() == b"host")
    lines.extend(b"%s: %s\r\n" % (n, v) for n, v in headers if n.lower() != b"host")
    lines.append(b"\r\n")
    return b"".join(lines)
