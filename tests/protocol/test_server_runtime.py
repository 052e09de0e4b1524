"""One server object: its registration, its dispatcher and the dispatcher's runtime.

``McpServer`` builds all three when made: ``server.registration`` holds what
the author registered and its settings; the task manager, the subscription
hub and the used MRTR states live in one ``ServerRuntime`` per server
(``server.dispatcher.runtime``).  Registration changes reach the listen
streams, and a transport serves anything with a ``dispatcher``.
"""

from __future__ import annotations

import attrs

from trio_mcp_cancel import Registry
from trio_mcp_cancel._protocol.runtime import ServerRuntime
from trio_mcp_cancel._protocol.subscriptions import Filter
from trio_mcp_cancel.lowlevel import Dispatcher, Served, TaskManager
from trio_mcp_cancel.server import Context, McpServer, ServerLimits, Tasks
from trio_mcp_cancel.testing import open_test_client

#: Tool list changes, one resource's updates and one task's status.
EVERYTHING = Filter(
    frozenset({"notifications/tools/list_changed"}), frozenset({"test://doc"}), frozenset({"t1"})
)


def test_the_registration_holds_what_was_registered_and_the_runtime_its_services() -> None:
    server = McpServer("config-only", limits=ServerLimits(max_calls=7))

    @server.tool
    async def echo(text: str) -> str:
        return text

    assert set(server.registration.tools) == {"echo"} and server.limits.max_calls == 7
    for service in ("subscriptions", "used_states", "failures"):
        assert not hasattr(server.registration, service), service
        assert hasattr(server.dispatcher.runtime, service), service
    # The runtime is made with the server, and registration changes reach its hub.
    assert server.registration.on_change == server.dispatcher.runtime.subscriptions.publish


def test_each_server_has_one_runtime_owned_by_its_dispatcher() -> None:
    manager = TaskManager(ttl_ms=5_000)
    first, second = McpServer("first", extensions=[Tasks(manager)]), McpServer("second")
    runtime = first.dispatcher.runtime
    assert isinstance(runtime, ServerRuntime)
    assert first.dispatcher.runtime is runtime  # one per server, made once
    # The manager the author configured is the one its extension runs; the runtime
    # holds nothing of an extension's.
    tasks = first.dispatcher.extension(Tasks)
    assert tasks is not None and tasks.manager is manager
    assert not hasattr(runtime, "tasks")
    assert second.dispatcher.extension(Tasks) is None
    other = second.dispatcher.runtime
    assert other.subscriptions is not runtime.subscriptions
    assert other.used_states is not runtime.used_states


def test_registration_changes_and_task_changes_reach_the_runtime_hub() -> None:
    server = McpServer("changes", extensions=[Tasks()])
    server.tools_changed()  # before any runtime: nobody listens, nothing fails
    runtime = server.dispatcher.runtime
    listener = runtime.subscriptions.open(EVERYTHING)

    @server.tool
    async def late(ctx: Context) -> str:
        return "added while serving"

    server.resource_updated("test://doc")
    manager = server.dispatcher.extension(Tasks).manager
    assert manager.on_change is not None
    manager.on_change({"taskId": "t1", "status": "working"})
    received = [listener.receive.receive_nowait() for _ in range(3)]
    assert [m["method"] for m in received] == [
        "notifications/tools/list_changed",
        "notifications/resources/updated",
        "notifications/tasks",
    ]
    assert received[1]["params"] == {"uri": "test://doc"}
    runtime.subscriptions.close(listener)


def test_a_served_server_is_freed_with_its_dispatcher_once_nothing_refers_to_it() -> None:
    import gc
    import weakref

    server = McpServer("short-lived")

    @server.tool
    async def echo(text: str) -> str:
        return text

    dispatcher = server.dispatcher
    assert server.dispatcher is dispatcher  # one per server, kept while it lives
    gone = weakref.ref(server)
    del server, dispatcher, echo
    gc.collect()
    assert gone() is None


@attrs.frozen
class Holder:
    """Not an ``McpServer``: only what a transport needs (``lowlevel.Served``)."""

    dispatcher: Dispatcher


async def test_a_transport_serves_anything_with_a_dispatcher(mcp_registry: Registry) -> None:
    server = McpServer("held")

    @server.tool
    async def echo(text: str) -> str:
        return text

    served: Served = Holder(server.dispatcher)
    async with open_test_client(served, registry=mcp_registry) as client:
        result = await client.call_tool("echo", {"text": "hi"})
    assert result["content"] == [{"type": "text", "text": "hi"}]
