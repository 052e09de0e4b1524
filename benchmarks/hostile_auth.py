"""Introspection flood: a legitimate new token's validation while made-up tokens pour in (issue 36).

One process, no sockets: an :class:`~trio_mcp_cancel.oauth.OAuthResource` with
an :class:`~trio_mcp_cancel.oauth.IntrospectionVerifier` whose authorization
server is an ASGI app in the same process (``httpx2.ASGITransport``).  The
server takes ``AS_LATENCY`` per introspection and, like a real one, rate-limits:
beyond ``AS_RATE`` introspections in a second it answers ``429`` with
``Retry-After: 1``.  Attacking tasks (``FLOOD_TASKS``, one address) send
made-up opaque tokens back to back; meanwhile a legitimate client (a new
address for each token, as new users arrive) gets new tokens validated one
after the other.  Reported: the legitimate tokens' validation latency
(p50/p99) and how many were validated, and how many of the flood's tokens
reached the authorization server.

Before issue 36 each made-up token was introspected: the server's rate limit
tripped, and its 429s failed the legitimate tokens (503) for the back-off
window.  The per-address budget keeps the flood to a trickle, so the server
never pushes back and a legitimate token costs one introspection.

Run: ``python -m benchmarks.hostile_auth [--quick]`` (also part of
``python3 dev.py bench --only hostile``).
"""

from __future__ import annotations

import json
import secrets
import statistics
import sys
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

import httpx2
import trio

from trio_mcp_cancel._auth.resource import Refusal
from trio_mcp_cancel.oauth import IntrospectionVerifier, OAuthResource

from ._common import Row

BENCH = "9 hostile"
ISSUER = "http://as.bench"
RESOURCE = "http://mcp.bench/mcp"
AS_LATENCY = 0.005
"""Seconds the authorization server takes per introspection."""
AS_RATE = 100
"""Introspections a second the authorization server answers before it says 429."""
FLOOD_TASKS = 8
ATTACKER = ("198.51.100.7", 40000)

Message = MutableMapping[str, Any]


class _AuthServer:
    """Introspection only: known tokens are active; rate-limited like a real server."""

    def __init__(self) -> None:
        self.active: set[str] = set()
        self.asked: Counter[str] = Counter()
        self._recent: deque[float] = deque()

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        token = parse_qs(body.decode()).get("token", [""])[0]
        self.asked["legitimate" if token in self.active else "made-up"] += 1
        now = time.monotonic()
        while self._recent and now - self._recent[0] > 1.0:
            self._recent.popleft()
        self._recent.append(now)
        await trio.sleep(AS_LATENCY)
        if len(self._recent) > AS_RATE:
            await _answer(send, 429, {"error": "slow_down"}, [(b"retry-after", b"1")])
            return
        document: dict[str, Any] = {"active": False}
        if token in self.active:
            document = {"active": True, "sub": "user", "aud": RESOURCE, "exp": time.time() + 300}
        await _answer(send, 200, document, [])


async def _answer(
    send: Callable[[Message], Awaitable[None]],
    status: int,
    document: dict[str, Any],
    extra: list[tuple[bytes, bytes]],
) -> None:
    headers = [(b"content-type", b"application/json"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(document).encode()})


async def introspection_flood(samples: int) -> dict[str, Any]:
    """Validate *samples* new tokens, one after the other, while the flood runs."""
    server = _AuthServer()
    verifier = IntrospectionVerifier(
        ISSUER,
        RESOURCE,
        "rs",
        "secret",
        endpoint=f"{ISSUER}/introspect",
        transport=httpx2.ASGITransport(app=server),
    )
    resource = OAuthResource(RESOURCE, [ISSUER], verifier)
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    flood: Counter[str] = Counter()

    async def attack() -> None:
        while True:
            headers = {"authorization": f"Bearer {secrets.token_urlsafe(24)}"}
            try:
                await resource.authenticate(headers, ATTACKER)
            except Refusal as refused:
                flood[str(refused.status)] += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for _ in range(FLOOD_TASKS):
            nursery.start_soon(attack)
        await trio.sleep(0.2)  # the flood is under way
        for n in range(samples):
            token = secrets.token_urlsafe(24)
            server.active.add(token)
            address = (f"203.0.{n // 250}.{n % 250 + 1}", 50000)
            began = time.perf_counter()
            try:
                await resource.authenticate({"authorization": f"Bearer {token}"}, address)
                outcomes["validated"] += 1
            except Refusal as refused:
                outcomes[str(refused.status)] += 1
            latencies.append(time.perf_counter() - began)
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    latencies.sort()
    return {
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "outcomes": outcomes,
        "asked": server.asked,
        "flood": flood,
    }


async def rows(quick: bool) -> list[Row]:
    """The row for ``bench_hostile``'s table."""
    samples = 40 if quick else 300
    run = await introspection_flood(samples)
    validated = run["outcomes"]["validated"]
    refused = ", ".join(f"{n} x {k}" for k, n in sorted(run["flood"].items()))
    return [
        Row(
            BENCH,
            f"new-token latency under an introspection flood ({FLOOD_TASKS} tasks of made-up"
            f" opaque tokens from one address; in-process AS, {AS_LATENCY * 1000:g} ms,"
            f" 429 beyond {AS_RATE}/s): a legitimate new token's validation p50 / p99",
            f"{run['p50'] * 1000:.1f} / {run['p99'] * 1000:.1f} ms; {validated}/{samples}"
            f" validated; the flood: {run['asked']['made-up']} reached the AS ({refused})",
            f"{samples}/{samples} validated",
            "PASS" if validated == samples else "MISS",
        )
    ]


def main(argv: list[str]) -> None:
    from .__main__ import table

    print(table(trio.run(rows, "--quick" in argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
