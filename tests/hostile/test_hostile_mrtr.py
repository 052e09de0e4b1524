"""Hostile MRTR and protocol bounds: ``requestState`` across workers, its one spelling and
one use, depth-bombed arguments, and a flood of one failing request in the log.

Two "workers" are two servers (two apps) in this process, reached through the
in-memory ASGI driver or the in-memory transport; Redis is a real
redis-server on 127.0.0.1 (as in the other Redis tests).
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import example, given
from hypothesis import strategies as st

from trio_mcp_cancel import Registry, open_registry
from trio_mcp_cancel._core.ratelog import RateLimitedLog
from trio_mcp_cancel._protocol.mrtr import StateSigner, binding, secret_from_text
from trio_mcp_cancel._protocol.replay import SharedClaims, UsedStates
from trio_mcp_cancel._wire.jsonrpc import INVALID_PARAMS, MAX_NESTING, JsonRpcError, decode
from trio_mcp_cancel.backends.base import BackendUnavailable
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import McpHttpApp, app_from_env
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks
from trio_mcp_cancel.stdio import serve_mcp_stdio
from trio_mcp_cancel.testing import McpError, McpTestClient, open_test_client

from _support.asgi import AsgiClient, HttpExchange, modern_headers, modern_request
from _support.deploy import RedisServer
from _support.redis import prefix, redis

__all__ = ["prefix", "redis"]  # pytest fixtures

CAPS = {"elicitation": {}}
ANSWER = {"ok": {"action": "accept", "content": {"ok": True}}}
ADDRESS = ("192.0.2.1", 1000)


def build(**options: Any) -> tuple[McpServer, list[str]]:
    """One "worker": a tool that asks first, and tools that fail or take anything."""
    server = McpServer("hostile-mrtr", "1.0", **options, extensions=[Tasks()])
    ran: list[str] = []

    @server.tool()
    async def confirm(ctx: Context, item: str) -> str | InputRequired:
        answer = (ctx.input_responses or {}).get("ok")
        if answer is None or ctx.request_state is None:
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            return InputRequired(
                {"ok": InputRequired.elicit(f"Delete {item}?", schema)}, state={"item": item}
            )
        ran.append(ctx.request_state["item"])
        return f"deleted {ctx.request_state['item']}"

    @server.tool()
    async def take(ctx: Context, data: dict[str, Any]) -> str:
        ran.append("take")
        return "taken"

    @server.tool()
    async def boom(ctx: Context) -> str:
        raise RuntimeError(f"tool broke on request {ctx.request_id}")

    @server.resource("test://broken", name="broken")
    async def broken(ctx: Context) -> str:
        raise RuntimeError(f"reader broke on request {ctx.request_id}")

    return server, ran


def retry_params(state: str, item: str = "file.txt") -> dict[str, Any]:
    return {
        "name": "confirm",
        "arguments": {"item": item},
        "inputResponses": ANSWER,
        "requestState": state,
    }


def nested_text(depth: int) -> str:
    """JSON text of objects nested *depth* levels (built as text: no recursion here)."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


# -- the secret's text form and app_from_env ---------------------------------------------


def test_the_runners_token_urlsafe_secret_is_accepted_and_decoded() -> None:
    text = secrets.token_urlsafe(32)
    assert secret_from_text(text) == base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    # openssl rand -base64 32: the standard alphabet, padded, with a newline.
    raw = secrets.token_bytes(48)
    assert secret_from_text(base64.b64encode(raw).decode() + "\n") == raw


@pytest.mark.parametrize(
    ("environ", "named", "why"),
    [
        ({"MCP_STATE_SECRET": "c2hvcnQ"}, "MCP_STATE_SECRET", "at least 32 bytes, not 5"),
        (
            {"MCP_STATE_SECRET": "correct horse battery staple, long enough!"},
            "MCP_STATE_SECRET",
            "other characters",
        ),
        (
            {"MCP_STATE_SECRET": secrets.token_urlsafe(32), "MCP_STATE_SECRET_PREVIOUS": "x" * 8},
            "MCP_STATE_SECRET_PREVIOUS",
            "at least 32 bytes",
        ),
        (
            {"MCP_STATE_SECRET_PREVIOUS": secrets.token_urlsafe(32)},
            "MCP_STATE_SECRET_PREVIOUS",
            "MCP_STATE_SECRET is not",
        ),
    ],
)
def test_a_bad_state_secret_stops_the_worker_naming_the_variable(
    environ: dict[str, str], named: str, why: str
) -> None:
    server, _ = build()
    with pytest.raises(ValueError, match=named) as refused:
        app_from_env(server, environ)
    assert why in str(refused.value)
    for value in environ.values():
        assert value not in str(refused.value)  # a secret is never echoed


