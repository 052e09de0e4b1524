"""The MCP Python SDK's per-request cancellation bookkeeping, for comparison.

Optional: ``mcp`` is not a dependency of this project, and :func:`load`
returns ``None`` when it is not installed (or has a layout this module does
not know).  Neither SDK generation exposes its bookkeeping as one callable,
so each timer below replays, statement for statement, what the SDK's own
code does around every inbound request, on the SDK's real classes, with the
handler, the transport and the response write left out (the same parts
``tracked()``'s measurement leaves out).

mcp 2.x (``mcp.shared.jsonrpc_dispatcher``), from
``JSONRPCDispatcher._dispatch_request`` and ``_handle_request``: build a
``_JSONRPCDispatchContext`` (which holds the ``cancel_requested`` event, the
polled flag's counterpart), an ``anyio.CancelScope``, file an ``_InFlight``
under ``coerce_request_id(id)`` in the dispatcher's ``_in_flight`` dict,
run inside the scope, then close the context, drop the entry (identity
guarded) and check ``cancel_requested``.

mcp 1.x (``mcp.shared.session``), from ``BaseSession._receive_loop`` and
the low-level server's ``_handle_message``: build a ``RequestResponder``
(which creates an ``anyio.CancelScope``), file it in ``_in_flight``, enter
it (a second ``anyio.CancelScope``), mark it completed (what ``respond()``
does before sending) and leave it, which pops it from ``_in_flight``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from dataclasses import dataclass
from typing import Any

from ._common import Timer

__all__ = ["SdkBookkeeping", "load"]


@dataclass(frozen=True)
class SdkBookkeeping:
    label: str
    timer: Timer


def load() -> SdkBookkeeping | None:
    """The SDK bookkeeping timer for the installed ``mcp``, or ``None``."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        return _load_v2(version)
    except (ImportError, AttributeError):
        pass
    try:
        return _load_v1(version)
    except (ImportError, AttributeError):
        return None


def _load_v2(version: str) -> SdkBookkeeping:
    anyio: Any = importlib.import_module("anyio")
    jrd: Any = importlib.import_module("mcp.shared.jsonrpc_dispatcher")
    coerce_request_id: Any = importlib.import_module("mcp.shared.dispatcher").coerce_request_id
    in_flight_cls: Any = jrd._InFlight
    context_cls: Any = jrd._JSONRPCDispatchContext
    cancel_scope_cls: Any = anyio.CancelScope

    async def timer(n: int) -> float:
        # The real dispatcher (its constructor only stores its arguments) so
        # the entries land in its real ``_in_flight`` dict.
        dispatcher = jrd.JSONRPCDispatcher(None, None)
        transport = jrd._default_transport_builder(None)
        in_flight = dispatcher._in_flight
        start = time.perf_counter()
        for i in range(n):
            # _dispatch_request
            dctx = context_cls(
                transport=transport,
                _dispatcher=dispatcher,
                _request_id=i,
                message_metadata=None,
                _progress_token=None,
            )
            scope = cancel_scope_cls()
            in_flight[coerce_request_id(i)] = in_flight_cls(scope=scope, dctx=dctx)
            # _handle_request
            with scope:
                try:
                    pass  # result = await on_request(dctx, req.method, req.params)
                finally:
                    dctx.close()
                    key = coerce_request_id(i)
                    if (entry := in_flight.get(key)) is not None and entry.dctx is dctx:
                        del in_flight[key]
                if not dctx.cancel_requested.is_set():
                    pass  # await self._write_result(req.id, result)
        elapsed = time.perf_counter() - start
        assert not in_flight
        return elapsed

    return SdkBookkeeping(
        f"mcp {version} `JSONRPCDispatcher` request bookkeeping (SDK classes, call sequence "
        "reproduced)",
        timer,
    )


def _load_v1(version: str) -> SdkBookkeeping:
    session: Any = importlib.import_module("mcp.shared.session")
    responder_cls: Any = session.RequestResponder

    async def timer(n: int) -> float:
        in_flight: dict[Any, Any] = {}

        def on_complete(responder: Any) -> None:
            in_flight.pop(responder.request_id, None)

        start = time.perf_counter()
        for i in range(n):
            # BaseSession._receive_loop
            responder = responder_cls(
                request_id=i,
                request_meta=None,
                request=None,
                session=None,
                on_complete=on_complete,
            )
            in_flight[responder.request_id] = responder
            # Server._handle_request: ``with responder:`` ... ``respond()``
            with responder:
                responder._completed = True
        elapsed = time.perf_counter() - start
        assert not in_flight
        return elapsed

    return SdkBookkeeping(
        f"mcp {version} `RequestResponder` + `_in_flight` (SDK class, call sequence reproduced)",
        timer,
    )
