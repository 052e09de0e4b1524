"""The HTTP app's part of authorization: the metadata responses and the per-message scope check.

The token itself is checked from the request head
(:meth:`~..._auth.resource.OAuthResource.authenticate`, before the body is
read); the scopes a message needs are known once the body is parsed: the
method's, and for ``tools/call`` the tool's (``@server.tool(scopes=...)``).
A message the token may not send is answered ``403`` before it reaches
the dispatcher, so it is never admitted, tracked or run.

**Expiry.**  What a token opened ends when the token expires (its ``exp``;
an introspected token's, as the server answered): a running call (and a
``subscriptions/listen`` stream) is cancelled, kind ``"server"``, with a
reason naming the expiry, so its client gets ``-32800``; a legacy GET
stream is ended cleanly.  The client carries on with a fresh token.  One
timer task (:class:`Expiries`, in the app's service nursery) serves every
request, so a call costs a heap entry, not a task.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import attrs
import trio

from ..._auth.resource import OAuthResource
from ..._auth.tokens import AccessToken
from ..._protocol.exchange import Exchange
from ..._protocol.registration import Registration
from ..._telemetry.names import TOKEN_EXPIRED
from .answer import Receive, Responder, Routed, Send

logger = logging.getLogger("trio_mcp_cancel.http")

__all__ = ["Expiries", "answer_until_expiry", "check_scopes", "expiry_of", "resource_metadata"]

_CORS = [
    # The metadata is public, and browser-based clients read it cross-origin.
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"GET, OPTIONS"),
    (b"access-control-allow-headers", b"mcp-protocol-version"),
]


def resource_metadata(
    resource: OAuthResource, method: str
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The answer to *method* at a Protected Resource Metadata path: status, body, headers."""
    if method in ("GET", "HEAD"):
        body = json.dumps(resource.metadata()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"cache-control", b"public, max-age=3600"),
            *_CORS,
        ]
        return 200, body if method == "GET" else b"", headers
    if method == "OPTIONS":
        return 204, b"", list(_CORS)
    return 405, b"Method Not Allowed", [(b"allow", b"GET, HEAD, OPTIONS")]


def check_scopes(
    resource: OAuthResource, registration: Registration, message: object, access: AccessToken
) -> None:
    """Refuse (:class:`~..._auth.resource.Refusal`, ``403``) a message *access* may not send."""
    if type(message) is not dict:
        return  # a batch or junk: the dispatcher answers it, and it runs no tool
    method = message.get("method")
    if not isinstance(method, str):
        return  # a response to the server's own request
    tool: frozenset[str] = frozenset()
    if method == "tools/call":
        params: Any = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if isinstance(name, str):
            tool = registration.tool_scopes.get(name, frozenset())
    resource.check(access, resource.needed(method, tool))


def expiry_of(access: object) -> tuple[float, str] | None:
    """When (Trio clock) what *access* opened must end, and the reason to give; ``None``:
    never (no token, or one without ``exp``)."""
    if not isinstance(access, AccessToken) or access.expires_at is None:
        return None
    expires_at = access.expires_at
    if not math.isfinite(expires_at):
        return None
    # exp is wall-clock time; timers run on Trio's clock: convert the time left.
    deadline = trio.current_time() + (expires_at - time.time())
    try:
        when = datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        when = f"{expires_at:g} (Unix time)"
    return deadline, TOKEN_EXPIRED + when


@attrs.define(eq=False)
class Expiries:
    """Actions to run at deadlines (Trio clock): one task for every token-bound request.

    :meth:`add` returns a handle for :meth:`discard` (the request ended
    first).  Discarded entries leave the heap lazily, but the heap is
    rebuilt when they outnumber the live ones, so its size follows the
    requests in flight, never the request rate.
    """

    _heap: list[tuple[float, int]] = attrs.field(factory=list)
    _actions: dict[int, Callable[[], object]] = attrs.field(factory=dict)
    _ids: itertools.count[int] = attrs.field(factory=itertools.count)
    _wake: trio.Event = attrs.field(factory=trio.Event)
    running: bool = False

    def add(self, deadline: float, action: Callable[[], object]) -> int:
        handle = next(self._ids)
        self._actions[handle] = action
        heap = self._heap
        if not heap or deadline < heap[0][0]:
            self._wake.set()  # the timer sleeps until a later deadline
        heapq.heappush(heap, (deadline, handle))
        return handle

    def discard(self, handle: int) -> None:
        if self._actions.pop(handle, None) is None:
            return
        heap = self._heap
        if len(heap) > 2 * len(self._actions) + 64:
            self._heap = [entry for entry in heap if entry[1] in self._actions]
            heapq.heapify(self._heap)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run each action at its deadline, for as long as the app runs."""
        self.running = True
        task_status.started()
        try:
            while True:
                heap = self._heap
                while heap and heap[0][0] <= trio.current_time():
                    action = self._actions.pop(heapq.heappop(heap)[1], None)
                    if action is not None:
                        _run(action)
                self._wake = trio.Event()
                with trio.move_on_at(heap[0][0] if heap else math.inf):
                    await self._wake.wait()
        finally:
            self.running = False


async def run_at(deadline: float, action: Callable[[], object]) -> None:
    """*action* at *deadline*: the timer of one request served without a lifespan."""
    await trio.sleep_until(deadline)
    _run(action)


def _run(action: Callable[[], object]) -> None:
    # The timer serves every request of the app (in its service nursery): a
    # bug in one action must not end the others' timers, or the app.
    try:
        action()
    except Exception:
        logger.exception("ending a request at its token's expiry failed")


async def answer_until_expiry(
    responder: Responder,
    expiries: Expiries,
    routed: Routed,
    receive: Receive,
    send: Send,
    access: object,
) -> None:
    """Answer *routed*, cancelling its call (kind ``"server"``) when *access* expires."""
    expiry = expiry_of(access)
    if expiry is None:
        await responder.answer(routed, receive, send)
        return
    deadline, reason = expiry
    exchange = Exchange()
    end = partial(exchange.cancel, reason, kind="server")
    if expiries.running:
        handle = expiries.add(deadline, end)
        try:
            await responder.answer(routed, receive, send, exchange)
        finally:
            expiries.discard(handle)
        return
    async with trio.open_nursery() as nursery:  # served without a lifespan
        nursery.start_soon(run_at, deadline, end)
        await responder.answer(routed, receive, send, exchange)
        nursery.cancel_scope.cancel()
