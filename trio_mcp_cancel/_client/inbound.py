"""What arrives from the server, sorted: answers, progress, logs, server requests, strays.

The receiving half of the client engine (:mod:`._client.engine` sends):
a transport hands every message it reads to the engine's ``inbound``, an
:class:`Inbound` (the :class:`~._client.base.Receiver` of the engine).  An
answer settles its :class:`~._client.calls.PendingCall`, a progress
notification lands on the call whose token it carries, a log message in
``log_messages``, a notification tagged with an open
``subscriptions/listen`` on that call; the server's ``ping`` is answered;
anything else is kept in ``unexpected``.

One answer needs an action: a ``CreateTaskResult`` for a ``tools/call``
the client had already cancelled (the server made the task before the
cancel reached it).  Nobody follows that task, so it is cancelled with
``tasks/cancel`` here, even when the call was forgotten already
(:meth:`Inbound.remember_abandoned`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from .._wire.names import META_SUBSCRIPTION_ID, METHOD_NOT_FOUND, Era
from .base import ClientTransport
from .calls import PendingCall, add_progress, deliver, fail
from .errors import McpTransportError, Message
from .handlers import ServerRequests

__all__ = ["MAX_KEPT", "Inbound", "InboundEngine"]

MAX_KEPT = 1000
"""Without ``keep_history``: the stray messages, log messages and abandoned
task calls kept at most (the newest)."""


class InboundEngine(Protocol):
    """What the receiving side reads of its engine (:class:`~._client.engine.ClientEngine`)."""

    @property
    def era(self) -> Era: ...
    @property
    def initialize_result(self) -> Message | None: ...
    @property
    def protocol_version(self) -> str: ...
    @property
    def calls(self) -> dict[int, PendingCall]: ...
    @property
    def unexpected(self) -> list[Message]: ...
    @property
    def log_messages(self) -> list[Message]: ...
    @property
    def keep_history(self) -> bool: ...
    @property
    def answer_server_requests(self) -> bool: ...
    @property
    def transport(self) -> ClientTransport | None: ...
    @property
    def server_requests(self) -> ServerRequests | None: ...

    def start_request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        capabilities: Mapping[str, Any] | None = None,
    ) -> PendingCall: ...


@attrs.define(eq=False)
class Inbound:
    """The engine's side of its transport; see the module docstring."""

    _engine: InboundEngine
    _abandoned_task_calls: dict[int, PendingCall] = attrs.field(init=False, factory=dict)
    """Cancelled ``tools/call``s that may have made a task before the cancel
    reached the server (without *keep_history* they are no longer in ``calls``)."""
    on_notification: Callable[[Message], None] | None = attrs.field(init=False, default=None)
    """Told every notification but progress, before it is kept, in the task that read it
    (so it must not block): a gateway relays log messages and fans list changes in with it."""

    @property
    def era(self) -> Era:
        return self._engine.era

    @property
    def session_version(self) -> str | None:
        engine = self._engine
        return None if engine.initialize_result is None else engine.protocol_version

    def remember_abandoned(self, call: PendingCall) -> None:
        """*call* was cancelled and forgotten; a task it made late is still cancelled."""
        if call.task_capabilities is None:
            return
        kept = self._abandoned_task_calls
        kept[call.id] = call
        while len(kept) > MAX_KEPT:
            del kept[next(iter(kept))]

    def fail_all(self, failure: McpTransportError) -> None:
        """The connection is gone: every call still waiting fails with *failure*."""
        for call in list(self._engine.calls.values()):
            fail(call, failure)

    def receive_text(self, text: str) -> None:
        """One message as text off the wire; what is not JSON is kept in ``unexpected``."""
        try:
            message = json.loads(text)
        except ValueError:
            self._keep(self._engine.unexpected, {"non-json": text[:200]})
            return
        self.receive(message)

    def receive(self, message: object) -> None:
        """One decoded message from the server."""
        engine = self._engine
        if not isinstance(message, dict):
            self._keep(engine.unexpected, {"non-object": message})
            return
        method = message.get("method")
        params = message.get("params")
        if method is None:
            self._answer(message)
        elif "id" in message:
            self._server_request(message)
        elif method != "notifications/progress" and self.on_notification is not None:
            self.on_notification(message)
            self._notification(message, method, params)
        elif method == "notifications/progress" and isinstance(params, dict):
            call = engine.calls.get(params.get("progressToken"))  # type: ignore[arg-type]
            if call is None or call.finished:
                self._keep(engine.unexpected, message)
            else:
                add_progress(call, params)
        else:
            self._notification(message, method, params)

    def _notification(self, message: Message, method: object, params: object) -> None:
        engine = self._engine
        if method == "notifications/message" and isinstance(params, dict):
            self._keep(engine.log_messages, params)
        elif method == "notifications/cancelled" and isinstance(params, dict):
            # The server cancels one of its requests to us (legacy): stop answering it.
            if engine.server_requests is not None:
                engine.server_requests.cancel(params.get("requestId"))
            self._keep(engine.unexpected, message)
        elif (call := self._subscription(params)) is not None:
            self._keep(call.notifications, message)
        else:
            self._keep(engine.unexpected, message)

    def _keep(self, kept: list[Message], message: Message) -> None:
        kept.append(message)
        if not self._engine.keep_history and len(kept) > MAX_KEPT:
            del kept[: len(kept) - MAX_KEPT]

    def _answer(self, message: Message) -> None:
        engine = self._engine
        call = engine.calls.get(message.get("id"))  # type: ignore[arg-type]
        if call is None or call.finished:
            self._keep(engine.unexpected, message)
            late = self._abandoned_task_calls.pop(message.get("id"), None)  # type: ignore[arg-type]
            if late is not None:
                self._cancel_late_task(late, message)
            return
        deliver(call, message)
        if call.cancelled:
            self._cancel_late_task(call, message)
        if call.detached and not engine.keep_history:
            engine.calls.pop(call.id, None)

    def _cancel_late_task(self, call: PendingCall, message: Message) -> None:
        """The answer to a cancelled call is a task: nobody follows it, so cancel it.

        The server made the task before the cancel reached it (one round trip
        of overlap).  The ``tasks/cancel`` is sent without waiting; its
        answer is dropped when it comes.
        """
        result = message.get("result")
        if call.task_capabilities is None or not isinstance(result, dict):
            return
        task_id = result.get("taskId")
        if result.get("resultType") != "task" or not isinstance(task_id, str):
            return
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            cancel = self._engine.start_request(
                "tasks/cancel", {"taskId": task_id}, capabilities=call.task_capabilities
            )
            cancel.detached = True

    def _subscription(self, params: object) -> PendingCall | None:
        """The open ``subscriptions/listen`` call a notification is tagged with, if any."""
        meta = params.get("_meta") if isinstance(params, dict) else None
        key = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        call = self._engine.calls.get(key) if isinstance(key, int) else None
        return call if call is not None and not call.finished else None

    def _server_request(self, message: Message) -> None:
        """A request from the server: elicitation, sampling and roots are answered
        by the client's handlers (:mod:`._client.handlers`) when it has one for
        it, ``ping`` is answered, anything else refused (without
        *answer_server_requests* those two are only kept in ``unexpected``)."""
        engine = self._engine
        serving = engine.server_requests
        if serving is not None and serving.handlers.handler(message.get("method")) is not None:
            serving.start(message)
            return
        if not engine.answer_server_requests:
            engine.unexpected.append(message)
            return
        if message.get("method") == "ping":
            reply: Message = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        else:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"},
            }
        if engine.transport is None:
            raise trio.ClosedResourceError("the client is closed")
        engine.transport.transmit(reply, None)
