"""Where the heap of an in-flight call goes: a tracemalloc diff per call, by allocation site.

``python -m benchmarks.memory_sites [N]``: the memory benchmark's server
(``ours``, a legacy session, resumable streams), warmed up like
:mod:`.bench_memory`, then tracemalloc started, *N* slow calls opened (each
on its own connection, suspended after one progress message), and the heap
growth divided by *N*, grouped by the source line that allocated it.
Unlike the RSS rows this does not depend on the machine's load (nor on the
allocator's arenas), so it is the number to compare before and after a
change to a suspended call's structures.
"""

from __future__ import annotations

import json
import sys
import tempfile

import trio

from . import _client
from .bench_memory import _open_calls, warm


async def sites(n: int, kind: str = "ours", top: int = 40) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        async with _client.server(kind) as server:
            await warm(server)
            await _client.stats(server, "tm-start", "40")
            conns = await _open_calls(server, n)
            await _client.stats(server, "tm-top", f"{tmp}/after")
            for conn in conns:
                await conn.aclose()
        return _report(f"{tmp}/after", n, top)


def _report(path: str, n: int, top: int) -> str:
    import tracemalloc

    with open(path + ".json") as file:
        before_path = json.load(file)["before"]
    diff = tracemalloc.Snapshot.load(path).compare_to(
        tracemalloc.Snapshot.load(before_path), "traceback"
    )
    total = sum(d.size_diff for d in diff)
    lines = [f"heap growth per in-flight call: {total / n:,.0f} bytes ({n:,} calls)"]
    # Each allocation charged to the innermost frame in this library (else in
    # hypercorn, else where it was made): what our code caused, line by line.
    by_site: dict[str, list[float]] = {}
    for d in diff:
        frames = list(reversed(d.traceback))  # innermost first
        frame = next(
            (f for f in frames if "trio_mcp_cancel" in f.filename),
            next((f for f in frames if "hypercorn" in f.filename), frames[0]),
        )
        name = frame.filename.rsplit("site-packages/", 1)[-1].rsplit("/trio_mcp_cancel/", 1)[-1]
        inner = frames[0]
        where = f"{name}:{frame.lineno}"
        if inner is not frame:
            where += f" ({inner.filename.rsplit('/', 1)[-1]}:{inner.lineno})"
        entry = by_site.setdefault(where, [0.0, 0.0])
        entry[0] += d.size_diff
        entry[1] += d.count_diff
    ranked = sorted(by_site.items(), key=lambda item: -item[1][0])
    by_file: dict[str, float] = {}
    for where, (size, _) in ranked:
        name = where.split(":", 1)[0]
        by_file[name] = by_file.get(name, 0.0) + size
    lines.append("by file (the innermost frame in this library, else in hypercorn):")
    for name, size in sorted(by_file.items(), key=lambda item: -item[1])[:15]:
        lines.append(f"{size / n:8,.0f} B  {name}")
    lines.append("by line:")
    for where, (size, count) in ranked[:top]:
        lines.append(f"{size / n:8,.0f} B {count / n:6.2f} blocks  {where}")
    return "\n".join(lines)


def main() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    kind = sys.argv[2] if len(sys.argv) > 2 else "ours"
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    print(trio.run(sites, n, kind, top))


if __name__ == "__main__":
    main()
