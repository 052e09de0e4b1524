"""Test helpers for code that uses trio_mcp_cancel; none of them needs pytest.

They are built for ``trio.testing.MockClock``: use pytest-trio's
``autojump_clock`` fixture (or run ``trio.run(..., clock=MockClock(autojump_threshold=0))``)
and grace periods take no real time.  The pytest fixtures (``mcp_registry_config``,
``mcp_registry``, ``mcp_events``) live in :mod:`trio_mcp_cancel.pytest_plugin`,
which pytest loads by itself (entry point ``trio_mcp_cancel``; the ``testing``
extra installs pytest and pytest-trio).

Helpers: :func:`advance_past_grace_period`, :func:`assert_no_leaks`,
:class:`EventRecorder`.

In-memory client: :func:`open_test_client` drives an :class:`McpServer`
through the real message path (the same connection layer as stdio and
WebSocket, over Trio memory channels instead of a socket), so a test can
call a tool, cancel it, and watch it stop, hard-cancelled after the grace
period if it ignores the flag, all in virtual time::

    async def test_my_tool_stops(autojump_clock):
        async with open_test_client(server, grace_period=5) as client:
            call = client.start_call("crunch", {"n": 10**9})
            await call.cancel("user pressed stop")
            await client.assert_no_answer(call)
            assert_no_leaks(client.registry)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal, TypeVar

import attrs
import trio
import trio.testing

from . import __version__
from ._client.calls import PendingCall
from ._client.engine import ClientEngine
from ._client.errors import McpError
from ._client.handlers import ClientHandlers, ServerRequests
from ._client.memory import ChannelTransport
from ._client.tasks import McpTaskError
from ._core.events import Event
from ._core.registry import Registry, RegistryConfig, current_registry_var
from ._protocol.dispatcher import Served
from ._protocol.exchange import Caller, LegacyState
from ._public import fixup_module_metadata
from ._telemetry.client import for_client
from ._telemetry.config import Telemetry
from .transports.limits import DEFAULT_CONNECTION_LIMITS, ConnectionLimits
from .transports.memory import MemoryEnd, memory_transport_pair, serve_mcp_memory

__all__ = [
    "EventRecorder",
    "McpError",
    "McpTaskError",
    "McpTestClient",
    "PendingCall",
    "advance_past_grace_period",
    "assert_no_leaks",
    "open_test_client",
]

E = TypeVar("E")

#: How far past the grace period the helpers move the clock.
EPSILON = 1e-3


@attrs.define(eq=False)
class EventRecorder:
    """Collects every event a registry emits, in order."""

    events: list[Event] = attrs.field(factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    @classmethod
    def attach(cls, registry: Registry) -> EventRecorder:
        recorder = cls()
        registry.events.subscribe(recorder)
        return recorder

    def names(self) -> list[str]:
        return [event.name for event in self.events]

    def of_type(self, event_type: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, event_type)]

    def clear(self) -> None:
        self.events.clear()


async def advance_past_grace_period(
    registry: Registry,
    grace_period: float | None = None,
    *,
    clock: trio.testing.MockClock | None = None,
) -> None:
    """Let the grace period (the registry's ``grace_period``, or *grace_period*) run out.

    With pytest-trio's ``autojump_clock`` this is a sleep that the clock
    skips over.  Pass a :class:`~trio.testing.MockClock` without autojump as
    *clock* to jump it by hand; the helper then waits until every task has
    reacted.  Raises :class:`ValueError` when there is no grace period to
    run out (``grace_period=None``).
    """
    if grace_period is None:
        grace_period = registry.config.grace_period
    if grace_period is None:
        raise ValueError("the registry never hard-cancels (grace_period=None)")
    if clock is None:
        await trio.sleep(grace_period + EPSILON)
    else:
        clock.jump(grace_period + EPSILON)
        await trio.testing.wait_all_tasks_blocked()


def assert_no_leaks(registry: Registry) -> None:
    """Fail unless the registry holds no in-flight request and no row."""
    leaks: list[str] = []
    if registry.in_flight_count:
        leaks.append(f"{registry.in_flight_count} in-flight: {registry.requests()[:5]!r}")
    if registry.row_count:
        leaks.append(f"{registry.row_count} cancellation rows: {registry.rows()[:5]!r}")
    if leaks:
        raise AssertionError("registry leaked " + "; ".join(leaks))


# -- the in-memory test client -----------------------------------------------

_TEST_CLIENT_INFO: Mapping[str, Any] = {
    "name": "trio-mcp-cancel-test-client",
    "version": __version__,
}


@attrs.define(eq=False)
class McpTestClient(ClientEngine):
    """An MCP client on an in-memory connection; made by :func:`open_test_client`.

    The engine of the public client (:mod:`trio_mcp_cancel.client`: the
    envelope, ``initialize``, ids, progress, cancellation forwarding) on a
    Trio memory channel, plus what tests need: it keeps every call in
    ``calls`` and every stray message in ``unexpected`` (server requests
    included, unanswered), and it can send raw text, settle and assert.
    Its wire is a :class:`~._client.memory.ChannelTransport` on the
    connection's memory channel.
    """

    answer_server_requests: bool = attrs.field(default=False, kw_only=True)
    registry: Registry = attrs.field(kw_only=True)
    caller: Caller = attrs.field(kw_only=True)
    _end: MemoryEnd = attrs.field(kw_only=True)

    @property
    def namespace(self) -> str:
        """The connection's cancellation namespace in the registry."""
        return self.caller.namespace

    @property
    def legacy(self) -> LegacyState | None:
        """What ``initialize`` negotiated (legacy era), else ``None``."""
        return None if self.caller.channel is None else self.caller.channel.legacy

    # -- sending ---------------------------------------------------------

    async def send_text(self, text: str) -> None:
        """Send raw text as one message (need not be JSON)."""
        self._end.send.send_nowait(text)
        await trio.lowlevel.checkpoint()

    # -- assertions --------------------------------------------------------

    async def settle(self) -> None:
        """Wait until every task is blocked: all that was sent has been handled."""
        await trio.testing.wait_all_tasks_blocked()

    async def wait_in_flight(self, call: PendingCall) -> None:
        """Assert that *call* is running as a tracked request, once all settled."""
        await self.settle()
        if not self.registry.in_flight(call.id, self.namespace):
            raise AssertionError(f"request {call.id} is not in flight (answer: {call.response!r})")

    async def assert_no_answer(self, call: PendingCall) -> None:
        """Assert that nothing answered *call*, once everything settled.

        For a request the client cancelled, MCP requires exactly that.
        """
        await self.settle()
        if call.answered:
            raise AssertionError(f"request {call.id} was answered: {call.response!r}")

    # -- the connection --------------------------------------------------------

    def disconnect(self) -> None:
        """Close the connection from the client's side, like a closed socket:
        the server cancels everything still running (kind ``"disconnect"``)."""
        self._end.send.close()

    async def _read(self) -> None:
        async with self._end.receive:
            async for text in self._end.receive:
                self.inbound.receive_text(text)


@contextlib.asynccontextmanager
async def open_test_client(
    server: Served,
    *,
    registry: Registry | None = None,
    era: Literal["modern", "legacy"] = "modern",
    namespace: str | None = None,
    principal: str | None = None,
    client_capabilities: Mapping[str, Any] | None = None,
    client_info: Mapping[str, Any] | None = None,
    log_level: str | None = None,
    tasks: bool = False,
    limits: ConnectionLimits = DEFAULT_CONNECTION_LIMITS,
    registry_config: RegistryConfig | None = None,
    handlers: ClientHandlers | None = None,
    telemetry: bool | Telemetry = False,
) -> AsyncIterator[McpTestClient]:
    """Connect an :class:`McpTestClient` to *server* in memory, for one ``async with``.

    Without *registry* it runs its own, configured by *registry_config*
    (``RegistryConfig(grace_period=0.5)``, say).  *namespace* overrides the
    connection's fresh ``session:memory-<random>``; *principal* makes the
    connection that principal's (its tenant for per-tenant caps).  *limits*
    are the connection's, as for the other transports.  Leaving the block
    disconnects: the server cancels what still runs and the block ends once
    it has all stopped (at most the grace period later; under
    ``autojump_clock``, no real time at all).
    *tasks*: declare the Tasks extension on ``tools/call`` (``call_tool``
    then follows a task to its end; the server's ``TaskManager`` must be
    running for it to make one).
    *handlers* (:class:`~trio_mcp_cancel.client.ClientHandlers`): answer the
    server's questions (a tool's ``ctx.elicit``, ``ctx.sample``,
    ``ctx.list_roots``) as the public client does: MRTR rounds (modern),
    server requests on the connection (legacy; a question the server
    cancels stops its handler), a task's ``inputRequests``; each handler
    is declared as a capability.  Other server requests are still kept in
    ``unexpected``.
    *telemetry*: the client's own ``CLIENT`` spans, as the public client
    makes them (``True``: the global providers; a
    :class:`~trio_mcp_cancel.server.Telemetry`; default off, so a test's
    spans are the server's only).

    An exception from the block comes out as itself, not wrapped in an
    exception group.
    """
    if registry is not None and registry_config is not None:
        raise TypeError("pass a registry or registry settings, not both")
    client_end, server_end = memory_transport_pair(math.inf)
    server_done = trio.Event()

    async def serve(task_status: trio.TaskStatus[Caller]) -> None:
        assert registry is not None
        try:
            await serve_mcp_memory(
                server,
                server_end,
                registry,
                namespace=namespace,
                principal=principal,
                limits=limits,
                task_status=task_status,
            )
        finally:
            server_done.set()

    try:
        async with trio.open_nursery() as nursery:
            own_registry = trio.CancelScope()
            if registry is None:
                registry = Registry(registry_config)
                await nursery.start(_run_in, own_registry, registry.run)
            token = current_registry_var.set(registry)
            try:
                caller: Caller = await nursery.start(serve)
                capabilities = dict(client_capabilities or {})
                if handlers is not None:
                    capabilities = handlers.capabilities() | capabilities
                client = McpTestClient(
                    era,
                    capabilities,
                    dict(client_info or _TEST_CLIENT_INFO),
                    registry=registry,
                    caller=caller,
                    end=client_end,
                    tasks=tasks,
                    transport=ChannelTransport(client_end.send),
                    handlers=handlers,
                    telemetry=for_client(telemetry),
                )
                client.log_level = log_level
                if handlers is not None:
                    transport = client.transport
                    assert transport is not None

                    def reply(message: dict[str, Any]) -> None:
                        with contextlib.suppress(
                            trio.ClosedResourceError, trio.BrokenResourceError
                        ):
                            transport.transmit(message, None)

                    client.server_requests = ServerRequests(handlers, nursery, reply)
                nursery.start_soon(client._read)
                try:
                    if era == "legacy":
                        await client.initialize()
                    yield client
                finally:
                    client.disconnect()
                # The server returns once every request it ran has stopped,
                # then closes its side, which ends the reader.
                await server_done.wait()
                if client.server_requests is not None:
                    client.server_requests.cancel_all()
                own_registry.cancel()
            finally:
                current_registry_var.reset(token)
    except BaseExceptionGroup as group:
        # Our nursery wraps whatever the block raised; a lone exception is
        # the block's own (or the server's), so it comes out as itself.
        if len(group.exceptions) != 1:
            raise
        raise group.exceptions[0] from None


async def _run_in(
    scope: trio.CancelScope,
    fn: Callable[..., Any],
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``fn(task_status=...)`` inside *scope*, so it can be stopped on its own."""
    with scope:
        await fn(task_status=task_status)


fixup_module_metadata(__name__, __all__, globals())
