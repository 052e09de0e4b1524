"""The validated token's principal is the isolation boundary: B touches nothing of A's.

Two clients of one authorization server (``client-a``, ``client-b``) get
real tokens; the principal is ``<issuer>#<sub>``.  B cannot use A's legacy
session, cancel A's call, read or cancel A's task, or replay A's MRTR
``requestState``, even knowing every id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.lowlevel

from trio_mcp_cancel import Registry
from trio_mcp_cancel.http import McpHttpApp
from trio_mcp_cancel.lowlevel import namespace_for
from trio_mcp_cancel.oauth import AccessToken, JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, InputRequired, McpServer, Tasks

from _support.asgi import (
    AsgiClient,
    HttpExchange,
    cancelled,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    modern_headers,
    modern_request,
    notification,
    served,
)
from _support.oauth import running_auth_server

RESOURCE = "http://mcp.test/mcp"
TIMEOUT = 20
WITH_TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def build(release: trio.Event, seen: list[str]) -> McpServer:
    server = McpServer("oauth-tenants", extensions=[Tasks()])

    @server.tool(task="optional")
    async def wait(ctx: Context) -> str:
        await release.wait()
        seen.append("wait finished")
        return "released"

    @server.tool()
    async def ask(ctx: Context) -> str | InputRequired:
        answer = (ctx.input_responses or {}).get("topic")
        if answer is None:
            schema = {"type": "object", "properties": {"topic": {"type": "string"}}}
            return InputRequired(
                {"topic": InputRequired.elicit("Which topic?", schema)}, state="asked"
            )
        return f"about {answer['content']['topic']}"

    return server


#: The registry of every test here (``mcp_registry``).
pytestmark = pytest.mark.mcp_registry(grace_period=5)


@asynccontextmanager
async def two_tenants(
    registry: Registry,
) -> AsyncIterator[tuple[AsgiClient, dict[str, str], dict[str, str], Any]]:
    release = trio.Event()
    seen: list[str] = []
    async with running_auth_server() as issuer:
        resource = OAuthResource(RESOURCE, [issuer.issuer], JwtVerifier(issuer.issuer, RESOURCE))
        app = McpHttpApp(build(release, seen), registry, auth=resource)
        # B's cancel of A's call id is kept as an early cancel in B's own session.
        async with served(app, no_leaks=False) as client:
            a = {"authorization": f"Bearer {issuer.mint('client-a', RESOURCE)}"}
            b = {"authorization": f"Bearer {issuer.mint('client-b', RESOURCE)}"}
            yield client, a, b, (release, seen, registry, issuer)
            release.set()


async def open_session(client: AsgiClient, auth: dict[str, str]) -> str:
    opened = await client.post({**legacy_headers(version=None), **auth}, initialize_message())
    assert opened.status == 200, opened.content
    session = opened.headers["mcp-session-id"]
    done = await client.post(
        {**legacy_headers(session), **auth}, notification("notifications/initialized")
    )
    assert done.status == 202
    return session


def reply(exchange: HttpExchange) -> dict[str, Any]:
    answer: dict[str, Any] = exchange.answer()
    return answer


async def test_principal_b_cannot_reuse_or_delete_principal_as_legacy_session(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_tenants(mcp_registry) as (client, a, b, _):
            session = await open_session(client, a)
            stolen = await client.post({**legacy_headers(session), **b}, legacy_call(1, "ask", {}))
            assert stolen.status == 404
            deleted = await client.request("DELETE", {**legacy_headers(session), **b})
            assert deleted.status == 404
            mine = await client.post({**legacy_headers(session), **a}, legacy_call(2, "ask", {}))
            assert mine.status == 200


async def test_principal_b_cannot_cancel_principal_as_call_by_its_request_id(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_tenants(mcp_registry) as (client, a, b, (release, seen, _registry, _)):
            session_a = await open_session(client, a)
            session_b = await open_session(client, b)
            call = client.start("POST", {**legacy_headers(session_a), **a}, legacy_call(7, "wait"))
            await call.wait_started()
            # B names A's request id, on its own session and (refused) on A's.
            for session in (session_b, session_a):
                sent = await client.post(
                    {**legacy_headers(session), **b}, cancelled(7, "not yours")
                )
                assert sent.status in (202, 404)
            for _ in range(10):
                await trio.lowlevel.checkpoint()
            assert not call.done.is_set()
            release.set()
            await call.done.wait()
            assert reply(call)["result"]["content"][0]["text"] == "released"
            assert seen == ["wait finished"]


async def test_principal_b_can_neither_read_nor_cancel_principal_as_task(
    mcp_registry: Registry,
) -> None:
    with trio.fail_after(TIMEOUT):
        async with two_tenants(mcp_registry) as (client, a, b, (release, seen, _registry, _)):
            created = await client.post(
                {**modern_headers("tools/call", "wait"), **a},
                modern_call(1, "wait", capabilities=WITH_TASKS),
            )
            result = reply(created)["result"]
            assert result["resultType"] == "task", result
            task_id = result["task"]["taskId"] if "task" in result else result["taskId"]
            for n, method in enumerate(("tasks/get", "tasks/cancel"), start=2):
                message = modern_request(n, method, {"taskId": task_id}, capabilities=WITH_TASKS)
                headers = modern_headers(method, task_id)
                theirs = await client.post({**headers, **b}, message)
                assert "error" in reply(theirs), reply(theirs)
            mine = await client.post(
                {**modern_headers("tasks/get", task_id), **a},
                modern_request(9, "tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS),
            )
            assert reply(mine)["result"]["status"] == "working", reply(mine)
            release.set()
            await client.wait_all_done()
            with trio.fail_after(5):
                while seen != ["wait finished"]:
                    await trio.sleep(0.01)


async def test_principal_b_cannot_replay_principal_as_mrtr_request_state(
    mcp_registry: Registry,
) -> None:
    caps = {"elicitation": {}}
    answer = {"topic": {"action": "accept", "content": {"topic": "trio"}}}
    with trio.fail_after(TIMEOUT):
        async with two_tenants(mcp_registry) as (client, a, b, _):
            asked = await client.post(
                {**modern_headers("tools/call", "ask"), **a},
                modern_call(1, "ask", capabilities=caps),
            )
            state = reply(asked)["result"]["requestState"]
            params = {"name": "ask", "arguments": {}, "inputResponses": answer}
            retry = modern_request(
                2, "tools/call", {**params, "requestState": state}, capabilities=caps
            )
            replayed = await client.post({**modern_headers("tools/call", "ask"), **b}, retry)
            assert reply(replayed)["error"]["code"] == -32602, reply(replayed)
            own = await client.post({**modern_headers("tools/call", "ask"), **a}, retry)
            assert reply(own)["result"]["content"][0]["text"] == "about trio"


def test_the_principal_is_the_issuer_and_the_subject() -> None:
    access = AccessToken("client-a", "https://as.test", frozenset({"mcp"}))
    assert access.principal == "https://as.test#client-a"
    # Too long to be a namespace component: a digest, never the shared address bucket.
    long = AccessToken("x" * 300, "https://as.test")
    assert long.principal.startswith("sha256:") and len(long.principal) == 71
    assert namespace_for(principal=long.principal, client=("192.0.2.1", 1)).startswith(
        "principal:sha256:"
    )
