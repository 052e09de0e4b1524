"""The modern era (2026-07-28) on the HTTP endpoint: every POST is self-contained.

Its ``_meta`` envelope, ``MCP-Protocol-Version``, ``Mcp-Method`` and
``Mcp-Name`` headers say everything; no session is needed or minted, and
**a client cancels by closing the request's stream**.  Notifications
POSTed on this wire (``notifications/cancelled`` included) are acknowledged
``202`` and ignored: honouring a client-chosen id would let one anonymous
caller cancel another's work.
"""

from __future__ import annotations

import attrs

from ..._core.namespace import GLOBAL_NAMESPACE, stateless
from ..._protocol.calls import RequestCall
from ..._protocol.exchange import Caller
from ..._wire import jsonrpc
from ..._wire.jsonrpc import JsonRpcError
from . import rules
from .answer import Post, Responder, Routed

__all__ = ["ModernEra"]


@attrs.define(eq=False)
class ModernEra:
    """Checks a modern POST and binds it to its call."""

    responder: Responder

    async def route(self, post: Post) -> Routed | None:
        """The call of a modern POST; ``None`` when it was answered already."""
        send, headers, message = post.send, post.headers, post.message
        if rules.is_notification(message):
            await self.responder.sink.respond(send, 202, b"")
            return None
        # The caller's namespace without a session is its tenant (worked out
        # once per POST by the app), or the global one.
        caller = Caller(
            stateless(GLOBAL_NAMESPACE if post.tenant is None else post.tenant),
            post.registry,
            principal=post.principal,
            tenant=post.tenant,
            network_transport="tcp",
            network_protocol="http",
        )
        try:
            if not isinstance(message, dict) or "id" not in message:
                raise jsonrpc.not_a_request(message)
            envelope = rules.modern_envelope(headers, message)
        except JsonRpcError as exc:
            # The dispatcher never sees this message: its id is checked here, once.
            exc.request_id = jsonrpc.request_id_of(message)
            self.responder.dispatcher.refuse(exc, message, caller)
            await self._error(post, exc)
            return None
        call = self.responder.prepare(message, caller, envelope)
        if not isinstance(call, RequestCall):
            # Rejected by the dispatcher, or a response (or notification)
            # carrying the modern envelope: not a request.
            error = getattr(call, "error", None)
            if not isinstance(error, JsonRpcError):
                error = jsonrpc.not_a_request(message)
            await self._error(post, error)
            return None
        if call.tool is not None:
            try:  # tools/call: x-mcp-header arguments must match their Mcp-Param-* headers
                arguments = call.request.params.get("arguments")
                rules.check_param_headers(headers, call.tool.input_schema, arguments)
            except JsonRpcError as exc:
                exc.request_id = call.request.id
                self.responder.dispatcher.refuse(exc, call.request, caller)
                await self._error(post, exc)
                return None
        return Routed(call, caller, [], "modern")

    async def _error(self, post: Post, exc: JsonRpcError) -> None:
        status = rules.status_for(exc.code, "modern")
        await self.responder.sink.respond(
            post.send, status, jsonrpc.encode(exc.to_message()), json=True
        )
