"""Resuming a stream that another worker runs: its events relayed over the backend's bus.

With a shared backend a legacy session lives on every worker, so a client's
``GET`` with ``Last-Event-ID`` may reach another worker than the one that
runs the call (the *owner*, which holds the stream and its replay buffer:
they live with the call, and go with it).  That worker (the *resumer*)
asks on the bus (``stream.resume``, naming the session by its backend key,
the stream, the last event id and a fresh token); the owner attaches a
:class:`~.writer.ResponseWriter` whose ``send`` publishes each ASGI
message on the bus for that token (``stream.event``: first the head, which
is the owner's yes, then the replay and the live events, the answer last),
and the resumer writes them on its GET response.  When the resumer's
client goes, it says so (``stream.detach``) and the owner detaches that
writer, so the disconnect grace applies across workers exactly as on one.
No owner answering within :data:`ANSWER_TIMEOUT` (the stream ended, or its
worker died: the call died with it) is ``409``, as an unknown id is.

Bounds: the owner's writer has the usual output bound and write timeout
(a bus that cannot take the events detaches it); the resumer queues at
most :data:`INBOX` messages (more: its client is too slow, the GET ends);
each worker holds at most one relay per resuming GET.  Redis pub/sub is
at-most-once: a lost ``stream.detach`` leaves the owner believing the
stream attached until the call ends (its answer is then counted
delivered); a lost event leaves a hole the client cannot see.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import attrs
import trio

from ...backends.base import BackendUnavailable, BusMessage, CancelBus
from . import sse
from .resume import ResumableStream
from .writer import ResponseWriter

__all__ = ["ANSWER_TIMEOUT", "INBOX", "Relays"]

logger = logging.getLogger("trio_mcp_cancel.http")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Seconds a resumer waits for the owner of a stream to answer.
ANSWER_TIMEOUT: Final = 2.0
#: Relayed messages a resumer queues for its client.
INBOX: Final = 4096

RESUME, EVENT, DETACH, REFUSED = "stream.resume", "stream.event", "stream.detach", "stream.refused"
KINDS: Final = frozenset({RESUME, EVENT, DETACH, REFUSED})


def _bus_send(bus: CancelBus, token: str) -> Send:
    """An ASGI ``send`` that publishes each message for the resumer holding *token*."""

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            payload: BusMessage = {"type": EVENT, "to": token, "start": True}
        else:
            body: bytes = message.get("body", b"")
            more = bool(message.get("more_body", False))
            payload = {"type": EVENT, "to": token, "body": body.decode("latin-1"), "more": more}
        await bus.publish(payload)

    return send


@attrs.define(eq=False)
class Relays:
    """Both ends of the relays of one app; see the module docstring."""

    bus: CancelBus
    find: Callable[[str, str], ResumableStream | None]
    """The stream *(session key, stream key)* this worker owns, if any."""
    service: Callable[[], trio.Nursery | None]
    """The app's service nursery, where owner-side writers run (``None``: not serving)."""
    limit: int
    write_timeout: float | None
    owned: dict[str, tuple[ResumableStream, ResponseWriter]] = attrs.field(factory=dict)
    """Owner side: the relays this worker feeds, by token."""
    waiting: dict[str, trio.MemorySendChannel[BusMessage]] = attrs.field(factory=dict)
    """Resumer side: the GETs this worker carries, by token."""

    def on_bus(self, message: BusMessage) -> None:
        """A ``stream.*`` message of another worker (runs in the bus's task: never blocks)."""
        kind, token = message.get("type"), message.get("to") or message.get("token")
        if kind not in KINDS or not isinstance(token, str):
            return
        if kind in (EVENT, REFUSED):
            inbox = self.waiting.get(token)
            if inbox is not None:
                try:
                    inbox.send_nowait(message)
                except trio.WouldBlock:
                    inbox.close()  # too slow a client: its GET ends
                except trio.ClosedResourceError:
                    pass
        elif kind == RESUME:
            self._resume(message, token)
        elif kind == DETACH:
            owned = self.owned.pop(token, None)
            if owned is not None:
                owned[0].detach(owned[1])

    def _resume(self, message: BusMessage, token: str) -> None:
        session, key, after = message.get("session"), message.get("stream"), message.get("after")
        if not isinstance(session, str) or not isinstance(key, str) or not isinstance(after, int):
            return
        stream = self.find(session, key)
        service = self.service()
        if stream is None or service is None:
            return  # not ours (every worker hears the question)
        if stream.standalone or not stream.can_resume(after) or stream.resume_in_progress():
            service.start_soon(self._publish, {"type": REFUSED, "to": token})
            return
        writer = ResponseWriter(_bus_send(self.bus, token), self.limit)
        writer.outbox.timeout = self.write_timeout
        writer.put({"type": "http.response.start"})
        self.owned[token] = (stream, writer)
        if not stream.attach(writer, after):
            stream.detach(writer)
        service.start_soon(self._run, token, writer)

    async def _run(self, token: str, writer: ResponseWriter) -> None:
        try:
            await writer.run()
        finally:
            owned = self.owned.get(token)
            if owned is not None and owned[1] is writer:
                del self.owned[token]

    async def _publish(self, message: BusMessage) -> None:
        try:
            await self.bus.publish(message)
        except BackendUnavailable as exc:
            logger.debug("stream relay message not sent: %s", exc)

    # -- the resumer's side ----------------------------------------------------

    async def carry(
        self,
        session: str,
        key: str,
        after: int,
        open_writer: Callable[[], ResponseWriter],
        receive: Receive,
        keepalive_interval: float | None,
    ) -> bool:
        """Carry the remote stream on this GET; ``False`` when no worker holds it whole."""
        if not self.bus.shared:
            return False
        token = secrets.token_hex(12)
        send_channel, inbox = trio.open_memory_channel[BusMessage](INBOX)
        self.waiting[token] = send_channel
        writer: ResponseWriter | None = None
        try:
            question = {
                "type": RESUME,
                "session": session,
                "stream": key,
                "after": after,
                "token": token,
            }
            try:
                await self.bus.publish(question)
            except BackendUnavailable as exc:
                logger.debug("cannot ask the other workers for a stream: %s", exc)
                return False
            first: BusMessage | None = None
            with trio.move_on_after(ANSWER_TIMEOUT):
                first = await inbox.receive()
            if first is None or first.get("type") != EVENT or not first.get("start"):
                return False
            writer = open_writer()
            await self._relay(writer, inbox, receive, keepalive_interval)
            return True
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return writer is not None
        finally:
            self.waiting.pop(token, None)
            send_channel.close()
            if writer is None or not writer.done or writer.abandoned:
                with trio.CancelScope(shield=True), trio.move_on_after(ANSWER_TIMEOUT):
                    await self._publish({"type": DETACH, "token": token})
            if writer is not None and not writer.done:
                writer.abandon()

    async def _relay(
        self,
        writer: ResponseWriter,
        inbox: trio.MemoryReceiveChannel[BusMessage],
        receive: Receive,
        keepalive_interval: float | None,
    ) -> None:
        async with trio.open_nursery() as nursery:
            done = nursery.cancel_scope

            async def pump() -> None:
                async for message in inbox:
                    body = message.get("body")
                    if not isinstance(body, str):
                        continue
                    final = not message.get("more", True)
                    data: dict[str, Any] = {
                        "type": "http.response.body",
                        "body": body.encode("latin-1"),
                        "more_body": not final,
                    }
                    if not writer.put(data, final=final):
                        break  # too slow a client
                    if final:
                        await writer.wait_done()
                        break
                done.cancel()

            async def watch() -> None:
                interval = keepalive_interval
                at = math.inf if interval is None else trio.current_time() + interval
                while True:
                    with trio.move_on_at(at):
                        if (await receive())["type"] == "http.disconnect":
                            break
                        continue
                    assert interval is not None
                    keepalive = {"type": "http.response.body", "body": sse.KEEPALIVE}
                    writer.put({**keepalive, "more_body": True})
                    at = trio.current_time() + interval
                done.cancel()

            nursery.start_soon(pump)
            nursery.start_soon(watch)
