"""The client's Streamable HTTP transport: one POST per message, over a pooled httpx2 client.

Each message is its own POST, and the answer comes back on that POST's
response, as one JSON body or as an SSE stream (progress, log messages,
server requests, then the answer).  Connections come from one
``httpx2.AsyncClient`` per MCP client (bounded pool, keep-alive, TLS,
proxies from the environment, an ``httpx2.Auth`` hook, HTTP/2 if asked),
so 1,000 calls open a handful of connections, not 1,000.

Cancellation stays what MCP says it is.  Modern era: the client *closes
the request's stream*, here by cancelling the task that reads that one
response.  On HTTP/1.1 a response closed before its end is never put
back in the pool (httpcore closes the connection), so the server sees the
disconnect at once and other requests are untouched; on HTTP/2 the stream
is reset (:mod:`._client.httpcore2_compat`, for the clients this module makes) and
the connection lives on.  Legacy
sessions (``initialize`` + ``Mcp-Session-Id``) post
``notifications/cancelled`` and stop reading once it was taken.

SSE is decoded by httpx2's own ``EventSource`` (derived from httpx-sse),
so comments (keep-alives), ``id`` and ``retry`` are understood.  Once a
stream brought its answer the caller has it at once, and the stream is
read on to its end (the server closes it right after the answer), within
:data:`DRAIN_TIME` and :data:`DRAIN_BYTES`: only a response read to its
end puts its HTTP/1.1 connection back in the pool, so streamed answers
reuse connections as JSON ones do; a server that keeps the stream open
past the bound costs that one connection, never a wait.  On a
legacy session a POST's stream that ends before its answer is resumed
with ``GET`` + ``Last-Event-ID`` after the server's ``retry`` delay
(MCP 2025-11-25, "Resumability and Redelivery"), a bounded number of
times; a modern stream is never resumed (its close *is* the cancel).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import attrs
import httpx2
import trio

from .._telemetry.propagation import trace_headers
from .._wire.names import (
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    LATEST_VERSION,
    NAME_BEARING,
    encode_header_value,
)
from .base import Receiver
from .calls import PendingCall, cancel_notification, deliver, fail
from .errors import McpTransportError, Message
from .httpcore2_compat import install

__all__ = ["HttpTransport", "Resumption", "client_for", "request_headers"]

logger = logging.getLogger("trio_mcp_cancel.client")

_JSON_ACCEPT = "application/json, text/event-stream"

WRITE_TIMEOUT = 30.0
"""Seconds one write to the server may take (an HTTP/2 write is not cancelled halfway)."""

DRAIN_TIME = 1.0
"""Seconds a stream is still read after it brought its answer, for its end.

The server ends the stream right after the answer, so the end is normally
already on its way; past this bound the response is closed, and its
connection with it (httpcore pools only a response read to its end).
The caller does not wait for it: the answer was delivered first.
"""

DRAIN_BYTES = 64 * 1024
"""Bytes a stream may still bring after its answer before it is closed (see :data:`DRAIN_TIME`)."""

BUSY_RETRIES = 2
"""Times a POST answered ``503`` with ``Retry-After`` is posted again before that is the answer.

A server that asks for a short wait (a legacy session it cannot confirm
while its backend is slow) gets it, a few times, never forever."""

CANCEL_DRAIN = 5.0
"""Legacy: seconds a cancelled call's stream is still read after the cancel was taken.

