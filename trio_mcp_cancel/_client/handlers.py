"""What the client answers when a server asks it for input: elicitation, sampling, roots.

A server asks in one of three ways, and the same registered handlers
answer all of them (as the TypeScript SDK v2 client does):

* modern era, MRTR (SEP-2322): a request's result is ``input_required``
  with ``inputRequests``; the client answers each and retries the request
  with ``inputResponses`` and the ``requestState`` echoed, at most
  :attr:`ClientHandlers.max_rounds` times (:meth:`ClientHandlers.answer_all`,
  driven by the engine);
* Tasks: a task in ``input_required`` carries ``inputRequests``; the
  answers go back with ``tasks/update`` (:mod:`._client.tasks`);
* legacy era: the server sends a JSON-RPC request (on a POST's SSE
  stream or the session's ``GET`` stream); the answer is a JSON-RPC
  response (:class:`ServerRequests`, fed by :mod:`._client.inbound`).

A handler is ``async def handler(params) -> result``: *params* are the
request's params, the result is the method's result (an ``ElicitResult``,
a ``CreateMessageResult``, a ``ListRootsResult``).  Raising
:class:`McpError` answers with that error; any other exception with an
internal error (logged), never a crash of the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from .._wire.names import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from .errors import McpError, Message

__all__ = ["ClientHandlers", "InputHandler", "ServerRequests", "complete_rounds"]

logger = logging.getLogger("trio_mcp_cancel.client")

InputHandler = Callable[[Message], Awaitable[Mapping[str, Any]]]
"""Answers one server request: its params in, its result out."""

_METHODS = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
_CAPABILITIES: dict[str, dict[str, Any]] = {
    "elicitation": {"form": {}},
    "sampling": {},
    "roots": {},
}


@attrs.frozen
class ClientHandlers:
    """The client's answers to input requests; see the module docstring.

    Each handler given is also declared as the client's capability
    (``elicitation``, ``sampling``, ``roots``), so a server knows it may
    ask.  *max_rounds* bounds the MRTR retries of one request and the
    ``tasks/update`` answers of one task: a server that keeps asking gets
    :class:`McpError` instead of a loop.  *max_concurrent*: legacy server
    requests answered at once (more are refused with an error).
    """

    elicitation: InputHandler | None = None
    sampling: InputHandler | None = None
    roots: InputHandler | None = None
    max_rounds: int = 10
    max_concurrent: int = 16

    def capabilities(self) -> dict[str, Any]:
        """The client capabilities these handlers declare."""
        return {
            name: dict(_CAPABILITIES[name])
            for name in ("elicitation", "sampling", "roots")
            if getattr(self, name) is not None
        }

    def handler(self, method: object) -> InputHandler | None:
        name = _METHODS.get(method) if isinstance(method, str) else None
        return None if name is None else getattr(self, name)

    async def answer(self, request: Mapping[str, Any]) -> Message:
        """The result for one input request (``{"method", "params"}``), or :class:`McpError`."""
        method = request.get("method")
        handler = self.handler(method)
        if handler is None:
            raise McpError(METHOD_NOT_FOUND, f"the client has no handler for {method!r}")
        params = request.get("params")
        if params is not None and not isinstance(params, dict):
            raise McpError(INVALID_PARAMS, "params must be an object")
        result = await handler(dict(params or {}))
        if not isinstance(result, Mapping):
            raise McpError(INTERNAL_ERROR, f"the {method} handler returned no result object")
        return dict(result)

    async def answer_all(self, requests: object) -> dict[str, Message]:
        """``inputResponses`` for ``inputRequests`` (key -> request): every one answered.

        One after another: an elicitation asks a person, and two questions
        at once are one too many.
        """
        if not isinstance(requests, dict):
            raise McpError(0, "inputRequests must be an object")
        responses: dict[str, Message] = {}
        for key, request in requests.items():
            if not isinstance(request, dict):
                raise McpError(0, f"input request {key!r} is not an object")
            responses[key] = await self.answer(request)
        return responses


@attrs.define(eq=False)
class ServerRequests:
    """Legacy server-to-client requests in flight, each answered in a task of *nursery*.

    The server may cancel one (``notifications/cancelled``): its handler
    is cancelled and nothing is answered, as MCP asks.
    """

    handlers: ClientHandlers
    nursery: trio.Nursery
    reply: Callable[[Message], None]
    _running: dict[object, trio.CancelScope] = attrs.field(factory=dict)

    def start(self, request: Message) -> None:
        request_id = request.get("id")
        if len(self._running) >= self.handlers.max_concurrent or request_id in self._running:
            self.reply(_error(request_id, INTERNAL_ERROR, "too many server requests at once"))
            return
        scope = trio.CancelScope()
        self._running[request_id] = scope
        self.nursery.start_soon(self._run, request, scope)

    def cancel(self, request_id: object) -> None:
        scope = self._running.pop(request_id, None)
        if scope is not None:
            scope.cancel()

    def cancel_all(self) -> None:
        """The connection is gone: no answer can reach the server, so stop answering."""
        for request_id in list(self._running):
            self.cancel(request_id)

    async def _run(self, request: Message, scope: trio.CancelScope) -> None:
        request_id = request.get("id")
        reply: Message | None = None
        try:
            with scope:
                try:
                    result = await self.handlers.answer(request)
                except McpError as exc:
                    reply = _error(request_id, exc.code, exc.message)
                except Exception as exc:
                    logger.exception("the %s handler failed", request.get("method"))
                    reply = _error(
                        request_id, INTERNAL_ERROR, f"the client's handler failed: {exc!r}"
                    )
                else:
                    reply = {"jsonrpc": "2.0", "id": request_id, "result": result}
        finally:
            self._running.pop(request_id, None)
        if reply is not None and not scope.cancelled_caught:
            self.reply(reply)


def _error(request_id: object, code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message[:500]}}


async def complete_rounds(
    handlers: ClientHandlers | None,
    result: Message,
    retry: Callable[[Message], Awaitable[Message]],
) -> Message:
    """Answer ``input_required`` results until the request completes (MRTR, SEP-2322).

    *retry* sends the same request again with the given extra params
    (``inputResponses``, ``requestState``).  Without handlers the
    ``input_required`` result is returned as it is, for the caller to
    handle; past *max_rounds* it is :class:`McpError`.
    """
    rounds = 0
    while result.get("resultType") == "input_required" and handlers is not None:
        rounds += 1
        if rounds > handlers.max_rounds:
            raise McpError(0, f"the server asked for input more than {handlers.max_rounds} times")
        extra: Message = {
            "inputResponses": await handlers.answer_all(result.get("inputRequests") or {})
        }
        if "requestState" in result:
            extra["requestState"] = result["requestState"]
        result = await retry(extra)
    return result
