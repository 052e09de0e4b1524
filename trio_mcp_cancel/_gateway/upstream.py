"""One mounted upstream: its connection for the gateway's serving lifetime, and its calls.

:meth:`Upstream.run` is a service of the gateway server
(``runtime.services``, started by every transport before it serves): it
connects (:mod:`.targets`), lists what the upstream offers and serves it
under the namespace (:mod:`.catalogue`), then watches the connection: a
``ping`` every ``ping_interval`` seconds of quiet, a call that found the
connection broken, or an in-process upstream that stopped, ends the
session, and it reconnects after a backoff (doubling from
``reconnect_initial`` up to ``reconnect_max``, back to the start once a
session came up).  While it is down its items stay listed and each call
answers a clear error naming the upstream (a tool error for tools, a
JSON-RPC error for reads and prompts); the rest of the gateway serves on.

**Fan-in.**  The upstream's list changes re-list it (and the gateway's
listeners are told); its ``notifications/resources/updated`` reach the
gateway's subscribers under the prefixed URI.  A modern upstream is asked
for them with ``subscriptions/listen``; a legacy one sends list changes
unasked and is sent ``resources/subscribe`` for its resources (at most
:data:`MAX_SUBSCRIBED`).

**A call across the hop** runs in the gateway's tracked request: the
client's cancel forwarding (a flag set by any cancel of the gateway's
caller: ``notifications/cancelled``, a closed stream or connection,
``tasks/cancel``, a time limit, shutdown) cancels the upstream request at
once in the upstream's own form, and the client's ids are its own.  What
comes back during the call is relayed to the caller (:mod:`.relay`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import attrs
import trio

from .._client.errors import McpError, McpTransportError
from .._protocol.content import ToolError, ToolResult
from .._protocol.context import Context
from .._protocol.prompts import PromptMessage
from .._protocol.registration import Registration
from .._protocol.resources import ResourceData
from .._wire.jsonrpc import JsonRpcError
from .._wire.names import INTERNAL_ERROR
from ..client import McpClient
from .catalogue import Catalogue, decode_contents, list_upstream
from .names import prefixed_uri
from .relay import Relay, RelayRoutes
from .targets import Era, Target, describe_target, open_target

__all__ = ["MAX_SUBSCRIBED", "MIN_RESYNC_INTERVAL", "Upstream", "UpstreamOptions"]

logger = logging.getLogger("trio_mcp_cancel.gateway")

MAX_SUBSCRIBED: Final = 100
"""Upstream resources the gateway subscribes to (their updates fan in), at most."""
MIN_RESYNC_INTERVAL: Final = 1.0
"""Seconds between two listings of an upstream that announced changes."""
_LIST_CHANGED: Final = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
    }
)


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive")


@attrs.frozen(kw_only=True)
class UpstreamOptions:
    """How a mount connects and what it takes from the upstream (``McpServer.mount``'s keywords)."""

    era: Era = attrs.field(
        default="auto", validator=attrs.validators.in_(("modern", "legacy", "auto"))
    )
    connect_timeout: float = attrs.field(default=10.0, validator=_positive)
    """Seconds to connect, shake hands and list, before the attempt counts as failed."""
    ping_interval: float = attrs.field(default=10.0, validator=_positive)
    """Seconds of quiet between health pings (a ping unanswered as long ends the session)."""
    reconnect_initial: float = attrs.field(default=0.5, validator=_positive)
    reconnect_max: float = attrs.field(default=30.0, validator=_positive)
    max_items: int = attrs.field(default=1000, validator=_positive)
    """Items of each list (tools, resources, templates, prompts) taken, at most."""
    max_listing_bytes: int = attrs.field(default=4 << 20, validator=_positive)
    """Bytes of JSON of each list taken, at most."""
    client_options: Mapping[str, Any] = attrs.field(factory=dict)
    """Passed to the client: ``headers``, ``auth`` for a URL; ``env``, ``cwd``, ``stderr``
    for a command."""


@attrs.define(eq=False)
class Upstream:
    """One mounted upstream; see the module docstring.  Returned by ``McpServer.mount``."""

    target: Target
    namespace: str | None
    options: UpstreamOptions
    registration: Registration
    label: str = attrs.field(init=False)
    # Invariant: exactly one of ``client`` and ``error`` is None; ``connected`` is set
    # exactly while ``client`` is not None (a loss replaces it with a new, unset event).
    client: McpClient | None = attrs.field(init=False, default=None)
    """The connected client (``None`` while the upstream is down)."""
    error: str | None = attrs.field(init=False, default="not connected yet")
    """Why the upstream is down (``None`` while it is up)."""
    connected: trio.Event = attrs.field(init=False, factory=trio.Event)
    """Set while a session is up (a new event after each loss)."""
    sessions: int = attrs.field(init=False, default=0)
    routes: RelayRoutes = attrs.field(init=False)
    catalogue: Catalogue = attrs.field(init=False)
    _lost: trio.Event = attrs.field(init=False, factory=trio.Event)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    # Invariant: ``_resync`` set implies ``_wake`` set (the watcher re-lists within one
    # wake-up, at most once per second after ``_last_resync``).
    _resync: bool = attrs.field(init=False, default=False)
    _last_resync: float = attrs.field(init=False, default=-math.inf)
    _listening: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)
    resyncs: int = attrs.field(init=False, default=0)
    """Listings after a change the upstream announced."""

    def __attrs_post_init__(self) -> None:
        shown = "(proxy)" if self.namespace is None else repr(self.namespace)
        self.label = f"upstream {shown} ({describe_target(self.target)})"
        self.routes = RelayRoutes(self.label)
        self.catalogue = Catalogue(self.registration, self.namespace, self)

    # -- the connection ----------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, reconnect, until cancelled; started once the first attempt ended."""
        delay = self.options.reconnect_initial
        reported = False

        def ready() -> None:
            nonlocal reported, delay
            delay = self.options.reconnect_initial
            if not reported:
                reported = True
                task_status.started()

        while True:
            try:
                await self._session(ready)
            except Exception as exc:  # whatever the target did; trio.Cancelled is not one
                self.error = _reason(exc)
            finally:
                self.client = None
                if self.connected.is_set():
                    self.connected = trio.Event()
            logger.warning(
                "%s is unreachable: %s; retrying in %.1fs", self.label, self.error, delay
            )
            if not reported:
                reported = True
                task_status.started()
            await trio.sleep(delay)
            delay = min(delay * 2, self.options.reconnect_max)

    async def _session(self, ready: Callable[[], None]) -> None:
        options = self.options
        lost = self._lost = trio.Event()
        with trio.CancelScope(deadline=trio.current_time() + options.connect_timeout) as scope:
            async with open_target(
                self.target,
                era=options.era,
                handlers=self.routes.handlers(),
                log_level="debug",  # everything: each caller's own level filters (ctx.log)
                lost=lost,
                client_options=options.client_options,
            ) as client:
                client.inbound.on_notification = self._notification
                listing = await list_upstream(
                    client, self.label, options.max_items, options.max_listing_bytes
                )
                scope.deadline = math.inf
                self.catalogue.apply(listing)
                self.client, self.error = client, None
                self.sessions += 1
                self.connected.set()
                logger.info("%s connected (%s era)", self.label, client.era)
                ready()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._listen, client)
                    await self._watch(client, lost)
                    nursery.cancel_scope.cancel()
        if scope.cancelled_caught:
            self.error = f"no answer within {options.connect_timeout}s"
        elif self.error is None:
            self.error = "the connection was lost"

    async def _watch(self, client: McpClient, lost: trio.Event) -> None:
        """Return when the session is over: lost, or a ping unanswered."""
        interval = self.options.ping_interval
        while not lost.is_set():
            with trio.move_on_after(interval) as quiet:
                await self._wake.wait()
            self._wake = trio.Event()
            if lost.is_set():
                return
            if quiet.cancelled_caught:
                with trio.move_on_after(interval) as late:
                    try:
                        await client.request("ping")
                    except McpTransportError as exc:
                        self.error = _reason(exc)
                        return
                    except McpError:
                        pass  # an answer, even an error, is a live server
                if late.cancelled_caught:
                    self.error = f"no answer to a ping within {interval}s"
                    return
            if self._resync:
                await self._relist(client)

    async def _relist(self, client: McpClient) -> None:
        """List the upstream again after it said its lists changed: at most once per
        :data:`MIN_RESYNC_INTERVAL` (an upstream announcing changes in a loop costs one
        listing a second), and listen again for the resources now listed."""
        await trio.sleep_until(self._last_resync + MIN_RESYNC_INTERVAL)
        self._resync = False
        self._last_resync = trio.current_time()
        self.resyncs += 1
        self.catalogue.apply(
            await list_upstream(
                client, self.label, self.options.max_items, self.options.max_listing_bytes
            )
        )
        self._listening.cancel()

    async def _listen(self, client: McpClient) -> None:
        """Ask the upstream for its changes (see the module docstring), again after each
        listing; an upstream that ends the stream is listed again (a change may be lost)."""
        while True:
            with trio.CancelScope() as self._listening:
                if not await self._listen_once(client):
                    return
                self._resync = True
                self._wake.set()
                await trio.sleep(MIN_RESYNC_INTERVAL)

    async def _listen_once(self, client: McpClient) -> bool:
        """One listen stream until it ends; ``False``: the upstream has none."""
        uris = list(self.catalogue.resources.values())[:MAX_SUBSCRIBED]
        if client.era == "legacy":
            # List changes come unasked; resource updates need a subscription each.
            for uri in uris:
                with contextlib.suppress(McpError):
                    await client.request("resources/subscribe", {"uri": uri})
            await trio.sleep_forever()
        wanted: dict[str, Any] = {
            "toolsListChanged": True,
            "promptsListChanged": True,
            "resourcesListChanged": True,
        }
        if uris:
            wanted["resourceSubscriptions"] = uris
        call = client.start_request("subscriptions/listen", {"notifications": wanted})
        try:
            await call.result()
        except McpError:
            return False  # no listen here: list changes are then not fanned in
        finally:
            if not call.finished:
                call.cancel_nowait("the gateway listens again")
        return True

    def _notification(self, message: dict[str, Any]) -> None:
        """An upstream notification (runs in the client's reading task: never blocks)."""
        method = message.get("method")
        params = message.get("params")
        if method in _LIST_CHANGED:
            self._resync = True
            self._wake.set()
        elif method == "notifications/resources/updated" and isinstance(params, dict):
            uri = prefixed_uri(self.namespace, params.get("uri"))
            if uri is not None and uri in self.catalogue.resources:
                self.registration.changed("notifications/resources/updated", {"uri": uri})
        elif method == "notifications/message":
            if not self.routes.notify(message):
                logger.debug("%s logged outside any call: %r", self.label, str(params)[:500])

    def lose(self, why: str) -> None:
        """A call found the connection broken: end the session (it reconnects)."""
        if self.client is not None:
            self.error = why
        self._lost.set()
        self._wake.set()

    # -- calls across the hop --------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _calling(self, ctx: Context, *, tool: bool) -> AsyncIterator[tuple[McpClient, Relay]]:
        client = self.client
        if client is None:
            raise _failure(f"{self.label} is unreachable: {self.error}", tool=tool)
        relay = Relay(ctx, self.label)
        self.routes.active.add(relay)
        try:
            async with relay.running():
                yield client, relay
        except McpTransportError as exc:
            self.lose(_reason(exc))
            raise _failure(f"{self.label} is unreachable: {_reason(exc)}", tool=tool) from None
        except McpError as exc:
            raise _failure(
                f"{self.label}: {exc.message}"[:1000], tool=tool, code=exc.code
            ) from None
        finally:
            self.routes.active.discard(relay)

    async def call_tool(self, ctx: Context, name: str, arguments: dict[str, Any]) -> ToolResult:
        """``tools/call`` of the upstream's *name*, on behalf of the gateway's caller."""
        async with self._calling(ctx, tool=True) as (client, relay):
            result = await client.call_tool(name, arguments, progress=relay.progress)
        content = result.get("content")
        structured = result.get("structuredContent")
        meta = result.get("_meta")
        return ToolResult(
            content=content if isinstance(content, list) else [],
            structured=structured if isinstance(structured, dict) else None,
            is_error=result.get("isError") is True,
            meta=meta if isinstance(meta, dict) else None,
        )

    async def read(self, ctx: Context, uri: str) -> list[ResourceData]:
        """``resources/read`` of the upstream's *uri*; contents under the gateway's URIs."""
        async with self._calling(ctx, tool=False) as (client, _):
            result = await client.request("resources/read", {"uri": uri})
            return decode_contents(result.get("contents"), self.namespace, self.label)

    async def get_prompt(
        self, ctx: Context, name: str, arguments: dict[str, Any]
    ) -> list[PromptMessage]:
        """``prompts/get`` of the upstream's *name*."""
        async with self._calling(ctx, tool=False) as (client, _):
            result = await client.request("prompts/get", {"name": name, "arguments": arguments})
        messages = result.get("messages")
        return [
            PromptMessage("assistant" if m.get("role") == "assistant" else "user", m.get("content"))
            for m in (messages if isinstance(messages, list) else [])
            if isinstance(m, dict) and isinstance(m.get("content"), dict)
        ]


def _failure(message: str, *, tool: bool, code: int = INTERNAL_ERROR) -> Exception:
    """A tool error (the model reads it) for a tool, a JSON-RPC error otherwise."""
    if tool:
        return ToolError(message)
    return JsonRpcError(code if code else INTERNAL_ERROR, message[:1000])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _reason(exc.exceptions[0])
    if isinstance(exc, McpError):
        return exc.message[:300]
    return f"{type(exc).__name__}: {exc}"[:300]
