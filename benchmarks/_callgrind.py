"""Instructions a benchmark server executes per no-op call, counted by valgrind's callgrind.

A count that does not depend on what else the machine runs, where wrk's
calls per second do: the server (a :func:`benchmarks._servers.main` kind)
runs under ``valgrind --tool=callgrind``; its counters are dumped (and
zeroed) after a warm-up and again after *n* sequential keep-alive calls on
one connection, so the second dump holds exactly those calls.  Used by the
benchmarks that compare two servers' work per call
(:mod:`benchmarks.upstream_idle`, :mod:`benchmarks.eval_httptools`).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import _client

#: valgrind makes start-up (imports, hypercorn's bind) tens of times slower.
READY_WITHIN = 600


def available() -> bool:
    """Whether valgrind and ``callgrind_control`` are installed."""
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


async def instructions_per_call(
    kind: str, n: int, *, warm_up: int, modern: bool = False, session: bool = False
) -> float:
    """Instructions the *kind* server process executes per no-op call (*session*: in a
    legacy session it opens first), after *warm_up* calls on the same connection."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        wrapper = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no"]
        async with _client.server(kind, wrapper=wrapper, ready_within=READY_WITHIN) as server:
            if session:
                await _client.initialize(server)
            headers = _client.call_headers(server, "noop", modern=modern)
            conn = await _client.Connection.open(server.port)
            try:
                await _client.noop_calls(conn, warm_up, headers, modern=modern)
                _dump(server.pid)
                before = set(glob.glob(out + "*"))
                await _client.noop_calls(conn, n, headers, modern=modern)
                _dump(server.pid)
            finally:
                await conn.aclose()
            (new,) = set(glob.glob(out + "*")) - before
            return _total(new) / n


def _dump(pid: int) -> None:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)


def _total(path: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")
