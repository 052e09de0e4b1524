"""Settings every test shares.

The Redis backend's request-path timeout (``RedisBackend.HOT_TIMEOUT``,
0.1 s) is meant for a server whose event loop is not starved; a test suite
on a loaded two-core machine can miss it with Redis healthy, open the
circuit breaker and skip the writes a test then looks for.  Tests of the
breaker itself pass ``hot_timeout=`` (or freeze Redis) explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _patient_redis_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    try:
        from trio_mcp_cancel.backends.redis import RedisBackend
    except ImportError:  # the redis extra is not installed
        yield
        return
    monkeypatch.setattr(RedisBackend, "HOT_TIMEOUT", 1.0)
    monkeypatch.setenv("MCP_REDIS_HOT_TIMEOUT", "1.0")  # workers started by the tests
    yield
