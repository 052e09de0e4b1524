"""Micro-benchmarks of trio_mcp_cancel; run ``python3 dev.py bench``.

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
* :mod:`benchmarks.bench_e2e` -- requests/s through the ASGI transport
  (skipped until the transport exists).
"""