def test_app_from_env_seals_with_the_shared_secret_and_opens_with_the_previous() -> None:
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    server, _ = build()
    app_from_env(server, {"MCP_STATE_SECRET": new, "MCP_STATE_SECRET_PREVIOUS": old})
    assert server.registration.state_signer.secret == secret_from_text(new)
    assert server.registration.state_signer.previous == secret_from_text(old)
    # In code: bytes or the same text form.
    key = secrets.token_bytes(32)
    assert build(state_secret=key)[0].registration.state_signer.secret == key
    assert build(state_secret=new)[0].registration.state_signer.secret == secret_from_text(new)
    with pytest.raises(ValueError, match="state_secret_previous needs state_secret"):
        build(state_secret_previous=key)


# -- two workers over HTTP ---------------------------------------------------------------


@asynccontextmanager
async def workers(*environs: dict[str, str], **options: Any) -> AsyncIterator[list[AsgiClient]]:
    """One ASGI client per environment, each on a server and app of its own."""
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        clients = []
        for environ in environs:
            server, _ = build()
            registry = await stack.enter_async_context(open_registry(grace_period=1))
            app = app_from_env(server, environ, registry=registry, **options)
            client = AsgiClient(app, nursery)
            await stack.enter_async_context(client.lifespan())
            clients.append(client)
        yield clients
        for client in clients:
            with trio.fail_after(60):
                await client.wait_all_done()
            client.check()


async def post(client: AsgiClient, message: dict[str, Any] | bytes) -> HttpExchange:
    headers = modern_headers("tools/call", "confirm" if isinstance(message, dict) else None)
    exchange = client.start("POST", headers, message, client=ADDRESS)
    with trio.fail_after(60):
        await exchange.done.wait()
    return exchange


def reply(exchange: HttpExchange) -> dict[str, Any]:
    if exchange.is_sse:
        return next(m for m in exchange.messages() if "id" in m)
    body: dict[str, Any] = exchange.json()
    return body


async def ask(client: AsgiClient, item: str = "file.txt") -> str:
    message = modern_request(
        1, "tools/call", {"name": "confirm", "arguments": {"item": item}}, capabilities=CAPS
    )
    result = reply(await post(client, message))["result"]
    assert result["resultType"] == "input_required"
    state: str = result["requestState"]
    return state


async def answer(client: AsgiClient, state: str, request_id: int = 2) -> dict[str, Any]:
    return reply(
        await post(
            client, modern_request(request_id, "tools/call", retry_params(state), capabilities=CAPS)
        )
    )


