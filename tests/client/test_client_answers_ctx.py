"""Our client answering our server's questions: ``ctx.elicit``, ``ctx.sample``, ``ctx.list_roots``.

One tool body, one set of :class:`ClientHandlers`, every way the question
can travel: a legacy (2025-11-25) server request on the call's SSE stream
answered by a POST (HTTP), or on the connection (memory, stdio), and a
modern MRTR round answered by retrying the call.  Cancelling the call
while the handler is still asking stops the handler: on the legacy era
because the server cancels its question (``notifications/cancelled``), on
the modern era because the handler runs in the caller's own scope.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import pytest
import trio
from trio.testing import MockClock

from trio_mcp_cancel import Registry, RequestCancelled
from trio_mcp_cancel.client import (
    ClientHandlers,
    open_http_client,
    open_stdio_client,
    open_websocket_client,
)
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.testing import assert_no_leaks, open_test_client
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.client import http_server

BOUND = 30
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ERAS = ["legacy", "modern"]


def make_server(seen: list[str]) -> McpServer:
    server = McpServer("asker")

    @server.tool()
    async def survey(ctx: Context) -> str:
        """Asks all three kinds of question, then acts once."""
        who = await ctx.elicit("Your name?", NAME)
        said = await ctx.sample("Say hi", 10)
        roots = await ctx.list_roots()
        seen.append("acted")  # after the last question: once per completed call
        assert who.content is not None
        uris = ",".join(root["uri"] for root in roots)
        return f"{who.content['name']} / {said['content']['text']} / {uris}"

    @server.tool()
    async def greet(ctx: Context) -> str:
        try:
            answer = await ctx.elicit("Your name?", NAME)
        except RequestCancelled as exc:
            seen.append(f"cancelled: {exc.kind}")
            raise
        return f"hello {answer.action}"

    return server


class Answers:
    """The client's handlers: a fixed answer to each kind, or a question that never ends."""

    def __init__(self, *, stall: bool = False) -> None:
        self.stall = stall
        self.asked: list[str] = []
        self.asking = trio.Event()
        self.stopped = trio.Event()

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params["message"])
        if self.stall:
            self.asking.set()
            try:
                await trio.sleep_forever()
            finally:
                self.stopped.set()
        return {"action": "accept", "content": {"name": "Ada"}}

    async def sample(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params["messages"][0]["content"]["text"])
        return {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}

    async def roots(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append("roots")
        return {"roots": [{"uri": "file:///work"}]}

    def handlers(self) -> ClientHandlers:
        return ClientHandlers(elicitation=self.elicit, sampling=self.sample, roots=self.roots)


EXPECTED = "Ada / hi / file:///work"


@pytest.mark.parametrize("era", ERAS)
async def test_over_http_the_handlers_answer_every_question_of_a_tool(
    era: Literal["legacy", "modern"],
) -> None:
    seen: list[str] = []
    answers = Answers()
    with trio.fail_after(BOUND):
        async with (
            http_server(make_server(seen)) as (url, registry),
            open_http_client(url, era=era, handlers=answers.handlers()) as client,
        ):
            result = await client.call_tool("survey")
            await registry.wait_idle()
            assert_no_leaks(registry)
    assert result["content"][0]["text"] == EXPECTED
    assert answers.asked == ["Your name?", "Say hi", "roots"]
    assert seen == ["acted"]


@pytest.mark.parametrize("era", ERAS)
async def test_over_http_cancelling_the_call_stops_the_pending_handler(
    era: Literal["legacy", "modern"],
) -> None:
    seen: list[str] = []
    answers = Answers(stall=True)
    with trio.fail_after(BOUND):
        async with (
            http_server(make_server(seen)) as (url, registry),
            open_http_client(url, era=era, handlers=answers.handlers()) as client,
        ):
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.call_tool, "greet")
                    await answers.asking.wait()
                    scope.cancel()
            await answers.stopped.wait()
            await registry.wait_idle()
            assert_no_leaks(registry)
            # The connection goes on: the next call is answered.
            answers.stall = False
            assert (await client.call_tool("greet"))["content"][0]["text"] == "hello accept"
    # Legacy: the server ran the tool until the client's cancel reached it.
    assert seen == (["cancelled: client"] if era == "legacy" else [])


