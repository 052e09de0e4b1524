"""Asking the client from inside a tool: one call, both eras (``ctx.elicit`` and friends).

A tool awaits :meth:`~.context.Context.elicit` (or ``sample``,
``list_roots``) and gets the client's answer.  How the question travels
depends on the era of the request, never on the tool:

* **Legacy** (2025-11-25 and older, over HTTP with a session, stdio,
  WebSocket, memory): a JSON-RPC request with a server-made id is sent on
  the calling request's own stream (the path its progress takes, so the
  2025-11-25 rule that a request related to a client request travels on
  that request's stream holds), registered in the channel's bounded
  :class:`ClientRequests` table, and the tool waits for the response
  (:func:`ask_client`).  The wait is a *tracked* wait: the polled flag
  wakes it (``RequestCancelled``) and the hard cancel reaches it like any
  checkpoint; it has a timeout.  Whenever it ends without an answer (the
  tool's request was cancelled, the time ran out, the tool's own cancel
  scope), the client is sent ``notifications/cancelled`` for it, with the
  reason, so its dialog closes; an answer that comes later matches nothing
  and is ignored.

* **Modern** (2026-07-28): a server never sends requests.  The call
  raises :class:`InputRound`, which the tool runner turns into an
  ``input_required`` answer asking for exactly that input, its
  ``requestState`` carrying (sealed) every answer given so far.  The
  client retries; the tool is **run again from the start**, and each
  ``ctx.elicit`` returns the answers in call order, so the call that asked
  last time now returns the client's answer.  That is safe exactly when
  the tool does nothing irreversible before its last question: read,
  compute and ask first, act (write, send, charge) after.
  :class:`InputRound` is a ``BaseException`` (like ``trio.Cancelled``), so
  a tool that catches ``Exception`` around ``ctx.elicit`` lets it through.

Answers are values: an elicitation the user declined or dismissed is an
:class:`ElicitResult` with that ``action``.  A JSON-RPC error from the
client, a capability it did not declare (legacy) or a timeout is a
:class:`ClientRequestError`; nothing the client does makes the tool hang.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs
import trio

from .._core.errors import RequestCancelled
from .._core.request import TrackedRequest
from .client_table import ClientRequestError, ClientRequests, ClientRequestTimeout
from .exchange import SendMessage
from .mrtr import InputRequired

__all__ = [
    "DEFAULT_CLIENT_REQUEST_TIMEOUT",
    "INPUTS_STATE_KEY",
    "ElicitResult",
    "InputRound",
    "ask_client",
    "input_key",
    "mrtr_answers",
]

#: How long a tool waits for the client's answer by default (seconds): a
#: person may take a while to fill in a form.
DEFAULT_CLIENT_REQUEST_TIMEOUT: Final = 600.0
#: Where a modern round keeps the answers so far in its sealed ``requestState``.
INPUTS_STATE_KEY: Final = "trio_mcp_cancel/inputs"

ElicitAction = Literal["accept", "decline", "cancel"]


@attrs.frozen
class ElicitResult:
    """The answer to an elicitation: ``accept`` with *content*, or ``decline`` / ``cancel``."""

    action: ElicitAction
    content: Mapping[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> ElicitResult:
        action = result.get("action")
        if action not in ("accept", "decline", "cancel"):
            raise ClientRequestError(
                f"elicitation/create: the client's action {action!r} is not valid"
            )
        content = result.get("content")
        return cls(action, content if isinstance(content, dict) else None)


async def ask_client(
    table: ClientRequests,
    send: SendMessage,
    method: str,
    params: Mapping[str, Any],
    *,
    answer_within: float | None,
    request: TrackedRequest | None,
) -> dict[str, Any]:
    """Send one request to the client on *send* and return its result (legacy era).

    *request* is the tool's tracked request (``None``: not cancellable):
    its flag ends the wait with :class:`RequestCancelled`.  See the module
    docstring for what the client is told when the wait ends unanswered.
    """
    if request is not None and request.cancellation is not None:
        # A checkpoint first, as checkpoint_cancelled() does: a tool asking
        # again in a loop that ignores RequestCancelled still meets the hard cancel.
        await trio.lowlevel.checkpoint()
        raise RequestCancelled(request.cancellation.reason, request.cancellation.kind)
    pending = table.open()
    remove = request.on_cancelled(pending.wake.set) if request is not None else None
    why = "cancelled"
    try:
        await send({"jsonrpc": "2.0", "id": pending.id, "method": method, "params": dict(params)})
        with trio.move_on_after(math.inf if answer_within is None else answer_within):
            await pending.wake.wait()
        answer = pending.answer
        if answer is None:
            if request is not None and request.cancellation is not None:
                why = request.cancellation.reason or "request cancelled"
                raise RequestCancelled(request.cancellation.reason, request.cancellation.kind)
            why = f"no answer within {answer_within}s"
            raise ClientRequestTimeout(f"{method}: {why}")
        if answer.error is not None:
            raise _error(method, answer.error)
        if not isinstance(answer.result, dict):
            raise ClientRequestError(f"{method}: the client's result is not an object")
        return answer.result
    except trio.Cancelled:
        if request is not None and request.cancellation is not None:
            why = request.cancellation.reason or "request cancelled"
        raise
    finally:
        if remove is not None:
            remove()
        table.close(pending)
        if pending.answer is None:
            # Tell the client to stop: its dialog closes, its handler's
            # abort signal fires.  A queued write; shielded, as it must go
            # out while the tool unwinds from a hard cancel too.
            notice = {"requestId": pending.id, "reason": why}
            with trio.CancelScope(shield=True):
                await send(
                    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": notice}
                )


def _error(method: str, error: object) -> ClientRequestError:
    if not isinstance(error, dict):
        return ClientRequestError(f"{method}: the client answered with a malformed error")
    code = error.get("code")
    message = error.get("message")
    text = message if isinstance(message, str) else "error"
    return ClientRequestError(
        f"{method}: the client answered {code}: {text[:200]}",
        code if isinstance(code, int) else None,
        error.get("data"),
    )


# -- the modern era: one MRTR round per question ----------------------------------


def input_key(index: int) -> str:
    """The ``inputRequests`` key of the *index*-th question a tool asks (0-based)."""
    return f"ctx-{index}"


class InputRound(BaseException):
    """A modern ``ctx.elicit`` needs an answer: end this run with ``input_required``.

    Raised out of the tool and caught where the tool's result is made;
    carries the question and the answers so far (sealed in the state).

    A ``BaseException``, not an ``Exception``, for the reason
    ``trio.Cancelled`` is one: it is control flow, not a failure of the
    tool.  A tool body guarding its own work with ``try/except Exception``
    (common, and right for its failures) would otherwise swallow the
    question and break the round.  The library catches it by name (see
    :func:`~.context.run_target`); inside a nursery it makes a
    ``BaseExceptionGroup``, which :func:`~.context.only_rounds` reads.
    """

    def __init__(self, index: int, request: Mapping[str, Any], answers: list[Any]) -> None:
        super().__init__("the tool needs client input (MRTR round)")
        self.index = index
        self.request = request
        self.answers = answers

    def as_input_required(self) -> InputRequired:
        return InputRequired(
            {input_key(self.index): self.request}, {INPUTS_STATE_KEY: self.answers}
        )


def mrtr_answers(state: object, responses: Mapping[str, Any] | None) -> tuple[list[Any], Any]:
    """The answers a re-run tool's questions get, in order, and the state left for the tool.

    *state* is the verified ``requestState``: when it is a round of
    ``ctx.elicit`` it holds the answers so far (and the tool sees no state
    of its own); the retry's *responses* add the answer to the last question.
    """
    answers: list[Any] = []
    if isinstance(state, dict) and isinstance(state.get(INPUTS_STATE_KEY), list):
        answers = list(state[INPUTS_STATE_KEY])
        state = None
    if responses is not None and input_key(len(answers)) in responses:
        answers.append(responses[input_key(len(answers))])
    return answers, state