async def test_a_retry_on_another_worker_succeeds_with_the_shared_secret(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shared = {"MCP_STATE_SECRET": secrets.token_urlsafe(32)}
    async with workers(shared, shared, {}) as (first, second, unshared):
        done = await answer(second, await ask(first))
        assert done["result"]["content"][0]["text"] == "deleted file.txt"
        # A worker with a secret of its own (the old default) refuses it.
        refused = await answer(unshared, await ask(first))
        assert refused["error"]["code"] == INVALID_PARAMS
        assert "integrity" in refused["error"]["message"]


async def test_rotation_opens_old_states_while_the_previous_secret_is_set(
    autojump_clock: trio.testing.MockClock,
) -> None:
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    before = {"MCP_STATE_SECRET": old}
    during = {"MCP_STATE_SECRET": new, "MCP_STATE_SECRET_PREVIOUS": old}
    after = {"MCP_STATE_SECRET": new}
    async with workers(before, during, after) as (old_worker, rotated, done_rotating):
        sealed_before = await ask(old_worker)
        assert "result" in await answer(rotated, sealed_before)
        # States sealed during the rotation use the new secret: the old worker cannot
        # open them, the fully rotated one can.
        assert "error" in await answer(old_worker, await ask(rotated))
        assert "result" in await answer(done_rotating, await ask(rotated))
        # Once the previous secret is removed, an old state is refused.
        refused = await answer(done_rotating, await ask(old_worker))
        assert refused["error"]["code"] == INVALID_PARAMS


def test_the_previous_secret_opens_but_never_seals() -> None:
    old, new = secrets.token_bytes(32), secrets.token_bytes(32)
    bound = binding("alice", "tools/call", "t", {})
    rotated = StateSigner(new, previous=old)
    assert rotated.open(StateSigner(old).seal(1, bound), bound) == 1
    with pytest.raises(JsonRpcError, match="integrity"):
        StateSigner(old).open(rotated.seal(2, bound), bound)
    assert StateSigner(new).open(rotated.seal(3, bound), bound) == 3


# -- one spelling ---------------------------------------------------------------------------


SIGNER = StateSigner(b"k" * 32)
BOUND = binding("alice", "tools/call", "t", {"x": 1})


def respellings(token: str) -> list[str]:
    """Other spellings lenient base64 would decode to the same bytes."""
    head, _, tag = token.partition(".")
    # The last character of a 43-character tag carries 2 unused bits.
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    index = last.index(tag[-1])
    bits = [last[(index & ~3) | low] for low in range(4) if (index & ~3) | low != index]
    return [
        f"{head}==.{tag}",
        f"{head}.{tag}=",
        f"{head}.{tag}==",
        f"{head}=.{tag}=",
        f"{head}.{tag}\n",
        f" {head}.{tag}",
        f"{head}.{tag[:10]}\n{tag[10:]}",
        *(f"{head}.{tag[:-1]}{b}" for b in bits),
        f"{head.replace('-', '+').replace('_', '/')}.{tag.replace('-', '+').replace('_', '/')}",
    ]


def test_a_token_has_one_spelling() -> None:
    token = SIGNER.seal({"n": 1}, BOUND)
    for other in respellings(token):
        if other == token:
            continue  # no '-' or '_' to translate
        with pytest.raises(JsonRpcError) as refused:
            SIGNER.open(other, BOUND)
        assert refused.value.code == INVALID_PARAMS
    assert SIGNER.open(token, BOUND) == {"n": 1}


@given(
    state=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=8,
    ),
    padding=st.sampled_from(["=", "==", "===", "\n", "%3D"]),
    where=st.sampled_from(["head", "tag"]),
)
def test_any_padded_spelling_of_any_token_is_refused(state: Any, padding: str, where: str) -> None:
    token = SIGNER.seal(state, BOUND)
    head, _, tag = token.partition(".")
    other = f"{head}{padding}.{tag}" if where == "head" else f"{token}{padding}"
    with pytest.raises(JsonRpcError, match="malformed"):
        SIGNER.open(other, BOUND)
    assert SIGNER.open(token, BOUND) == state


# -- one use ----------------------------------------------------------------------------------


@asynccontextmanager
async def memory_client(server: McpServer) -> AsyncIterator[McpTestClient]:
    async with open_test_client(server, client_capabilities=CAPS) as client:
        yield client


async def test_a_state_is_used_once_even_by_its_own_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server, ran = build()
    async with memory_client(server) as client:
        first = await client.call_tool("confirm", {"item": "file.txt"})
        state = first["requestState"]
        done = await client.request("tools/call", retry_params(state))
        assert done["content"][0]["text"] == "deleted file.txt"
        for _ in range(50):
            with pytest.raises(McpError) as replayed:
                await client.request("tools/call", retry_params(state))
            assert replayed.value.code == INVALID_PARAMS
            assert "used already" in replayed.value.message
        # Fifty copies at once: one of them runs.
        again = (await client.call_tool("confirm", {"item": "twice.txt"}))["requestState"]
        calls = [
            client.start_request("tools/call", retry_params(again, "twice.txt")) for _ in range(50)
        ]
        await client.settle()
        answered = [call.response for call in calls]
        assert sum(1 for r in answered if r is not None and "result" in r) == 1
        assert sum(1 for r in answered if r is not None and "error" in r) == 49
    assert ran == ["file.txt", "twice.txt"]


