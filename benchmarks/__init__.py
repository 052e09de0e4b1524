"""Benchmarks of trio_mcp_cancel; run ``python3 dev.py bench``.

Each benchmark compares variants measured in the same ``trio.run``,
interleaved round by round, and reports medians and ratios.  Absolute
numbers depend on the machine and are printed for context only; the
targets are ratios, and a missed target is reported (``MISS``), never
raised.  Hard bounds (rows held after a flood) are asserted.

Modules:

* :mod:`benchmarks.bench_poll` -- ``cancelled()`` vs a dict lookup;
* :mod:`benchmarks.bench_tracked` -- ``tracked()`` vs a bare cancel scope,
  and vs the MCP Python SDK's per-request bookkeeping when ``mcp`` is
  installed;
* :mod:`benchmarks.bench_flood` -- notification and cancel floods, rows held
  and cost growth with table size;
* :mod:`benchmarks.bench_e2e` -- no-op ``tools/call`` throughput driven by
  ``wrk`` (native, pinned to its own core): the bare-hypercorn floor, ours in
  both eras, cancellable or not, and the MCP SDK on uvicorn[standard] (uvloop,
  httptools: :mod:`benchmarks._standard` installs them), plain uvicorn and hypercorn;
* :mod:`benchmarks.bench_latency` -- cancel latency over real sockets
  (notification and stream close to the tool, and to the client's end of
  stream), ours and the SDK's;
* :mod:`benchmarks.bench_memory` -- RSS per in-flight call at 1,000 and
  10,000 slow calls: the floor, ours, the SDK;
* :mod:`benchmarks.profile_hotpath` -- where a no-op call's time goes;
* :mod:`benchmarks.bench_early_cancel`, :mod:`benchmarks.bench_hostile` --
  early cancels and hostile clients (counts, not timings).

The servers of the end-to-end benchmarks are in :mod:`benchmarks._servers`,
each run in a process of its own.
"""
