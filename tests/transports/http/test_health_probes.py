"""``/healthz`` and ``/readyz`` on the HTTP app (issue 34: health and readiness).

In memory under MockClock (:mod:`asgi_harness`): liveness is always ``200``;
readiness is ``200``, or ``503`` with the reason while the registry is not
running, while the app drains on shutdown, or while the shared backend says
it is unusable (a fake backend here; a real redis-server in
``test_health_probes_redis.py``).  Probes need no credentials, are no MCP
calls, and a flood of them asks the backend about once a second.  Then one
real socket through ``serve()``.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from trio_mcp_cancel import Registry, open_registry
from trio_mcp_cancel.backends import MemoryBackend
from trio_mcp_cancel.http import McpHttpApp, app_from_env, bearer_auth, serve, server_config
from trio_mcp_cancel.oauth import JwtVerifier, OAuthResource
from trio_mcp_cancel.server import Context, McpServer
from trio_mcp_cancel.transports.http.health import CHECK_TIMEOUT, CHECK_TTL

from _support.asgi import AsgiClient, HttpExchange, modern_call, modern_headers, served
from _support.oauth import in_process_auth_server
from _support.otel import make_otel

pytestmark = pytest.mark.mcp_registry(grace_period=30.0)

RESOURCE = "http://mcp.test/mcp"


def build(server: McpServer | None = None) -> McpServer:
    server = server or McpServer("health")

    @server.tool()
    async def wait(ctx: Context) -> str:
        """Run until cancelled."""
        await trio.sleep_forever()
        return "never"

    @server.tool()
    async def echo(ctx: Context, text: str) -> str:
        return text

    return server


@attrs.define(eq=False)
class CheckedBackend(MemoryBackend):
    """The in-memory backend, with a readiness check the test steers and counts."""

    answer: str | None = None
    delay: float = 0.0
    error: Exception | None = None
    checks: int = 0

    async def check_ready(self) -> str | None:
        self.checks += 1
        await trio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.answer


async def probe(client: AsgiClient, path: str, method: str = "GET", **options: Any) -> HttpExchange:
    exchange = await client.request(method, path=path, **options)
    assert exchange.complete
    return exchange


def body(exchange: HttpExchange) -> object:
    return json.loads(exchange.content)


# -- the answers -------------------------------------------------------------------


async def test_liveness_and_readiness_answer_200_with_a_small_json_body_that_no_cache_keeps(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    async with served(McpHttpApp(build(), mcp_registry)) as client:
        alive = await probe(client, "/healthz")
        ready = await probe(client, "/readyz")
    assert (alive.status, body(alive)) == (200, {"status": "ok"})
    assert (ready.status, body(ready)) == (200, {"status": "ready"})
    for exchange in (alive, ready):
        assert exchange.headers["content-type"] == "application/json"
        assert exchange.headers["cache-control"] == "no-store"
        assert int(exchange.headers["content-length"]) == len(exchange.content) < 64


async def test_head_answers_the_head_of_get_with_its_content_length_and_no_body(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend(answer="the backend is down")
    async with served(McpHttpApp(build(), mcp_registry, backend=backend)) as client:
        for path in ("/healthz", "/readyz"):
            got = await probe(client, path)
            head = await probe(client, path, "HEAD")
            assert head.status == got.status
            assert head.headers == got.headers
            assert head.content == b""
    assert got.status == 503  # the head of a 503 too


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_other_methods_are_405_allowing_get_and_head_and_their_body_is_read_and_dropped(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry, method: str
) -> None:
    async with served(McpHttpApp(build(), mcp_registry)) as client:
        for path in ("/healthz", "/readyz"):
            refused = await probe(client, path, method, body=b"x" * 5000, chunk_size=1000)
            assert refused.status == 405
            assert refused.headers["allow"] == "GET, HEAD"


# -- readiness ---------------------------------------------------------------------


async def test_before_any_registry_runs_readiness_is_503_starting_and_liveness_200(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = McpHttpApp(build())  # its registry opens with the lifespan, which has not run
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        alive = await probe(client, "/healthz")
        ready = await probe(client, "/readyz")
    assert alive.status == 200
    assert ready.status == 503
    assert body(ready) == {
        "status": "not ready",
        "reason": "starting: the registry is not running yet",
    }


async def test_a_plain_app_without_a_lifespan_inside_open_registry_is_ready(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_registry(), trio.open_nursery() as nursery:
        client = AsgiClient(McpHttpApp(build()), nursery)
        ready = await probe(client, "/readyz")
    assert (ready.status, body(ready)) == (200, {"status": "ready"})


async def test_after_the_lifespan_ended_readiness_is_503_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = McpHttpApp(build())
    async with trio.open_nursery() as nursery:
        client = AsgiClient(app, nursery)
        async with client.lifespan():
            assert (await probe(client, "/readyz")).status == 200
        ready = await probe(client, "/readyz")
        alive = await probe(client, "/healthz")
    assert (ready.status, body(ready)["reason"]) == (503, "stopped: the app's lifespan has ended")
    assert alive.status == 200


async def test_a_draining_app_is_not_ready_and_still_alive_while_it_answers_its_calls(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    app = McpHttpApp(build(), mcp_registry)
    async with served(app) as client:
        call = client.start("POST", modern_headers("tools/call", "wait"), modern_call(1, "wait"))
        await trio.sleep(1)
        assert (await probe(client, "/readyz")).status == 200
        app.begin_shutdown(within=5)
        ready = await probe(client, "/readyz")
        alive = await probe(client, "/healthz")
        assert not call.done.is_set()  # the call in flight is still being answered
        await call.done.wait()
    assert (ready.status, body(ready)) == (
        503,
        {"status": "not ready", "reason": "draining: the server is shutting down"},
    )
    assert alive.status == 200
    assert call.answer()["error"]["code"] == -32800


async def test_a_backend_that_says_it_is_unusable_makes_readiness_503_with_its_reason_and_back(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend(answer="Redis (the shared backend) is unreachable")
    async with served(McpHttpApp(build(), mcp_registry, backend=backend)) as client:
        down = await probe(client, "/readyz")
        alive = await probe(client, "/healthz")
        backend.answer = None
        cached = await probe(client, "/readyz")  # within the cache's second: the old answer
        await trio.sleep(CHECK_TTL)
        back = await probe(client, "/readyz")
    assert (down.status, body(down)["reason"]) == (503, "Redis (the shared backend) is unreachable")
    assert alive.status == 200  # liveness never asks the backend
    assert cached.status == 503
    assert back.status == 200
    assert backend.checks == 2


async def test_a_backend_check_that_hangs_or_raises_answers_503_within_its_bound(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend(delay=3600)
    async with served(McpHttpApp(build(), mcp_registry, backend=backend)) as client:
        began = trio.current_time()
        hung = await probe(client, "/readyz")
        took = trio.current_time() - began
        await trio.sleep(CHECK_TTL)
        backend.delay, backend.error = 0, RuntimeError("boom")
        failed = await probe(client, "/readyz")
    assert (hung.status, took) == (503, CHECK_TIMEOUT)
    assert "did not answer" in body(hung)["reason"]
    assert failed.status == 503
    assert body(failed)["reason"] == "the shared backend's readiness check failed"


async def test_a_draining_app_is_not_ready_without_asking_the_backend(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend()
    app = McpHttpApp(build(), mcp_registry, backend=backend)
    async with served(app) as client:
        app.begin_shutdown()
        for _ in range(3):
            assert (await probe(client, "/readyz")).status == 503
            await trio.sleep(CHECK_TTL)
    assert backend.checks == 0


# -- hostile -----------------------------------------------------------------------


async def test_a_probe_flood_asks_the_backend_about_once_a_second(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend(delay=0.05)  # a check in flight while the flood arrives
    app = McpHttpApp(build(), mcp_registry, backend=backend)
    async with served(app) as client:
        began = trio.current_time()
        burst = [client.start("GET", path="/readyz") for _ in range(1000)]
        for _ in range(50):  # then a steady stream, 10 a second for 5 s
            client.start("GET", path="/readyz")
            await trio.sleep(0.1)
        await client.wait_all_done()
        seconds = trio.current_time() - began
    assert all(exchange.status == 200 for exchange in client.exchanges)
    assert all(exchange.status == 200 for exchange in burst)
    assert backend.checks == app.probes.checks
    assert backend.checks <= seconds / CHECK_TTL + 1
    assert backend.checks >= 2  # it does ask again once the answer is old


async def test_a_probe_whose_client_leaves_during_the_check_leaves_the_next_probe_an_answer(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    backend = CheckedBackend(delay=0.5)
    async with served(McpHttpApp(build(), mcp_registry, backend=backend)) as client:
        async with trio.open_nursery() as nursery:
            first = AsgiClient(client.app, nursery)
            with trio.move_on_after(0.1):  # the first asker is cancelled mid-check
                await first.app(*_scope_for(first, "/readyz"))
        later = await probe(client, "/readyz")
    assert later.status == 200
    assert backend.checks == 2


def _scope_for(client: AsgiClient, path: str) -> tuple[object, object, object]:
    exchange = HttpExchange(b"")
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": b"",
        "headers": [],
        "client": client.client,
    }
    return scope, exchange.receive, exchange.send


# -- not MCP -----------------------------------------------------------------------


async def test_probes_need_no_credentials_under_oauth_and_never_reach_the_verifier(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    issuer, transport = in_process_auth_server()
    resource = OAuthResource(
        RESOURCE, [issuer.issuer], JwtVerifier(issuer.issuer, RESOURCE, transport=transport)
    )
    async with served(McpHttpApp(build(), mcp_registry, auth=resource)) as client:
        anonymous = [await probe(client, path) for path in ("/healthz", "/readyz")]
        junk = {"authorization": "Bearer not-a-token", "origin": "https://evil.example"}
        with_junk = [await probe(client, path, headers=junk) for path in ("/healthz", "/readyz")]
        mcp = await client.post(
            modern_headers("tools/call", "echo"), modern_call(1, "echo", {"text": "x"})
        )
    assert [e.status for e in anonymous + with_junk] == [200, 200, 200, 200]
    assert sum(issuer.calls.values()) == 0  # no discovery, no key fetch
    assert mcp.status == 401  # the MCP endpoint still is protected


async def test_probes_need_no_credentials_with_a_plain_authenticator(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    app = McpHttpApp(build(), mcp_registry, auth=bearer_auth({"secret": "alice"}))
    async with served(app) as client:
        statuses = [(await probe(client, path)).status for path in ("/healthz", "/readyz")]
        mcp = await client.post(
            modern_headers("tools/call", "echo"), modern_call(1, "echo", {"text": "x"})
        )
    assert statuses == [200, 200]
    assert mcp.status == 401


async def test_probes_are_not_mcp_calls_no_span_no_metric(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    otel = make_otel()
    server = build(McpServer("health", telemetry=otel.telemetry))
    async with served(McpHttpApp(server, mcp_registry)) as client:
        for _ in range(20):
            await probe(client, "/healthz")
            await probe(client, "/readyz")
        assert otel.spans() == []
        assert otel.points("mcp.server.requests.in_flight") == []
        call = await client.post(
            modern_headers("tools/call", "echo"), modern_call(1, "echo", {"text": "x"})
        )
    assert call.status == 200
    assert otel.spans() != []  # telemetry is on: a real call is seen


# -- paths -------------------------------------------------------------------------


async def test_the_probe_paths_are_configurable_and_none_turns_one_off(
    autojump_clock: trio.testing.MockClock, mcp_registry: Registry
) -> None:
    app = McpHttpApp(build(), mcp_registry, health_path="/live", ready_path=None)
    async with served(app) as client:
        live = await probe(client, "/live")
        gone = [await probe(client, path) for path in ("/healthz", "/readyz")]
    assert live.status == 200
    assert [e.status for e in gone] == [404, 404]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"health_path": "/mcp"}, "health_path '/mcp' is taken"),
        ({"path": "/readyz"}, "ready_path '/readyz' is taken"),
        ({"ready_path": "/healthz"}, "must differ"),
        ({"health_path": "healthz"}, "must be a path"),
        (
            {
                "auth": OAuthResource(
                    RESOURCE, ["https://as.test"], JwtVerifier("https://as.test", RESOURCE)
                ),
                "ready_path": "/.well-known/oauth-protected-resource/mcp",
            },
            "is taken",
        ),
    ],
)
def test_a_probe_path_that_would_shadow_the_mcp_endpoint_or_oauth_metadata_is_refused(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        McpHttpApp(build(), **options)  # type: ignore[arg-type]


def test_app_from_env_reads_the_probe_paths_and_none_turns_them_off() -> None:
    app = app_from_env(build(), {"MCP_HEALTH_PATH": "/live", "MCP_READY_PATH": "none"})
    assert (app.probes.health_path, app.probes.ready_path) == ("/live", None)
    default = app_from_env(build(), {})
    assert default.probes.paths == {"/healthz", "/readyz"}
    with pytest.raises(ValueError, match="MCP_READY_PATH"):
        app_from_env(build(), {"MCP_READY_PATH": "ready"})


# -- a real socket -----------------------------------------------------------------


async def test_serve_answers_the_probes_on_a_real_socket_and_turns_unready_when_draining(
    nursery: trio.Nursery,
) -> None:
    app = McpHttpApp(build())
    (url,) = await nursery.start(partial(serve, app, server_config(port=0)))
    with trio.fail_after(10):
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            alive = await client.get("/healthz")
            ready = await client.get("/readyz")
            head = await client.head("/readyz")
            refused = await client.post("/readyz", content=b"{}")
            app.begin_shutdown(within=1)
            draining = await client.get("/readyz")
    assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == str(len(ready.content))
    assert (refused.status_code, refused.headers["allow"]) == (405, "GET, HEAD")
    assert draining.status_code == 503
    assert draining.json()["reason"] == "draining: the server is shutting down"
    nursery.cancel_scope.cancel()