async def test_a_refused_copy_does_not_spend_the_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Only a state that verified is used: a forged or misdirected copy spends nothing."""
    server, ran = build()
    async with memory_client(server) as client:
        state = (await client.call_tool("confirm", {"item": "file.txt"}))["requestState"]
        for params in (
            retry_params(state + "="),
            retry_params(state, item="other.txt"),
            retry_params(state[:-1] + ("A" if state[-1] != "A" else "Q")),
        ):
            with pytest.raises(McpError) as refused:
                await client.request("tools/call", params)
            assert refused.value.code == INVALID_PARAMS
        assert ran == []
        done = await client.request("tools/call", retry_params(state))
        assert done["content"][0]["text"] == "deleted file.txt"


async def test_a_replayed_retry_creates_no_second_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The retry that carries the answers creates the task (``before_task``): once."""
    server = McpServer("hostile-mrtr-tasks", extensions=[Tasks(TaskManager())])
    ran: list[str] = []

    async def ask_first(ctx: Context) -> InputRequired | None:
        if ctx.input_responses is None:
            return InputRequired(
                {"ok": InputRequired.elicit("Sure?", {"type": "object"})}, state="asked"
            )
        return None

    @server.tool(task="required", before_task=ask_first)
    async def launch(ctx: Context) -> str:
        ran.append("launched")
        return "launched"

    caps = {**CAPS, "extensions": {"io.modelcontextprotocol/tasks": {}}}
    async with trio.open_nursery() as nursery:
        await nursery.start(server.dispatcher.extension(Tasks).manager.run)
        async with open_test_client(server, client_capabilities=caps) as client:
            first = await client.request("tools/call", {"name": "launch"})
            retry = {
                "name": "launch",
                "inputResponses": ANSWER,
                "requestState": first["requestState"],
            }
            created = await client.request("tools/call", retry)
            assert created["resultType"] == "task"
            for _ in range(10):
                with pytest.raises(McpError, match="used already"):
                    await client.request("tools/call", retry)
            await client.settle()
        nursery.cancel_scope.cancel()
    assert ran == ["launched"]


async def test_the_used_set_is_bounded_and_forgets_its_oldest_when_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    used = UsedStates(max_entries=3)
    with caplog.at_level(logging.WARNING, "trio_mcp_cancel.server"):
        for n in range(10):
            assert await used.use(bytes([n]) * 32, expires_at=1000.0, now=0.0)
    assert len(used) == 3
    assert not await used.use(bytes([9]) * 32, expires_at=1000.0, now=0.0)
    assert await used.use(bytes([0]) * 32, expires_at=1000.0, now=0.0)  # forgotten
    full = [r for r in caplog.records if "forgetting the oldest" in r.getMessage()]
    assert len(full) == 1  # rate-limited: seven evictions, one line
    # Expired entries go first, without a warning.
    caplog.clear()
    with caplog.at_level(logging.WARNING, "trio_mcp_cancel.server"):
        assert await used.use(b"z" * 32, expires_at=3000.0, now=2000.0)
    assert len(used) == 1 and caplog.records == []