The server ends a cancelled call by cancelling the questions its tool had
pending (``notifications/cancelled`` on that same stream, so the client's
handler stops), then closes the stream; past this bound it is closed here.
"""


@attrs.frozen
class Resumption:
    """How a legacy SSE stream that ended early is resumed (``GET`` + ``Last-Event-ID``).

    *default_retry*: seconds to wait when the server sent no ``retry``;
    the server's ``retry`` is honoured within [0, *max_retry*];
    *max_attempts*: resumptions in a row that bring no event before the
    call fails.
    """

    default_retry: float = 1.0
    max_retry: float = 30.0
    max_attempts: int = 5

    def delay(self, retry_ms: int | None) -> float:
        if retry_ms is None:
            return self.default_retry
        return min(max(retry_ms / 1000, 0.0), self.max_retry)


def request_headers(
    message: Message,
    call: PendingCall | None,
    *,
    modern: bool,
    session_id: str | None,
    session_version: str | None,
) -> dict[str, str]:
    """The MCP headers of one outgoing POST (httpx2 adds the client's own).

    The one place an outgoing request's headers are made, the ``traceparent``
    its ``_meta`` carries included.  Modern: ``MCP-Protocol-Version``, ``Mcp-Method``,
    ``Mcp-Name`` and the call's ``Mcp-Param-*`` headers; legacy: the
    session and its negotiated version.
    """
    headers = {"Content-Type": "application/json", "Accept": _JSON_ACCEPT}
    headers.update(trace_headers(message))
    method = message.get("method")
    if modern:
        if isinstance(method, str):
            headers[HEADER_PROTOCOL_VERSION] = LATEST_VERSION
            if "id" in message:
                headers[HEADER_METHOD] = method
                params = message.get("params")
                key = NAME_BEARING.get(method)
                if key is not None and isinstance(params, dict):
                    value = params.get(key)
                    if isinstance(value, str):
                        headers[HEADER_NAME] = encode_header_value(value)
        if call is not None:
            headers.update(call.headers)
    else:
        if session_id is not None:
            headers[HEADER_SESSION_ID] = session_id
        if session_version is not None:
            headers[HEADER_PROTOCOL_VERSION] = session_version
    return headers


@attrs.define(eq=False)
class _Stream:
    """Where an SSE stream got to: the last event id and the server's ``retry``."""

    last_event_id: str | None = None
    retry_ms: int | None = None
    events: int = 0


@attrs.define(eq=False)
class _Open:
    """One request's POST in flight: the scope that closes it, and when it ended."""

    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    ended: trio.Event = attrs.field(factory=trio.Event)


@attrs.define(eq=False)
class HttpTransport:
    """POSTs the messages of one client engine to one MCP endpoint through *http*.

    A :class:`~._client.base.ClientTransport`; what comes back goes to
    *receiver*.  *http* is the pooled client (owned by whoever opened it).
    """

    url: str
    nursery: trio.Nursery
    http: httpx2.AsyncClient
    max_response: int = 16 * 1024 * 1024
    resumption: Resumption = attrs.field(factory=Resumption)
    session_id: str | None = None
    """The legacy session (``Mcp-Session-Id``), once ``initialize`` made one."""
    receiver: Receiver = attrs.field(kw_only=True)
    _streams: dict[int, _Open] = attrs.field(factory=dict)
    _session_started: trio.Event = attrs.field(factory=trio.Event)
    """Set (and replaced) whenever ``initialize`` gives a new session."""

    def __attrs_post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {self.url!r}")

    # -- what the engine calls -----------------------------------------------

    def transmit(self, message: Message, call: PendingCall | None) -> None:
        open_ = _Open()
        if call is not None:
            self._streams[call.id] = open_
        self.nursery.start_soon(self._post, message, call, open_)

    def cancel(self, call: PendingCall, reason: str | None) -> None:
        """Modern: close the request's stream.  Legacy: ``notifications/cancelled``, then close.

        In the legacy era a closed stream is not a cancel (servers SHOULD
        NOT read it as one), so the stream stays open until the cancel's own
        POST has been answered: the notification is what the server sees.
        It is read a little longer (at most :data:`CANCEL_DRAIN`), until the
        server ends it: the server cancels the questions the call's tool had
        pending on it, and the handlers answering them stop.
        """
        if call.finished:
            return  # MCP: never cancel what has finished (the id may be reused by then)
        open_ = self._streams.pop(call.id, None)
        if self.receiver.era != "legacy":
            if open_ is not None:
                open_.scope.cancel()
            return
        notification = cancel_notification(call.id, reason)
        self.nursery.start_soon(self._cancel_legacy, notification, open_)

    async def send(self, message: Message) -> None:
        """POST a message that expects no answer, and wait until the server took it.

        Every message is its own POST: waiting keeps a notification from
        being overtaken by the request that follows it.
        """
        await self._post(message, None, _Open())

    async def _cancel_legacy(self, notification: Message, stream: _Open | None) -> None:
        try:
            await self.send(notification)
            if stream is not None:
                with trio.move_on_after(CANCEL_DRAIN):
                    await stream.ended.wait()
        finally:
            if stream is not None:
                stream.scope.cancel()

    async def end_session(self, patience: float = 2.0) -> None:
        """Legacy: ``DELETE`` the session (best effort: a server may answer 405)."""
        if self.session_id is None:
            return
        with trio.move_on_after(patience) as scope:
            scope.shield = True
            with contextlib.suppress(httpx2.HTTPError):
                await self.http.delete(self.url, headers=self._session_headers())
        self.session_id = None

    async def listen(self) -> None:
        """Legacy: read the session's ``GET`` stream (server requests and notifications).

        A server that offers none answers 405, and that is the end of it;
        a stream that ends is resumed like a POST's.  When the session is
        renewed (after a ``404``) it listens on the new one.
        """
        state = _Stream()
        while True:
            session = self.session_id
            if session is None:
                await self._session_started.wait()
                state = _Stream()  # event ids belong to the old session
                continue
            headers = self._session_headers() | {"Accept": "text/event-stream"}
            if state.last_event_id is not None:
                headers["Last-Event-ID"] = state.last_event_id
            before = state.events
            try:
                async with self.http.stream("GET", self.url, headers=headers) as response:
                    status = response.status_code
                    if status == 200 and _is_sse(response):
                        await self._read_sse(response, None, state)
            except (httpx2.HTTPError, ValueError) as exc:
                logger.info("the GET stream of %s ended: %r", self.url, exc)
                return
            if status == 404:  # the session is gone: listen on the next one
                await self._session_started.wait()
                continue
            if status != 200:
                return  # 405: the server offers no GET stream
            if self.session_id != session:
                continue  # the session ended under the stream: listen on the next one
            if state.events == before and state.last_event_id is None:
                return
            await trio.sleep(self.resumption.delay(state.retry_ms))

    # -- one POST ------------------------------------------------------------

    def _session_headers(self) -> dict[str, str]:
        return request_headers(
            {},
            None,
            modern=False,
            session_id=self.session_id,
            session_version=self.receiver.session_version,
        )

    async def _post(self, message: Message, call: PendingCall | None, open_: _Open) -> None:
        scope = open_.scope
        try:
            with scope:
                await self._exchange(message, call)
        except McpTransportError as exc:
            self._lost(call, exc)
        except httpx2.ConnectError as exc:
            why = _why(exc)
            self._lost(call, McpTransportError(f"cannot connect to {self.url}: {why}"))
        except (httpx2.HTTPError, ValueError) as exc:
            why = _why(exc)
            self._lost(call, McpTransportError(f"HTTP exchange with {self.url} failed: {why}"))
        finally:
            open_.ended.set()
            if call is not None and self._streams.get(call.id) is open_:
                del self._streams[call.id]
        if call is not None and not call.finished and not scope.cancelled_caught:
            fail(call, McpTransportError("the response ended without an answer"))

    def _lost(self, call: PendingCall | None, failure: McpTransportError) -> None:
        if call is None:
            logger.warning("posting a notification failed: %s", failure)
        else:
            fail(call, failure)

    async def _exchange(self, message: Message, call: PendingCall | None) -> None:
        body = json.dumps(message).encode()
        headers = request_headers(
            message,
            call,
            modern=self.receiver.era == "modern",
            session_id=self.session_id,
            session_version=self.receiver.session_version,
        )
        for busy in range(BUSY_RETRIES + 1):
            async with self.http.stream(
                "POST", self.url, content=body, headers=headers
            ) as response:
                wait = await self._busy_wait(response) if busy < BUSY_RETRIES else None
                if wait is None:
                    stream, data = await self._receive(message, call, response)
            if wait is None:
                break
            logger.info("%s is busy (HTTP 503): retrying in %.1fs", self.url, wait)
            await trio.sleep(wait)
        if stream is not None:
            if call is not None and self.receiver.era == "legacy":
                await self._resume(call, stream)
            return
        if call is None:
            if response.status_code >= 400:
                logger.warning(
                    "%s answered HTTP %d to a notification", self.url, response.status_code
                )
            return
        answer: Any = None
        if data:
            with contextlib.suppress(ValueError):
                answer = json.loads(data)
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

    async def _receive(
        self, message: Message, call: PendingCall | None, response: httpx2.Response
    ) -> tuple[_Stream | None, bytes]:
        """Read *response* to *message*: its SSE stream (the stream) or its JSON body."""
        session = response.headers.get(HEADER_SESSION_ID)
        if message.get("method") == "initialize" and session is not None:
            self.session_id = session
            self._session_started.set()
            self._session_started = trio.Event()
        elif response.status_code == 404 and self.session_id is not None:
            # MCP: the server ended the session; the id is dead for good.
            self.session_id = None
            raise McpTransportError(
                "the server ended the session (HTTP 404)",
                {"status": 404, "session_ended": True},
            )
        stream = _Stream() if _is_sse(response) else None
        if stream is not None:
            await self._read_sse(response, call, stream)
            return stream, b""
        return None, await self._read_body(response)

    async def _busy_wait(self, response: httpx2.Response) -> float | None:
        """Seconds to wait before posting again, if *response* is a ``503`` that says when.

        A ``503`` with ``Retry-After`` (a session the server cannot confirm
        while its backend is slow, an authorization server backing off)
        means the request was not processed: posting it again later is
        safe.  Honoured within [0, ``max_retry``] of :class:`Resumption`.
        """
        if response.status_code != 503:
            return None
        try:
            wait = float(response.headers.get("retry-after", ""))
        except ValueError:
            return None  # no delay, or an HTTP date: not a retry we were invited to
        if not math.isfinite(wait):
            return None
        await self._read_body(response)  # small; the connection goes back to the pool
        return min(max(wait, 0.0), self.resumption.max_retry)

    async def _read_body(self, response: httpx2.Response) -> bytes:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_response:
                raise McpTransportError(f"response larger than {self.max_response} bytes")
        return bytes(body)

    async def _read_sse(
        self, response: httpx2.Response, call: PendingCall | None, state: _Stream
    ) -> None:
        """Read an SSE stream until it ends; once it brought *call*'s answer, drain it.

        The drain (bounded by :data:`DRAIN_TIME` and :data:`DRAIN_BYTES`)
        only lets the connection go back to the pool: the answer is already
        delivered.  It runs inside the request's scope, so a cancel still
        closes the stream at once; a call that is not answered is never
        drained (its cancel is the stream's close, on the modern era).
        """
        metered = _Metered(response)
        source = httpx2.EventSource(metered.as_response(), max_event_size=self.max_response)
        events: AsyncIterator[httpx2.ServerSentEvent] = source.__aiter__()
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                self._take(event, state)
                if call is not None and call.finished:
                    break
            else:
                return  # the stream ended
            metered.limit = response.num_bytes_downloaded + DRAIN_BYTES
            with trio.move_on_after(DRAIN_TIME) as drain:
                async for event in events:
                    self._take(event, state)
            if drain.cancelled_caught or metered.cut:
                logger.debug("%s kept a stream going after its answer: closed", self.url)

    def _take(self, event: httpx2.ServerSentEvent, state: _Stream) -> None:
        state.events += 1
        if event.id:
            state.last_event_id = event.id
        if event.retry is not None:
            state.retry_ms = event.retry
        if event.data:  # a priming event (an id, no data) carries no message
            self.receiver.receive_text(event.data)

    async def _resume(self, call: PendingCall, state: _Stream) -> None:
        """Legacy: the POST's stream ended before the answer; resume it by its last event id."""
        attempts = 0
        while not call.finished and not call.cancelled and state.last_event_id is not None:
            if attempts >= self.resumption.max_attempts:
                return
            attempts += 1
            await trio.sleep(self.resumption.delay(state.retry_ms))
            headers = self._session_headers() | {
                "Accept": "text/event-stream",
                "Last-Event-ID": state.last_event_id,
            }
            async with self.http.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200 or not _is_sse(response):
                    raise McpTransportError(
                        f"resuming the stream failed: HTTP {response.status_code}",
                        {"status": response.status_code},
                    )
                before = state.events
                await self._read_sse(response, call, state)
                if state.events > before:
                    attempts = 0


@attrs.define(eq=False)
class _Metered:
    """A response as ``EventSource`` reads it, ended early past a byte *limit*.

    ``EventSource`` reads ``aiter_text()`` whole; this stops that text once
    the response has downloaded more than *limit* bytes (``None``: no
    limit), so draining a stream is bounded in bytes, not only in time.
    Only what ``EventSource`` uses is here.
    """

    response: httpx2.Response
    limit: int | None = None
    cut: bool = False
    """The limit ended the text before the stream did."""

    @property
    def headers(self) -> httpx2.Headers:
        return self.response.headers

    @property
    def request(self) -> httpx2.Request:
        return self.response.request

    async def aiter_text(self) -> AsyncIterator[str]:
        texts = self.response.aiter_text()
        async with contextlib.aclosing(texts):  # type: ignore[type-var]
            async for text in texts:
                yield text
                if self.limit is not None and self.response.num_bytes_downloaded > self.limit:
                    self.cut = True
                    return

    def as_response(self) -> httpx2.Response:
        """This object, typed as what ``EventSource`` takes (it reads only these members)."""
        return cast("httpx2.Response", self)


def _why(exc: BaseException) -> str:
    """What went wrong, with the cause httpx2 wraps (its own message may be empty)."""
    cause = exc.__cause__ or exc.__context__
    return repr(exc) if str(exc) or cause is None else f"{exc!r} from {cause!r}"


def _is_sse(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def client_for(
    *,
    headers: Mapping[str, str] | None,
    auth: httpx2.Auth | None,
    verify: Any,
    cert: Any,
    http1: bool,
    http2: bool,
    max_connections: int,
    connect_timeout: float,
) -> httpx2.AsyncClient:
    """The pooled client of one MCP client (see :func:`trio_mcp_cancel.client.open_http_client`).

    No read timeout: a tool call or a stream may last; the caller's cancel
    scope bounds it.  Writes are bounded by :data:`WRITE_TIMEOUT`.  Proxies
    come from the environment (``trust_env``).
    """
    client = httpx2.AsyncClient(
        headers={"User-Agent": "trio-mcp-cancel", **dict(headers or {})},
        auth=auth,
        verify=verify,
        cert=cert,
        http1=http1,
        http2=http2,
        limits=httpx2.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        timeout=httpx2.Timeout(None, connect=connect_timeout, write=WRITE_TIMEOUT),
        trust_env=True,
    )
    if http2:
        install(client)  # a modern cancel resets the stream (:mod:`._client.httpcore2_compat`)
    return client
