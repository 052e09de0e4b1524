"""``GET`` on a legacy session: its standalone SSE stream, and resuming a dropped stream.

A client's ``GET`` with its ``Mcp-Session-Id`` (and ``Accept:
text/event-stream``) opens the session's standalone stream: the server's
``notifications/{tools,prompts,resources}/list_changed``, and
``notifications/resources/updated`` for the URIs the session subscribed
to (``resources/subscribe``), from the server's
:class:`~..._protocol.subscriptions.SubscriptionHub`, the same fan-out
``subscriptions/listen`` uses, with its bounds: each open GET stream holds
one of the dispatcher's listen slots (``max_listen_streams`` per server,
``max_listen_streams_per_tenant``: more is ``429``), and one whose queue
overflows (a slow reader) is ended, as a listen stream is; the client
reconnects and re-lists.  One GET stream per session: a second one while
the first is connected is ``409``.  A stream opened with an OAuth token
that expires is ended (cleanly, not resumable) at the expiry: the client
opens a new one with a fresh token.  A server shutting down ends it too (the
response finishes), so it does not hold the shutdown.

With ``Last-Event-ID`` the GET instead resumes the stream that id names
(:mod:`.resume`): the events after it are replayed, then the stream goes
on live on this response, which ends when that stream ends (a call's
stream: once the call's answer was sent).  An id this session's streams
cannot serve (unknown, ended, or older than the replay buffer holds) is
``409`` with the reason; so is a second resume of a stream while another
resuming connection still carries it (a duplicated or retried GET: taking
the stream over would end the first response before its head, which
hypercorn turns into a ``500``), logged.  A resume does take over from the
call's own POST connection: that client came back on a new one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from typing import Any

import attrs
import trio

from ..._core.ratelog import RateLimitedLog
from ..._protocol.admission import LISTEN_LIMITS, over_limit
from ..._protocol.subscriptions import LegacyFilter, Listener
from ..._wire import jsonrpc
from ...backends.base import Backend
from . import rules, sse
from .answer import RETRY_AFTER, Responder
from .fanout import HubFanout
from .legacy import LegacyEra
from .relay import Relays
from .resume import ResumableStream, parse_event_id
from .rules import HttpError
from .sessions import Session
from .shared import SessionSharing, session_key
from .writer import ResponseWriter

__all__ = ["GetStreams"]

logger = logging.getLogger("trio_mcp_cancel.http")
_log = RateLimitedLog(logger)

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

LAST_EVENT_ID = "last-event-id"


@attrs.define(eq=False)
class GetStreams:
    """Serves legacy GETs; see the module docstring."""

    responder: Responder
    legacy: LegacyEra
    relays: Relays | None = None
    """With a shared backend: resuming streams that other workers run (:mod:`.relay`)."""

    @classmethod
    def build(
        cls,
        responder: Responder,
        legacy: LegacyEra,
        sharing: SessionSharing | None,
        backend: Backend | None,
    ) -> GetStreams:
        """The GET handling of an app; with a *backend*, its relays too."""

        def owned(session_key: str, stream_key: str) -> ResumableStream | None:
            session = sharing.local(session_key) if sharing is not None else None
            return None if session is None else session.streams.streams.get(stream_key)

        relays = None
        if backend is not None:
            service = partial(getattr, responder.sink, "service")
            limit, timeout = responder.max_buffered_bytes, responder.write_timeout
            relays = Relays(backend.bus, owned, service, limit, timeout)
        return cls(responder, legacy, relays)

    async def serve_backend(
        self, backend: Backend, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Across workers, for as long as the app runs: the hub's notifications
        (:mod:`.fanout`) and, with resumption on, the relays (:mod:`.relay`)."""
        fanout = HubFanout(self.responder.dispatcher.runtime.subscriptions, backend.bus)
        handlers = [fanout.on_bus]
        if self.relays is not None and self.responder.resume_window is not None:
            handlers.append(self.relays.on_bus)
        unsubscribes = [backend.bus.subscribe(handler) for handler in handlers]
        try:
            await fanout.run(task_status=task_status)
            await trio.sleep_forever()
        finally:
            for unsubscribe in unsubscribes:
                unsubscribe()

    async def get(
        self,
        headers: dict[str, str],
        principal: str | None,
        tenant: str | None,
        receive: Receive,
        send: Send,
        ends: tuple[float, str] | None = None,
    ) -> None:
        """Serve one GET (*ends*: when, on Trio's clock, the token that opened it
        expires, and why; see :mod:`.oauth`)."""
        if not rules.accepts(headers)[1]:
            raise HttpError(406, "Not Acceptable: a GET stream is text/event-stream")
        session = await self.legacy.session(headers, principal)
        assert session is not None
        responder = self.responder
        last = headers.get(LAST_EVENT_ID)
        if last is not None and responder.resume_window is not None:
            found = session.streams.find(last)
            parsed = parse_event_id(last)
            if found is None and parsed is not None and self.relays is not None:
                if await self.relays.carry(
                    session_key(session.id),
                    parsed[0],
                    parsed[1],
                    partial(self._open, send, start=True),
                    receive,
                    responder.keepalive_interval,
                ):
                    return
            if found is None or (found[0].standalone and found[0].ended):
                raise HttpError(409, "Conflict: Last-Event-ID names no stream this session holds")
            stream, after = found
            if not stream.can_resume(after):
                raise HttpError(409, "Conflict: the events after Last-Event-ID are no longer held")
            if not stream.standalone and stream.resume_in_progress():
                _log.log(
                    logging.INFO,
                    "concurrent",
                    "a second resume of a stream another connection resumes now: 409",
                )
                raise HttpError(409, "Conflict: another connection is resuming this stream")
            if stream.standalone:
                await self._standalone(session, tenant, receive, send, (stream, after), ends)
                return
            writer = self._open(send)
            if not stream.attach(writer, after):
                stream.detach(writer)
            await self._carry(stream, writer, receive)
            return
        await self._standalone(session, tenant, receive, send, None, ends)

    async def _standalone(
        self,
        session: Session,
        tenant: str | None,
        receive: Receive,
        send: Send,
        resume: tuple[ResumableStream, int] | None,
        ends: tuple[float, str] | None = None,
    ) -> None:
        """The session's notification stream (new, or *resume*\\ d after an event id)."""
        responder = self.responder
        current = session.streams.standalone()
        if current is not None and current.writer is not None:
            raise HttpError(409, "Conflict: this session's GET stream is already open")
        full = responder.admit_notification_stream(tenant)
        if full is not None:
            # A listen bound like subscriptions/listen's, so the same refusal (legacy code).
            bound = LISTEN_LIMITS[full[0]]
            refused = over_limit("legacy", "Too many notification streams", bound, full[1])
            raise HttpError.refusal(refused, RETRY_AFTER)
        hub = responder.dispatcher.runtime.subscriptions
        listener = hub.open(LegacyFilter(session.channel.resource_subscriptions))
        try:
            writer = self._open(send)
            if resume is not None:
                stream = resume[0]
                if not stream.attach(writer, resume[1]):
                    stream.detach(writer)
            else:
                if current is not None:
                    session.streams.close(current)
                limit, budget = responder.replay_limit, responder.stream_budget
                stream = session.streams.open(limit, standalone=True, budget=budget)
                stream.attach(writer)
                stream.prime()
            # A shutdown ends the stream (its response finishes) rather than
            # holding the server until its graceful timeout cuts it.
            forget = responder.shutdown.on_begin(partial(stream.emit, b"", final=True))
            try:
                await self._carry(stream, writer, receive, listener, ends)
            finally:
                forget()
            if stream.ended:
                session.streams.close(stream)  # a slow reader's, ended: it opens a new one
            elif stream.writer is None and responder.sink.service is not None:
                # Kept for a resume of what was in flight, for resume_window only
                # (and evictable meanwhile, like a finished call's stream).
                responder.stream_budget.retire(stream)
                responder.sink.service.start_soon(self._forget_later, session, stream)
        finally:
            hub.close(listener)
            responder.release_notification_stream(tenant)

    async def _forget_later(self, session: Session, stream: ResumableStream) -> None:
        """Drop a detached GET stream (and its buffer) nobody resumed within the window."""
        window = self.responder.resume_window
        if window is not None and await stream.wait_attached(window):
            return  # resumed: that GET forgets it in its turn
        session.streams.close(stream)

    def _open(self, send: Send, *, start: bool = False) -> ResponseWriter:
        """A writer with the SSE head queued (the body follows as it comes); *start*:
        running already, in the service nursery."""
        sink = self.responder.sink
        writer = sink.writer(send)
        writer.put({"type": "http.response.start", "status": 200, "headers": list(sse.SSE_HEADERS)})
        if start and sink.service is not None:
            sink.start(writer, sink.service)
        return writer

    async def _carry(
        self,
        stream: ResumableStream,
        writer: ResponseWriter,
        receive: Receive,
        listener: Listener | None = None,
        ends: tuple[float, str] | None = None,
    ) -> None:
        """Carry *stream* on this GET until it ends, its client goes, it is replaced,
        or (*ends*) the token that opened it expires."""
        closed = False  # stays so when the writer ended first (the nursery is cancelled)
        async with trio.open_nursery() as nursery:
            self.responder.sink.start(writer, nursery)
            nursery.start_soon(_end_when_written, writer, nursery.cancel_scope)
            if listener is not None:
                nursery.start_soon(_pump, listener, stream, writer)
            closed = await self._watch(stream, writer, receive, ends)
            nursery.cancel_scope.cancel()
        if closed:
            stream.disconnected(writer)  # a detach, or (final event queued) the delivery
        else:
            stream.detach(writer)
        if not writer.done and not stream.handed_over:
            writer.abandon()

    async def _watch(
        self,
        stream: ResumableStream,
        writer: ResponseWriter,
        receive: Receive,
        ends: tuple[float, str] | None = None,
    ) -> bool:
        """Until the client goes (``True``: it closed its connection), stops reading, or
        another GET took the stream over (or, once the token expired and the stream
        was ended, it is written)."""
        interval = self.responder.keepalive_interval
        keepalive_at = math.inf if interval is None else trio.current_time() + interval
        ends_at = math.inf if ends is None else ends[0]
        while stream.writer is writer:
            deadline = min(keepalive_at, writer.stall_at, ends_at)
            with trio.CancelScope(deadline=deadline) as wait:
                writer.wakes = wait
                if (await receive())["type"] == "http.disconnect":
                    return True
                continue
            now = trio.current_time()
            if now >= writer.stall_at:
                logger.info("client stopped reading its GET stream; dropping it")
                return False
            if ends is not None and now >= ends_at:
                # Ended like an overflowed stream: the final write closes the
                # response, then _end_when_written stops this watch.
                logger.info("ending a GET stream: %s", ends[1])
                ends_at = math.inf
                stream.emit(b"", final=True)
                continue
            if interval is not None and now >= keepalive_at:
                if not stream.keepalive(sse.KEEPALIVE):
                    return False
                keepalive_at = now + interval
        writer.wakes = None
        return False


async def _end_when_written(writer: ResponseWriter, scope: trio.CancelScope) -> None:
    await writer.wait_done()
    scope.cancel()


async def _pump(listener: Listener, stream: ResumableStream, writer: ResponseWriter) -> None:
    """The hub's notifications for this session, as events of its GET stream."""
    async for note in listener.receive:
        message = jsonrpc.notification_message(note["method"], note["params"])
        if not stream.emit(sse.event(message)):
            stream.detach(writer)  # too far behind: dropped like a slow listen stream
            return
    if listener.overflowed:
        logger.info("a GET stream fell too far behind its notifications; ending it")
        stream.emit(b"", final=True)