class DownBackend:
    """A backend whose shared claim always fails (Redis down)."""

    async def claim_once(self, key: str, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        raise BackendUnavailable("Redis is unavailable (state.claim): down")


class HungBackend:
    """A backend whose shared claim never answers (Redis SIGSTOPped)."""

    async def claim_once(self, key: str, ttl: float) -> bool:
        await trio.sleep_forever()


@pytest.mark.parametrize("backend", [DownBackend(), HungBackend()])
async def test_when_the_backend_is_down_or_hung_each_worker_still_refuses_what_it_saw(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    backend: SharedClaims,
) -> None:
    used = UsedStates(shared=backend)
    start = trio.current_time()
    with caplog.at_level(logging.WARNING, "trio_mcp_cancel.server"):
        for n in range(5):
            assert await used.use(bytes([n]) * 32, expires_at=1000.0, now=0.0)
            assert not await used.use(bytes([n]) * 32, expires_at=1000.0, now=0.0)
    # A hung backend costs each first use the short claim timeout, no more.
    assert trio.current_time() - start <= 5 * used.shared_timeout
    down = [r for r in caplog.records if "backend is unavailable" in r.getMessage()]
    assert len(down) == 1


async def test_a_state_used_on_one_worker_is_refused_on_every_other_through_redis(
    redis: RedisServer, prefix: str
) -> None:
    shared = {"MCP_STATE_SECRET": secrets.token_urlsafe(32)}
    backends = [
        RedisBackend(redis.url, prefix=prefix, op_timeout=1.0, reconnect_delay=0.2)
        for _ in range(2)
    ]
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        clients = []
        for backend in backends:
            server, _ = build()
            registry = await stack.enter_async_context(open_registry(grace_period=1))
            app = McpHttpApp(server, registry, backend=backend)
            app_from_env(server, shared)  # the shared secret, as every worker reads it
            assert server.dispatcher.runtime.used_states.shared is backend
            client = AsgiClient(app, nursery)
            await stack.enter_async_context(client.lifespan())
            clients.append(client)
        first, second = clients
        state = await ask(first)
        assert "result" in await answer(second, state)
        for worker in (first, second):
            refused = await answer(worker, state)
            assert "used already" in refused["error"]["message"]
        # A fresh state still works across workers.
        assert "result" in await answer(first, await ask(second))


# -- depth bombs ------------------------------------------------------------------------------


@given(shape=st.lists(st.sampled_from(["[", "{"]), min_size=1, max_size=3 * MAX_NESTING))
@example(shape=["["] * (MAX_NESTING - 3))
@example(shape=["{"] * (MAX_NESTING - 2))
@example(shape=["[", "{"] * ((MAX_NESTING - 3) // 2) + ["["])
@example(shape=["{", "["] * ((MAX_NESTING - 2) // 2))
def test_a_message_may_nest_exactly_max_nesting_levels(shape: list[str]) -> None:
    """Arrays and objects alike, wide or narrow: refused exactly when deeper than the bound."""
    text = "1"
    for opener in reversed(shape):
        text = f"[{text},2,[]]" if opener == "[" else f'{{"k":{text},"w":{{}}}}'
    # Wrapped in a request: the message and its params add two levels, the empty
    # container beside the innermost value one more.
    message = f'{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"p":{text}}}}}'
    depth = len(shape) + 3
    if depth <= MAX_NESTING:
        assert isinstance(decode(message), dict)
    else:
        with pytest.raises(JsonRpcError) as refused:
            decode(message)
        assert (refused.value.code, refused.value.request_id) == (INVALID_PARAMS, 1)


async def test_depth_bombed_arguments_are_invalid_params_over_http_without_a_traceback(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    shared = {"MCP_STATE_SECRET": secrets.token_urlsafe(32)}
    async with workers(shared) as (client,):
        state = await ask(client)
        with caplog.at_level(logging.DEBUG):
            for depth in (MAX_NESTING, 500, 980, 5000):
                body = (
                    '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"confirm",'
                    f'"arguments":{{"item":"x","deep":{nested_text(depth)}}},'
                    f'"requestState":"{state}","_meta":'
                    + json.dumps(modern_request(0, "x", capabilities=CAPS)["params"]["_meta"])
                    + "}}"
                )
                exchange = await post(client, body.encode())
                error = reply(exchange)
                assert exchange.status == 400
                if depth <= 500:
                    # (Deeper, the parser itself may give up first, depending on the
                    # stack it runs on: -32700, no traceback either.)
                    assert error["id"] == 7
                    assert error["error"]["code"] == INVALID_PARAMS
                    assert f"deeper than {MAX_NESTING} levels" in error["error"]["message"]
                else:
                    assert error["error"]["code"] in (INVALID_PARAMS, -32700)
        assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
        # The state was never used: the bomb did not reach it.
        assert "result" in await answer(client, state)


async def test_depth_bombs_are_invalid_params_on_stream_transports(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server, ran = build()
    async with memory_client(server) as client:
        # At the bound (the message, params, arguments, data: 4 levels) it is served.
        data = json.loads(nested_text(MAX_NESTING - 3))
        assert (await client.call_tool("take", {"data": data}))["content"][0]["text"] == "taken"
        with pytest.raises(McpError) as refused:
            await client.call_tool("take", {"data": {"a": data}})
        assert refused.value.code == INVALID_PARAMS
        assert "deeper than" in refused.value.message
        # Hundreds of levels with a requestState, as raw text (the was 980 deep;
        # there the parser itself may give up first, depending on its stack: -32700).
        state = (await client.call_tool("confirm", {"item": "x"}))["requestState"]
        with caplog.at_level(logging.DEBUG):
            for depth in (500, 980):
                await client.send_text(
                    f'{{"jsonrpc":"2.0","id":"bomb{depth}","method":"tools/call","params":'
                    f'{{"name":"confirm","arguments":{{"item":"x","deep":{nested_text(depth)}}},'
                    f'"requestState":"{state}"}}}}'
                )
            await client.settle()
        errors = [m["error"] for m in client.unexpected if "error" in m]
        assert len(errors) == 2
        (bounced,) = [m for m in client.unexpected if m.get("id") == "bomb500"]
        assert bounced["error"]["code"] == INVALID_PARAMS
        assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert ran == ["take"]


async def test_a_depth_bomb_on_stdio_is_answered_and_the_line_after_it_served(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, mcp_registry: Registry
) -> None:
    server, ran = build()
    client_stream, server_stream = trio.testing.memory_stream_pair()
    bomb = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"take",'
        f'"arguments":{{"data":{nested_text(500)}}}}}}}\n'
    )
    fine = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "take", "arguments": {"data": {}}},
        }
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                serve_mcp_stdio, server, mcp_registry, stdin=server_stream, stdout=server_stream
            )
        )
        with caplog.at_level(logging.DEBUG):
            await client_stream.send_all(bomb.encode() + fine.encode() + b"\n")
            received = b""
            with trio.fail_after(10):
                while received.count(b"\n") < 2:
                    received += await client_stream.receive_some()
        await client_stream.send_eof()
    first, second = (json.loads(line) for line in received.splitlines())
    assert (first["id"], first["error"]["code"]) == (1, INVALID_PARAMS)
    assert second["id"] == 2 and "result" in second
    assert ran == ["take"]
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


# -- rate-limited failure logs ----------------------------------------------------------------


async def test_a_flood_of_one_failing_request_is_one_log_record(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server, _ = build()
    async with memory_client(server) as client:
        with caplog.at_level(logging.ERROR, "trio_mcp_cancel.server"):
            for _ in range(100):
                with pytest.raises(McpError) as failed:
                    await client.request("resources/read", {"uri": "test://broken"})
                assert failed.value.code == -32603  # every one is still answered
                result = await client.call_tool("boom")
                assert result["isError"] is True
    reads = [r for r in caplog.records if "resources/read" in r.getMessage()]
    tools = [r for r in caplog.records if "tool 'boom' failed" in r.getMessage()]
    assert len(reads) == 1 and len(tools) == 1
    assert reads[0].exc_info is not None and tools[0].exc_info is not None


def test_a_repeated_failure_is_logged_again_after_the_interval_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    log = RateLimitedLog(logging.getLogger("test.ratelog"), interval=60.0, now=lambda: clock[0])

    def fail(key: str) -> None:
        try:
            raise RuntimeError(key)
        except RuntimeError:
            log.exception(key, "%s failed", key)

    with caplog.at_level(logging.ERROR, "test.ratelog"):
        for _ in range(10):
            fail("a")
        fail("b")  # another failure is not suppressed by the first
        clock[0] = 59.0
        fail("a")
        clock[0] = 61.0
        fail("a")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "a failed",
        "b failed",
        "a failed (10 more like it suppressed in the last 60 s)",
    ]


def test_the_failure_log_forgets_its_oldest_key_when_full() -> None:
    log = RateLimitedLog(logging.getLogger("test.ratelog"), max_keys=2, now=lambda: 0.0)
    assert log._admit("a") == 0
    assert log._admit("b") == 0
    assert log._admit("c") == 0  # "a" forgotten
    assert log._admit("b") is None
    assert log._admit("a") == 0
