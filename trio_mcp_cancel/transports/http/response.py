"""The lifecycle of one cancellable call's HTTP response, as one explicit state machine.

MCP lets the server answer each request with an SSE stream or one JSON
body.  When the client accepts SSE the choice is made lazily: a call that
finishes before it first suspends, having sent nothing, is answered with
one ``application/json`` body (one write, no chunked framing); the
response commits to SSE (its head queued) as soon as the call suspends,
sends a progress or log message, or must end without an answer (a
client-cancelled call ends its stream silently: MCP forbids any message
after a client's cancel).

The states, h11 style (:class:`State`, :class:`Event`, :data:`TRANSITIONS`):

========== ============ ==========================================================
state      event        next state
========== ============ ==========================================================
PENDING    COMMIT       STREAMING   (the SSE head is queued)
PENDING    FINISH       FINISHING   (one whole JSON body is queued)
PENDING    DISCONNECT   ABANDONED   (the client went before anything was queued)
PENDING    ABANDON      ABANDONED   (the request ended without an answer)
STREAMING  COMMIT       STREAMING   (committing twice is a no-op)
STREAMING  FINISH       FINISHING   (the stream's last event, or its end, is queued)
STREAMING  DISCONNECT   ABANDONED
STREAMING  ABANDON      ABANDONED
FINISHING  WRITTEN      DELIVERED   (the writer wrote the final message)
FINISHING  DISCONNECT   FINISHING   (the final message is queued: the writer decides)
FINISHING  ABANDON      ABANDONED   (the writer gave up, or was never let finish)
DELIVERED  DISCONNECT   DELIVERED   (too late to matter)
ABANDONED  any          ABANDONED   (the client is gone: whatever it would be sent is dropped)
========== ============ ==========================================================

Any other pair (writing the final message before it was queued, queueing
after the final message) is a bug in this package and raises
:class:`ResponseStateError`.

Invariants:

* PENDING: nothing is queued; the writer task is not running.
* STREAMING: the SSE head is queued (so the response is SSE for good) and
  the writer task runs; only SSE events are queued from now on.
* FINISHING: the final message is queued; nothing more will be.
* DELIVERED: the writer wrote every message, the final one included.
* ABANDONED: the answer never reached the client; the request reports it
  lost (``Exchange.lost``) when it ends.

:class:`ResponseMachine` is these rules and nothing else (no I/O, tested
without sockets); the one response object of a call,
:class:`~.answer.CallResponse`, is this machine with what each transition
writes and the watcher of the call's stream.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "OPEN",
    "TRANSITIONS",
    "Event",
    "ResponseMachine",
    "ResponseStateError",
    "State",
]


class State(enum.Enum):
    # Members are singletons: identity hashing is right, and a C slot (Enum's
    # own __hash__ is Python, and the table is looked up on every call).
    __hash__ = object.__hash__

    PENDING = "pending"
    STREAMING = "streaming"
    FINISHING = "finishing"
    DELIVERED = "delivered"
    ABANDONED = "abandoned"


class Event(enum.Enum):
    __hash__ = object.__hash__

    COMMIT = "commit"
    FINISH = "finish"
    WRITTEN = "written"
    DISCONNECT = "disconnect"
    ABANDON = "abandon"


_P, _S, _F = State.PENDING, State.STREAMING, State.FINISHING
_D, _A = State.DELIVERED, State.ABANDONED

#: The legal transitions (see the module docstring's table).
TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (_P, Event.COMMIT): _S,
    (_P, Event.FINISH): _F,
    (_P, Event.DISCONNECT): _A,
    (_P, Event.ABANDON): _A,
    (_S, Event.COMMIT): _S,
    (_S, Event.FINISH): _F,
    (_S, Event.DISCONNECT): _A,
    (_S, Event.ABANDON): _A,
    (_F, Event.WRITTEN): _D,
    (_F, Event.DISCONNECT): _F,
    (_F, Event.ABANDON): _A,
    (_D, Event.DISCONNECT): _D,
    **{(_A, event): _A for event in Event},
}

#: States in which the call may still queue messages.
OPEN: Final = frozenset({_P, _S})


class ResponseStateError(RuntimeError):
    """A transition the table does not allow: a bug in the HTTP transport."""


class ResponseMachine:
    """A response's state; :meth:`handle` is the only way it changes."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = State.PENDING

    def handle(self, event: Event) -> State:
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise ResponseStateError(f"{event.value} in state {self.state.value}") from None
        return self.state
