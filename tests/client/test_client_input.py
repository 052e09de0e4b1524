"""The client's loose ends: Mcp-Param-* headers, MRTR and task input through handlers,
task progress, legacy server requests.

Against our own server (in memory on MockClock where time matters, over
hypercorn where the headers do), and a scripted legacy server on httpx2's
``MockTransport`` for the wire form of server-to-client requests (our
server's own, from ``ctx.elicit``: tests/client/test_client_answers_ctx.py;
the Python SDK server's: tests/interop/test_client_interop.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx2
import pytest
import trio
from pydantic import Field
from trio.testing import MockClock

from trio_mcp_cancel._client.handlers import ServerRequests
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.client import ClientHandlers, McpError, open_http_client
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks
from trio_mcp_cancel.testing import open_test_client

from _support.client import http_server

BOUND = 30
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def answered(ctx: Context, key: str) -> str | None:
    answer = (ctx.input_responses or {}).get(key)
    content = answer.get("content") if isinstance(answer, dict) else None
    name = content.get("name") if isinstance(content, dict) else None
    return name if isinstance(name, str) else None


def make_server() -> McpServer:
    server = McpServer(
        "input", extensions=[Tasks(TaskManager(store=MemoryTaskStore(), poll_interval_ms=100))]
    )

    @server.tool()
    async def routed(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        return f"routed to {region}"

    @server.tool()
    async def greet(ctx: Context) -> str | InputRequired:
        name = answered(ctx, "who")
        if name is None:
            return InputRequired(
                {"who": InputRequired.elicit("Your name?", NAME)}, state={"round": 1}
            )
        return f"hello {name} (state {ctx.request_state})"

    @server.tool()
    async def insatiable(ctx: Context) -> InputRequired:
        return InputRequired({"who": InputRequired.elicit("Again?", NAME)})

    @server.tool(task="optional")
    async def confirm(ctx: Context, item: str = "x") -> str | InputRequired:
        name = answered(ctx, "sure")
        await ctx.report_progress(2 if name else 1, 2, "checking")
        await trio.sleep(1.0)
        if name is None:
            return InputRequired(
                {"sure": InputRequired.elicit(f"Delete {item}?", NAME)}, state={"item": item}
            )
        return f"{ctx.request_state['item']} deleted by {name}"

    return server


class Asked:
    """An elicitation handler that answers with a name and remembers the questions."""

    def __init__(self, name: str = "Ada") -> None:
        self.name = name
        self.questions: list[str] = []

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.questions.append(params["message"])
        return {"action": "accept", "content": {"name": self.name}}


@asynccontextmanager
async def running_tasks(server: McpServer) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        yield
        nursery.cancel_scope.cancel()


async def test_mcp_param_headers_are_learned_from_the_tool_list_and_encoded() -> None:
    with trio.fail_after(BOUND):
        async with http_server(make_server()) as (url, _), open_http_client(url) as client:
            # Not listed yet: the server refuses (-32020) before running it, the
            # client lists the tools and sends the call again, with the header.
            result = await client.call_tool("routed", {"region": "eu-west"})
            assert result["content"][0]["text"] == "routed to eu-west"
            assert client.tool_schemas.knows("routed")
            # Not plain ASCII: the =?base64?...?= form, which the server decodes.
            result = await client.call_tool("routed", {"region": " Zürich"})
            assert result["content"][0]["text"] == "routed to  Zürich"


async def test_mrtr_elicitation_is_answered_by_the_handler_and_the_request_retried() -> None:
    asked = Asked()
    handlers = ClientHandlers(elicitation=asked)
    with trio.fail_after(BOUND):
        async with (
            http_server(make_server()) as (url, _),
            open_http_client(url, handlers=handlers) as client,
        ):
            assert client.client_capabilities["elicitation"] == {"form": {}}
            result = await client.call_tool("greet")
            assert result["content"][0]["text"] == "hello Ada (state {'round': 1})"
            assert asked.questions == ["Your name?"]
            with pytest.raises(McpError, match="more than 10 times"):
                await client.call_tool("insatiable")
            assert len(asked.questions) == 11


async def test_without_handlers_input_required_comes_back_as_it_is() -> None:
    async with open_test_client(make_server(), client_capabilities={"elicitation": {}}) as client:
        result = await client.call_tool("greet")
        assert result["resultType"] == "input_required"
        assert set(result["inputRequests"]) == {"who"}


async def test_a_task_asking_for_input_is_answered_with_tasks_update_and_reports_progress(
    autojump_clock: MockClock,
) -> None:
    server = make_server()
    asked = Asked("Grace")
    async with (
        running_tasks(server),
        open_test_client(
            server, tasks=True, client_capabilities={"elicitation": {"form": {}}}
        ) as client,
    ):
        client.handlers = ClientHandlers(elicitation=asked)
        progress: list[dict[str, Any]] = []
        statuses: list[str] = []
        result = await client.call_tool(
            "confirm",
            {"item": "db"},
            progress=progress.append,
            on_task=lambda task: statuses.append(task["status"]),
        )
        assert result["content"][0]["text"] == "db deleted by Grace"
        assert asked.questions == ["Delete db?"]
        assert "input_required" in statuses
        assert [c.method for c in client.calls.values()].count("tasks/update") == 1
        assert {"progress": 1.0, "total": 2.0, "message": "checking"}.items() <= progress[0].items()


SESSION = {"mcp-session-id": "s-1"}


def scripted_legacy_session(request: httpx2.Request) -> httpx2.Response | dict[str, Any]:
    """What every scripted legacy server here answers the same way (no GET stream, the
    session's DELETE, ``initialize``); otherwise the request's body, for the test to answer."""
    if request.method == "GET":
        return httpx2.Response(405)
    if request.method == "DELETE":
        return httpx2.Response(204)
    body: dict[str, Any] = json.loads(request.content)
    if body.get("method") == "initialize":
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": init}
        return httpx2.Response(200, headers=SESSION, json=answer)
    return body


async def test_a_legacy_server_request_on_the_post_stream_is_answered_by_a_post() -> None:
    # A scripted legacy server: the tools/call's SSE stream carries an
    # elicitation/create; the answer comes back as a POST of its own, then
    # the stream goes on with the call's result.
    replies: list[dict[str, Any]] = []
    replied = trio.Event()

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = scripted_legacy_session(request)
        if isinstance(body, httpx2.Response):
            return body
        if "method" not in body:  # the client's answer to our request
            replies.append(body)
            replied.set()
            return httpx2.Response(202)
        if "id" not in body:
            return httpx2.Response(202)
        ask = {
            "jsonrpc": "2.0",
            "id": "srv-1",
            "method": "elicitation/create",
            "params": {"message": "Name?", "requestedSchema": NAME},
        }

        async def stream() -> AsyncIterator[bytes]:
            yield f"id: 1\ndata: {json.dumps(ask)}\n\n".encode()
            await replied.wait()
            name = replies[0]["result"]["content"]["name"]
            done = {"jsonrpc": "2.0", "id": body["id"], "result": {"content": [], "name": name}}
            yield f"id: 2\ndata: {json.dumps(done)}\n\n".encode()

        headers = {"content-type": "text/event-stream", **SESSION}
        return httpx2.Response(200, headers=headers, content=stream())

    asked = Asked("Linus")
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    with trio.fail_after(BOUND):
        async with (
            http,
            open_http_client(
                "http://mcp.test/mcp",
                http_client=http,
                era="legacy",
                handlers=ClientHandlers(elicitation=asked),
            ) as client,
        ):
            assert client.initialize_result is not None
            result = await client.call_tool("ask", {})
            assert result["name"] == "Linus"
    assert replies == [
        {
            "jsonrpc": "2.0",
            "id": "srv-1",
            "result": {"action": "accept", "content": {"name": "Linus"}},
        }
    ]
    assert asked.questions == ["Name?"]


async def test_a_server_request_without_a_handler_is_refused_not_dropped() -> None:
    handlers = ClientHandlers()
    with pytest.raises(McpError, match="no handler"):
        await handlers.answer({"method": "sampling/createMessage", "params": {}})
    assert handlers.capabilities() == {}


async def test_a_server_request_the_server_cancels_gets_no_answer_and_the_excess_is_refused(
    autojump_clock: MockClock,
) -> None:
    replies: list[dict[str, Any]] = []
    waiting = trio.Event()

    async def forever(params: dict[str, Any]) -> dict[str, Any]:
        waiting.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    handlers = ClientHandlers(elicitation=forever, max_concurrent=1)
    async with trio.open_nursery() as nursery:
        serving = ServerRequests(handlers, nursery, replies.append)
        ask = {"jsonrpc": "2.0", "method": "elicitation/create", "params": {"message": "?"}}
        serving.start({**ask, "id": 1})
        await waiting.wait()
        serving.start({**ask, "id": 2})  # over max_concurrent: refused at once
        assert [(r["id"], r["error"]["message"]) for r in replies] == [
            (2, "too many server requests at once")
        ]
        serving.cancel(1)  # the server's notifications/cancelled
        await trio.sleep(1)
    assert len(replies) == 1  # MCP: nothing is answered after a cancel


async def test_a_post_answered_503_with_retry_after_is_posted_again_after_the_wait(
    autojump_clock: MockClock,
) -> None:
    """A legacy server that cannot confirm a session while its backend is slow answers
    503 + Retry-After (the request was not processed): the client waits as asked and
    posts again, a bounded number of times, instead of failing the call at once."""
    posted: list[float] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        body = scripted_legacy_session(request)
        if isinstance(body, httpx2.Response):
            return body
        if "id" not in body:
            return httpx2.Response(202)
        posted.append(trio.current_time())
        name = body["params"]["name"]
        if (name == "busy" and len(posted) < 3) or name == "always-busy":
            return httpx2.Response(503, headers={"retry-after": "2"}, text="busy")
        result = {"jsonrpc": "2.0", "id": body["id"], "result": {"content": []}}
        return httpx2.Response(200, headers=SESSION, json=result)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    async with (
        http,
        open_http_client("http://mcp.test/mcp", http_client=http, era="legacy") as client,
    ):
        start = trio.current_time()
        assert await client.call_tool("busy", {}) == {"content": []}
        assert [round(at - start, 3) for at in posted] == [0, 2, 4]
        posted.clear()
        with pytest.raises(McpError) as refused:
            await client.call_tool("always-busy", {})
        assert len(posted) == 3  # the first post and two more: bounded
        assert refused.value.data["status"] == 503
