"""Pytest helpers for code that uses trio_mcp_cancel.

Installed as a pytest plugin (entry point ``trio_mcp_cancel``), so the
fixtures below are available in any project that depends on this library
and uses pytest-trio.  They are built for ``trio.testing.MockClock``: use
pytest-trio's ``autojump_clock`` fixture and grace periods take no real time.

Fixtures:

``mcp_registry_config``
    The :class:`RegistryConfig` used by ``mcp_registry``; override it in
    your ``conftest.py`` to test with other settings.
``mcp_registry``
    A running :class:`Registry` (inside ``open_registry``) for the test.
``mcp_events``
    An :class:`EventRecorder` subscribed to ``mcp_registry``.

Helpers: :func:`advance_past_grace`, :func:`assert_no_leaks`,
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
import itertools
import json
import math
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar

import attrs
import pytest
import trio
import trio.testing

from . import __version__
from ._core.events import Event
from ._core.registry import (
    USE_CONFIG,
    Registry,
    RegistryConfig,
    UseConfig,
    _current_registry,
    open_registry,
)
from ._protocol.dispatch import Caller, LegacyState, McpServer
from ._protocol.subscriptions import META_SUBSCRIPTION_ID
from ._protocol.versions import (
    LATEST_LEGACY_VERSION,
    LATEST_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    Era,
)
from .transports.memory import MemoryEnd, memory_transport_pair, serve_mcp_memory

__all__ = [
    "EventRecorder",
    "McpError",
    "McpTestClient",
    "PendingCall",
    "advance_past_grace",
    "assert_no_leaks",
    "mcp_events",
    "mcp_registry",
    "mcp_registry_config",
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
        registry.subscribe(recorder)
        return recorder

    def names(self) -> list[str]:
        return [event.name for event in self.events]

    def of_type(self, event_type: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, event_type)]

    def clear(self) -> None:
        self.events.clear()


async def advance_past_grace(
    registry: Registry,
    grace: float | None = None,
    *,
    clock: trio.testing.MockClock | None = None,
) -> None:
    """Let the grace period (the registry's, or *grace*) run out.

    With pytest-trio's ``autojump_clock`` this is a sleep that the clock
    skips over.  Pass a :class:`~trio.testing.MockClock` without autojump as
    *clock* to jump it by hand; the helper then waits until every task has
    reacted.  Raises :class:`ValueError` when there is no grace period to
    run out (``grace_period=None``).
    """
    if grace is None:
        grace = registry.config.grace_period
    if grace is None:
        raise ValueError("the registry never hard-cancels (grace_period=None)")
    if clock is None:
        await trio.sleep(grace + EPSILON)
    else:
        clock.jump(grace + EPSILON)
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


@pytest.fixture
def mcp_registry_config() -> RegistryConfig:
    """The configuration of ``mcp_registry``; override to change it."""
    return RegistryConfig()


@pytest.fixture
async def mcp_registry(mcp_registry_config: RegistryConfig) -> AsyncIterator[Registry]:
    """A running registry for one test."""
    async with open_registry(mcp_registry_config) as registry:
        yield registry


@pytest.fixture
def mcp_events(mcp_registry: Registry) -> EventRecorder:
    """Every event ``mcp_registry`` emits during the test."""
    return EventRecorder.attach(mcp_registry)


# -- the in-memory test client -----------------------------------------------

Message = dict[str, Any]
ProgressCallback = Callable[[Message], object]


class McpError(Exception):
    """A JSON-RPC error answer (``-32800`` for a cancelled request, say)."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


@attrs.define(eq=False)
class PendingCall:
    """A request the test client sent, and what came back for it.

    ``progress`` collects the params of every ``notifications/progress``
    for it; ``response`` is the raw JSON-RPC answer once it came
    (``answered``).  After :meth:`cancel` MCP forbids any answer:
    :meth:`McpTestClient.assert_no_answer` checks that none came.
    """

    id: int
    method: str
    _client: McpTestClient
    _on_progress: ProgressCallback | None = None
    progress: list[Message] = attrs.field(factory=list)
    notifications: list[Message] = attrs.field(factory=list)
    """For a ``subscriptions/listen`` call: every notification tagged with its id."""
    response: Message | None = None
    cancelled: bool = False
    """The client sent ``notifications/cancelled`` for it."""
    _done: trio.Event = attrs.field(factory=trio.Event)

    @property
    def answered(self) -> bool:
        return self.response is not None

    async def cancel(self, reason: str | None = None) -> None:
        """Send ``notifications/cancelled`` for this request, as a stdio client must."""
        self.cancel_nowait(reason)
        await trio.lowlevel.checkpoint()

    def cancel_nowait(self, reason: str | None = None) -> None:
        """:meth:`cancel` without a checkpoint: queued right behind what was
        sent before, so a test can send a call and its cancel back to back."""
        self.cancelled = True
        params: Message = {"requestId": self.id}
        if reason is not None:
            params["reason"] = reason
        self._client._send_nowait(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        )

    async def result(self) -> Message:
        """Wait for the answer; its ``result``, or :class:`McpError` for an error.

        After a client cancel a server answers nothing (unless it runs with
        ``on_cancel="error"``), so this would wait forever: bound it, or use
        :meth:`McpTestClient.assert_no_answer`.
        """
        await self._done.wait()
        assert self.response is not None
        return _unwrap(self.response)

    def _deliver(self, message: Message) -> None:
        self.response = message
        self._done.set()

    def _deliver_progress(self, params: Message) -> None:
        self.progress.append(params)
        if self._on_progress is not None:
            self._on_progress(params)


def _unwrap(response: Message) -> Message:
    error = response.get("error")
    if isinstance(error, dict):
        raise McpError(error.get("code", 0), str(error.get("message", "")), error.get("data"))
    result = response.get("result")
    if not isinstance(result, dict):
        raise McpError(0, f"malformed response: {response!r}"[:500])
    return result


@attrs.define(eq=False)
class McpTestClient:
    """An MCP client on an in-memory connection; made by :func:`open_test_client`.

    In the modern era every request carries the ``_meta`` envelope
    (protocol version, client capabilities and info, optional log level);
    in the legacy era the client sent ``initialize`` first, and the
    connection is a legacy session (``legacy``).  Everything the server
    sends that matches no request lands in ``unexpected``; log messages
    (``notifications/message``, which name no request) in ``log_messages``.
    """

    registry: Registry
    caller: Caller
    era: Era
    _end: MemoryEnd
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    client_info: Mapping[str, Any] = attrs.field(
        factory=lambda: {"name": "trio-mcp-cancel-test-client", "version": __version__}
    )
    log_level: str | None = None
    initialize_result: Message | None = None
    log_messages: list[Message] = attrs.field(factory=list)
    unexpected: list[Message] = attrs.field(factory=list)
    calls: dict[int, PendingCall] = attrs.field(factory=dict)
    """Every request sent, by id."""
    _ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))

    @property
    def namespace(self) -> str:
        """The connection's cancellation namespace in the registry."""
        return self.caller.namespace

    @property
    def legacy(self) -> LegacyState | None:
        """What ``initialize`` negotiated (legacy era), else ``None``."""
        return None if self.caller.channel is None else self.caller.channel.legacy

    def envelope(self) -> Message:
        """The modern ``_meta`` keys this client puts on every request."""
        meta: Message = {
            META_PROTOCOL_VERSION: LATEST_VERSION,
            META_CLIENT_CAPABILITIES: dict(self.client_capabilities),
            META_CLIENT_INFO: dict(self.client_info),
        }
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        return meta

    # -- sending ---------------------------------------------------------

    def _send_nowait(self, message: Mapping[str, Any]) -> None:
        # The client-to-server channel is unbounded (the test decides how
        # much it sends), so this never blocks and keeps back-to-back
        # messages back to back.
        self._end.send.send_nowait(json.dumps(message))

    async def send(self, message: Mapping[str, Any]) -> None:
        """Send any JSON-RPC message as is (to test malformed input, say)."""
        self._send_nowait(message)
        await trio.lowlevel.checkpoint()

    async def send_text(self, text: str) -> None:
        """Send raw text as one message (need not be JSON)."""
        self._end.send.send_nowait(text)
        await trio.lowlevel.checkpoint()

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification."""
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.send(message)

    def start_request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        envelope: bool = True,
        progress: bool = False,
        on_progress: ProgressCallback | None = None,
    ) -> PendingCall:
        """Send a request without waiting for its answer.

        *envelope*: add the modern ``_meta`` envelope (modern era only).
        *progress* (or *on_progress*): ask for progress, with the request id
        as the progress token, as the MCP SDKs do.
        """
        request_id = next(self._ids)
        body: Message = dict(params or {})
        meta: Message = dict(body.get("_meta") or {})
        if envelope and self.era == "modern":
            meta.update(self.envelope())
        if progress or on_progress is not None:
            meta["progressToken"] = request_id
        if meta:
            body["_meta"] = meta
        call = PendingCall(request_id, method, self, on_progress)
        self.calls[request_id] = call
        self._send_nowait({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body})
        return call

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, envelope: bool = True
    ) -> Message:
        """Send a request and return its ``result`` (:class:`McpError` for an error)."""
        return await self._wait(self.start_request(method, params, envelope=envelope))

    def start_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: bool = True,
        on_progress: ProgressCallback | None = None,
    ) -> PendingCall:
        """Send ``tools/call`` without waiting: cancel it, watch its progress.

        Progress is asked for by default, so ``call.progress`` fills up.
        """
        params: Message = {"name": name, "arguments": dict(arguments or {})}
        return self.start_request("tools/call", params, progress=progress, on_progress=on_progress)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        progress: ProgressCallback | None = None,
    ) -> Message:
        """Call a tool and return its result (``content``, ``isError``, ...).

        A tool that fails is a result with ``isError``; a JSON-RPC error
        raises :class:`McpError`.  *progress* is called with the params of
        each ``notifications/progress``.  If the calling scope is cancelled
        the client sends ``notifications/cancelled``, as the MCP SDKs do.
        """
        return await self._wait(
            self.start_call(name, arguments, progress=False, on_progress=progress)
        )

    async def _wait(self, call: PendingCall) -> Message:
        try:
            return await call.result()
        except trio.Cancelled:
            if not call.answered:
                with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                    call.cancel_nowait("caller cancelled")
            raise

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
                self._receive(json.loads(text))

    def _receive(self, message: Any) -> None:
        if not isinstance(message, dict):
            self.unexpected.append({"non-object": message})
            return
        method = message.get("method")
        params = message.get("params")
        if method is None:
            call = self.calls.get(message.get("id"))  # type: ignore[arg-type]
            if call is None or call.answered:
                self.unexpected.append(message)
            else:
                call._deliver(message)
        elif method == "notifications/progress" and isinstance(params, dict):
            call = self.calls.get(params.get("progressToken"))  # type: ignore[arg-type]
            if call is None or call.answered:
                self.unexpected.append(message)
            else:
                call._deliver_progress(params)
        elif method == "notifications/message" and isinstance(params, dict):
            self.log_messages.append(params)
        elif (call := self._subscription(params)) is not None:
            call.notifications.append(message)
        else:
            self.unexpected.append(message)

    def _subscription(self, params: object) -> PendingCall | None:
        """The open ``subscriptions/listen`` call a notification is tagged with, if any."""
        meta = params.get("_meta") if isinstance(params, dict) else None
        key = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        call = self.calls.get(key) if isinstance(key, int) else None
        return call if call is not None and not call.answered else None

    async def _initialize(self) -> None:
        self.initialize_result = await self.request(
            "initialize",
            {
                "protocolVersion": LATEST_LEGACY_VERSION,
                "capabilities": dict(self.client_capabilities),
                "clientInfo": dict(self.client_info),
            },
        )
        await self.notify("notifications/initialized")
        if self.log_level is not None:
            await self.request("logging/setLevel", {"level": self.log_level})


@contextlib.asynccontextmanager
async def open_test_client(
    server: McpServer,
    *,
    registry: Registry | None = None,
    era: Literal["modern", "legacy"] = "modern",
    namespace: str | None = None,
    client_capabilities: Mapping[str, Any] | None = None,
    client_info: Mapping[str, Any] | None = None,
    log_level: str | None = None,
    grace: float | UseConfig | None = USE_CONFIG,
    max_concurrent_requests: int = 64,
    max_request_time: float | None = None,
    **registry_config: Any,
) -> AsyncIterator[McpTestClient]:
    """Connect an :class:`McpTestClient` to *server* in memory, for one ``async with``.

    Without *registry* it runs its own, configured by *registry_config*
    (``grace_period=0.5``, say).  *namespace* overrides the connection's
    fresh ``session:memory-<random>``.  *grace*, *max_concurrent_requests*
    and *max_request_time* are the connection's, as for the other
    transports.  Leaving the block disconnects: the server cancels what
    still runs and the block ends once it has all stopped (at most the
    grace period later; under ``autojump_clock``, no real time at all).

    An exception from the block comes out as itself, not wrapped in an
    exception group.
    """
    if registry is not None and registry_config:
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
                grace=grace,
                max_concurrent_requests=max_concurrent_requests,
                max_request_time=max_request_time,
                task_status=task_status,
            )
        finally:
            server_done.set()

    try:
        async with trio.open_nursery() as nursery:
            own_registry = trio.CancelScope()
            if registry is None:
                registry = Registry(**registry_config)
                await nursery.start(_run_in, own_registry, registry.run)
            token = _current_registry.set(registry)
            try:
                caller: Caller = await nursery.start(serve)
                client = McpTestClient(
                    registry, caller, era, client_end, dict(client_capabilities or {})
                )
                client.log_level = log_level
                if client_info is not None:
                    client.client_info = dict(client_info)
                nursery.start_soon(client._read)
                try:
                    if era == "legacy":
                        await client._initialize()
                    yield client
                finally:
                    client.disconnect()
                # The server returns once every request it ran has stopped,
                # then closes its side, which ends the reader.
                await server_done.wait()
                own_registry.cancel()
            finally:
                _current_registry.reset(token)
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
