"""A classified message as typed states, and the one argument every method handler takes.

:meth:`~.dispatcher.Dispatcher.prepare` turns a decoded message into exactly
one of four states (h11-style events, not a bag of optionals):

* :class:`Rejected`: answered at once with its error (bad shape, unknown
  method or tool, bad envelope, a capability the client lacks);
* :class:`NotificationCall`: a notification, handled without an answer;
* :class:`ClientResponseCall`: the client answering a server request (a
  ``ctx.elicit`` of the legacy era, matched in the channel's table);
* :class:`RequestCall`: a request bound to its method and, for
  ``tools/call`` and the other tracked methods, its tool or target, found once.

A handler receives one :class:`HandlerInput`: the server's configuration,
the request, who calls, its exchange, and how to report that it started.
It is allocated once per answered request, in place of a separate
``started`` callable, so the one argument costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .._wire import jsonrpc
from .._wire.jsonrpc import JsonRpcError
from .._wire.versions import Envelope, Era
from .exchange import Caller, Exchange
from .registration import Registration
from .runtime import ServerRuntime
from .tools import Tool

__all__ = [
    "ALL_ERAS",
    "CLIENT_RESPONSE",
    "LEGACY_ONLY",
    "MODERN_ONLY",
    "Call",
    "ClientResponseCall",
    "Handler",
    "HandlerInput",
    "Method",
    "NotificationCall",
    "RequestCall",
    "Rejected",
    "Target",
]

ALL_ERAS: Final[frozenset[Era]] = frozenset({"modern", "legacy"})
LEGACY_ONLY: Final[frozenset[Era]] = frozenset({"legacy"})
MODERN_ONLY: Final[frozenset[Era]] = frozenset({"modern"})


@attrs.define(eq=False, slots=True)
class Rejected:
    """A message answered at once with *error* (its ``request_id`` set when known).

    ``request`` is the request when the message was a well-formed one that
    cannot be served (unknown method or tool, bad envelope, a capability
    the client lacks), ``None`` when the message itself is malformed: HTTP
    answers the first like any request and the second with ``400``.
    """

    error: JsonRpcError
    request: jsonrpc.Request | None = None


@attrs.define(eq=False, slots=True)
class NotificationCall:
    """A notification: only ``notifications/cancelled`` does anything."""

    notification: jsonrpc.Notification


@attrs.define(eq=False, slots=True)
class ClientResponseCall:
    """A response from the client to a server request (see :mod:`.client_requests`)."""

    response: jsonrpc.ClientResponse | None = None


#: A :class:`ClientResponseCall` that carries nothing.
CLIENT_RESPONSE: Final = ClientResponseCall()


@attrs.define(eq=False, slots=True)
class RequestCall:
    """A request bound to what answers it.

    ``tool`` is the tool of a ``tools/call``, or the target of a method that
    runs tracked work (``resources/read``, ``prompts/get``,
    ``subscriptions/listen``); ``None`` for methods answered from memory.
    ``envelope`` is set exactly when the era is modern.
    """

    era: Era
    request: jsonrpc.Request
    method: Method
    tool: Tool | None = None
    envelope: Envelope | None = None
    tracked: bool = attrs.field(init=False)
    """Whether running it runs a cancellable tool (so it can be cancelled)."""
    long_lived: bool = attrs.field(init=False)
    """A ``subscriptions/listen`` stream: no call caps, no ``max_request_time``."""

    def __attrs_post_init__(self) -> None:
        # Both are read several times per call (admission, release, answering,
        # the transport): worked out once here rather than by a property each time.
        tool = self.tool
        self.tracked = tool is not None and tool.cancellable
        self.long_lived = self.request.method == "subscriptions/listen"


Call = Rejected | NotificationCall | ClientResponseCall | RequestCall
"""One classified message: exactly one of the four states."""


class HandlerInput:
    """Everything a method handler gets: one object, allocated once per answered request.

    ``started()`` reports ``task_status.started()`` exactly once: a handler
    that runs tracked work calls it once the request can be cancelled; the
    dispatcher calls it again (a no-op by then) when the answer is ready.
    """

    __slots__ = ("_status", "call", "caller", "exchange", "registration", "runtime")

    def __init__(
        self,
        registration: Registration,
        call: RequestCall,
        caller: Caller,
        exchange: Exchange,
        runtime: ServerRuntime,
        status: trio.TaskStatus[None] | None = None,
    ) -> None:
        self.registration = registration
        """What the server offers and its settings (:mod:`.registration`)."""
        self.call = call
        self.caller = caller
        self.exchange = exchange
        self.runtime = runtime
        """The server's runtime services (tasks, subscription hub, used MRTR states,
        the failure log), its dispatcher's (:mod:`.runtime`)."""
        self._status = status

    @property
    def request(self) -> jsonrpc.Request:
        return self.call.request

    @property
    def params(self) -> Mapping[str, Any]:
        return self.call.request.params

    @property
    def era(self) -> Era:
        return self.call.era

    def started(self) -> None:
        status, self._status = self._status, None
        if status is not None:
            status.started()

    def with_exchange(self, exchange: Exchange) -> HandlerInput:
        """The same request on another exchange (a task's), reporting no start."""
        return HandlerInput(self.registration, self.call, self.caller, exchange, self.runtime)


Handler = Callable[[HandlerInput], Awaitable[Any]]
"""A method handler: its result (a JSON object) or a raised :class:`JsonRpcError`."""

Target = Callable[[Registration, Mapping[str, Any]], Tool]
"""Finds the work of a tracked non-tool method while classifying (``-32602`` at once)."""


@attrs.frozen
class Method:
    """One entry of the method table."""

    handler: Handler
    eras: frozenset[Era] = ALL_ERAS
    ordered: bool = False
    """It changes the channel's state (``initialize``, ``logging/setLevel``),
    so a stream transport finishes it before reading the next message; any
    other request that is not a tracked tool runs concurrently with the reads."""
