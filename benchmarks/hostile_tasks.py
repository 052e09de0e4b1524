"""Hostile clients against the task store, over real sockets (issue 20, finding 4).

**Task-store flood.**  One process: hypercorn's Trio worker serving
:class:`McpHttpApp` on 127.0.0.1 with a :class:`MemoryTaskStore` that
already holds nearly ``max_tasks`` unexpired records of a hundred other
tenants (put straight into the store: the set-up is not what is measured).
A victim tenant makes a task, which completes, then measures its
``tools/list`` latency alone (*before*); then an attacking tenant floods
instant tasks from several connections at once, filling the store's last
slots and then getting refusals, while the victim measures again
(*during*).  Reported: the victim's median latency before and during, as a
ratio (the old store scanned every record on each creation once full:
8.3 -> 127 ms for the victim), the attacker's answers (created, refused by
which ``data.limit``), and whether the victim's finished task was still
readable afterwards (the old store evicted it to make room).

The flood shares the process (and its core) with the victim, so some rise
is the cost of serving the flood itself; what must not happen is a cost
that grows with the number of stored records.

Run: ``python -m benchmarks.hostile_tasks [--quick]`` (it is also part of
``python3 dev.py bench --only hostile``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import Counter
from typing import Any

import httpx
import trio

from trio_mcp_cancel import open_registry
from trio_mcp_cancel.backends.memory import MemoryTaskStore
from trio_mcp_cancel.backends.task_records import TaskRecord
from trio_mcp_cancel.http import McpHttpApp, bearer_auth
from trio_mcp_cancel.lowlevel import TaskManager
from trio_mcp_cancel.server import Context, McpServer, Tasks

from ._common import Row
from ._hostile_serve import serving

BENCH = "9 hostile"
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
ACCEPT = "application/json, text/event-stream"
#: The victim's latency during a flood into the big store may be at most this
#: many times its latency during the same flood into the small one.
TARGET_RATIO = 1.5
#: The attacker's concurrent connections.
WORKERS = 4


def _server(store: MemoryTaskStore) -> McpServer:
    server = McpServer("bench-hostile-tasks", extensions=[Tasks(TaskManager(store=store))])

    @server.tool(task="optional")
    async def instant(ctx: Context) -> str:
        return "done"

    return server


def _message(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": method}
    message["params"] = {**params, "_meta": meta}
    return json.dumps(message).encode()


def _headers(token: str, method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "accept": ACCEPT,
        "content-type": "application/json",
        "authorization": f"Bearer {token}",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    return headers


async def _fill(store: MemoryTaskStore, records: int, now: float) -> None:
    """Put *records* unexpired records of a hundred tenants straight into *store*."""
    per_tenant = max(1, records // 100)
    for i in range(records):
        tenant = f"principal:other-{i // per_tenant}"
        record = TaskRecord(
            task_id=f"prefilled-{i}",
            owner="stateless:" + tenant,
            tenant=tenant,
            status="completed",
            created_at=now,
            updated_at=now,
            ttl_ms=3_600_000,
            result={"content": []},
        )
        await store.create(record)


async def task_store_flood(
    max_tasks: int, headroom: int, samples: int, flood: int, workers: int
) -> dict[str, Any]:
    """The scenario of the module docstring; its measurements."""
    store = MemoryTaskStore(max_tasks=max_tasks)
    await _fill(store, max_tasks - headroom, time.time())
    server = _server(store)
    auth = bearer_auth({"victim-token": "victim", "mallory-token": "mallory"})
    answers: Counter[str] = Counter()
    async with open_registry(grace_period=1.0) as registry:
        app = McpHttpApp(server, registry, auth=auth)
        limits = httpx.Limits(max_connections=workers + 2, max_keepalive_connections=workers + 2)
        async with serving(app) as port, httpx.AsyncClient(limits=limits, timeout=30) as client:
            url = f"http://127.0.0.1:{port}/mcp"

            async def call(
                token: str, method: str, params: dict[str, Any], name: str | None
            ) -> Any:
                reply = await client.post(
                    url, headers=_headers(token, method, name), content=_message(1, method, params)
                )
                return reply.json()

            async def victim_latencies(n: int) -> list[float]:
                seconds = []
                for _ in range(n):
                    started = time.perf_counter()
                    answer = await call("victim-token", "tools/list", {}, None)
                    seconds.append(time.perf_counter() - started)
                    assert "result" in answer, answer
                return seconds

            created = await call("victim-token", "tools/call", {"name": "instant"}, "instant")
            task_id = created["result"]["taskId"]
            await server.dispatcher.extension(Tasks).manager.wait_idle()
            await victim_latencies(5)  # warm-up
            before = await victim_latencies(samples)

            async def attacker(count: int) -> None:
                for _ in range(count):
                    answer = await call(
                        "mallory-token", "tools/call", {"name": "instant"}, "instant"
                    )
                    if "result" in answer:
                        answers["created"] += 1
                    else:
                        answers[f"refused {answer['error'].get('data', {}).get('limit')}"] += 1

            during: list[float] = []
            flood_started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(workers):
                    nursery.start_soon(attacker, flood // workers)
                await trio.sleep(0.05)  # the flood is under way
                during = await victim_latencies(samples)
            flood_seconds = time.perf_counter() - flood_started
            await server.dispatcher.extension(Tasks).manager.wait_idle()
            kept = await call("victim-token", "tasks/get", {"taskId": task_id}, task_id)
    before_median, during_median = statistics.median(before), statistics.median(during)
    return {
        "max_tasks": max_tasks,
        "stored": len(store),
        "before": before_median,
        "during": during_median,
        "ratio": during_median / before_median,
        "answers": dict(sorted(answers.items())),
        "flood": sum(answers.values()),
        "flood_seconds": flood_seconds,
        "victim_task": kept.get("result", {}).get("status", "gone"),
    }


async def rows(quick: bool) -> list[Row]:
    """The rows for ``bench_hostile``'s table: a big and a small store, rounds interleaved."""
    big, small = (10_000 if quick else 100_000), 1_000
    rounds = 1 if quick else 3
    runs: dict[int, list[dict[str, Any]]] = {big: [], small: []}
    for round_ in range(rounds):
        for max_tasks in (big, small) if round_ % 2 == 0 else (small, big):
            runs[max_tasks].append(
                await task_store_flood(
                    max_tasks,
                    headroom=50,
                    samples=30 if quick else 200,
                    flood=200 if quick else 2000,
                    workers=WORKERS,
                )
            )

    def median(size: int, key: str) -> float:
        return float(statistics.median(r[key] for r in runs[size]))

    before, during = median(big, "before"), median(big, "during")
    control = median(small, "during")
    size_ratio = statistics.median(
        b["during"] / s["during"] for b, s in zip(runs[big], runs[small], strict=True)
    )
    last = runs[big][-1]
    answers = ", ".join(f"{n} {k}" for k, n in last["answers"].items())
    kept = [r["victim_task"] for rs in runs.values() for r in rs]
    return [
        Row(
            BENCH,
            f"task-store flood ({WORKERS} connections of one tenant, {big:,}-record store nearly"
            " full): other tenant's tools/list median, alone -> during",
            f"{before * 1000:.1f} -> {during * 1000:.1f} ms ({during / before:.2f}x)",
        ),
        Row(
            BENCH,
            f"task-store flood: the same, {big:,}- vs {small:,}-record store (the cost of"
            " creation must not grow with the records stored)",
            f"{during * 1000:.1f} vs {control * 1000:.1f} ms ({size_ratio:.2f}x)",
            f"<= {TARGET_RATIO:g}x",
            "PASS" if size_ratio <= TARGET_RATIO else "MISS",
        ),
        Row(
            BENCH,
            "task-store flood: attacker's instant tasks; other tenant's finished task",
            f"{answers} in {last['flood_seconds']:.1f} s; {last['stored']:,} stored;"
            f" its task {', '.join(sorted(set(kept)))}",
            "completed (nothing evicted)",
            "PASS" if set(kept) == {"completed"} else "MISS",
        ),
    ]


def main(argv: list[str]) -> None:
    from .__main__ import table

    print(table(trio.run(rows, "--quick" in argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