@pytest.mark.parametrize("era", ERAS)
async def test_the_test_client_answers_with_handlers_in_both_eras(
    era: Literal["legacy", "modern"], autojump_clock: MockClock
) -> None:
    seen: list[str] = []
    answers = Answers()
    async with open_test_client(make_server(seen), era=era, handlers=answers.handlers()) as client:
        assert set(client.client_capabilities) == {"elicitation", "sampling", "roots"}
        result = await client.call_tool("survey")
    assert result["content"][0]["text"] == EXPECTED
    assert answers.asked == ["Your name?", "Say hi", "roots"]
    assert seen == ["acted"]


async def test_the_test_client_stops_a_legacy_handler_when_the_server_cancels_its_question(
    autojump_clock: MockClock,
) -> None:
    seen: list[str] = []
    answers = Answers(stall=True)
    async with open_test_client(
        make_server(seen), era="legacy", handlers=answers.handlers()
    ) as client:
        call = client.start_call("greet")
        await answers.asking.wait()
        await call.cancel("user pressed stop")
        await answers.stopped.wait()
        await client.assert_no_answer(call)
        assert_no_leaks(client.registry)
    assert seen == ["cancelled: client"]


STDIO_SERVER = """
import sys
sys.path.insert(0, {tests!r})
from client.test_client_answers_ctx import make_server
from trio_mcp_cancel.stdio import run_stdio

run_stdio(make_server([]))
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("era", ERAS)
async def test_over_stdio_the_handlers_answer_every_question_of_a_tool(
    era: Literal["legacy", "modern"], tmp_path: Path
) -> None:
    script = tmp_path / "server.py"
    script.write_text(STDIO_SERVER.format(tests=str(Path(__file__).parents[1])))
    answers = Answers()
    with trio.fail_after(BOUND):
        async with open_stdio_client(
            [sys.executable, str(script)], era=era, handlers=answers.handlers()
        ) as client:
            result = await client.call_tool("survey")
    assert result["content"][0]["text"] == EXPECTED
    assert answers.asked == ["Your name?", "Say hi", "roots"]


async def test_leaving_the_test_client_with_a_question_pending_stops_its_handler(
    autojump_clock: MockClock,
) -> None:
    seen: list[str] = []
    answers = Answers(stall=True)
    async with open_test_client(
        make_server(seen), era="legacy", handlers=answers.handlers()
    ) as client:
        client.start_call("greet")
        await answers.asking.wait()
    assert answers.stopped.is_set()
    assert seen == ["cancelled: disconnect"]


async def test_over_websocket_a_legacy_question_is_answered_and_a_cancel_stops_the_handler(
    mcp_registry: Registry,
) -> None:
    seen: list[str] = []
    answers = Answers()
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            ws = await nursery.start(
                serve_mcp_websocket, make_server(seen), mcp_registry, "127.0.0.1", 0
            )
            url = f"ws://127.0.0.1:{ws.port}/mcp"
            async with open_websocket_client(
                url, era="legacy", handlers=answers.handlers()
            ) as client:
                assert text(await client.call_tool("survey")) == EXPECTED
                answers.stall = True
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as inner:
                        inner.start_soon(client.call_tool, "greet")
                        await answers.asking.wait()
                        scope.cancel()
                await answers.stopped.wait()
                await mcp_registry.wait_idle()
            nursery.cancel_scope.cancel()
    assert seen == ["acted", "cancelled: client"]


def text(result: dict[str, Any]) -> str:
    value: str = result["content"][0]["text"]
    return value
