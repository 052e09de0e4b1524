"""What every test shares: settings, the markers by fixture, one server factory.

* The Redis backend's request-path timeout (``RedisBackend.HOT_TIMEOUT``,
  0.1 s) is meant for a server whose event loop is not starved; a test suite
  on a loaded two-core machine can miss it with Redis healthy, open the
  circuit breaker and skip the writes a test then looks for.  Tests of the
  breaker itself pass ``hot_timeout=`` (or freeze Redis) explicitly.
* A test that takes the ``redis`` fixture (``_support.redis``: a real
  redis-server) is marked ``redis`` here, so ``dev.py test --fast`` leaves it
  out without every such test saying so.  The other markers (``slow``,
  ``subprocess``, ``node``; see pyproject) are set in the test modules.
* ``mcp_server``: a fresh :func:`_support.cancellation_tools.probe_server` (``echo``
  plus the cancellation tools) for a test that needs no tools of its own.
  The library's own fixtures (``mcp_registry``, ``mcp_registry_config``,
  ``mcp_events``) and its ``mcp_registry`` marker come from its pytest plugin,
  loaded through its entry point: a test that needs other registry settings
  says ``@pytest.mark.mcp_registry(grace_period=5, ...)`` (a module:
  ``pytestmark``) and still takes the fixture instead of opening its own
  registry.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trio_mcp_cancel.server import McpServer

from _support.cancellation_tools import probe_server
from _support.repo_paths import ROOT

#: Fixtures that start a real redis-server: a test using one needs it.
REDIS_FIXTURES = frozenset({"redis", "cluster", "sentinel", "standalone"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REDIS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis)


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


@pytest.fixture(autouse=True, scope="session")
def _http_protocol() -> Iterator[None]:
    """``TEST_HTTP_PROTOCOL=httptools``: every hypercorn server in the run parses with httptools.

    ``test_httptools_protocol`` compares the two protocols byte for byte; this
    runs the rest of the HTTP tests over the httptools one too (CI: one more run).
    """
    if os.environ.get("TEST_HTTP_PROTOCOL", "h11") != "httptools":
        yield
        return
    import hypercorn.protocol

    from trio_mcp_cancel.transports.http.hypercorn_httptools import HttptoolsProtocol

    def always(*args: object) -> HttptoolsProtocol:
        return HttptoolsProtocol(*args)  # type: ignore[arg-type]

    always._trio_mcp_cancel_factory = True  # type: ignore[attr-defined]  # install() keeps it
    original = hypercorn.protocol.H11Protocol
    hypercorn.protocol.H11Protocol = always  # type: ignore[assignment,misc]
    yield
    hypercorn.protocol.H11Protocol = original  # type: ignore[misc]


@pytest.fixture
def mcp_server() -> McpServer:
    """A server with the probe tools: ``echo``, ``count``, ``stubborn``, ``helpers``, ``whoami``."""
    return probe_server()


@pytest.fixture(scope="session")
def node() -> Path:
    """The pinned Node 22 (``conformance/node_tools.py``) for the tests that run Node scripts.

    Skipped where the tooling is not installed, except on CI, which installs
    it (or fails loudly).
    """
    sys.path.insert(0, str(ROOT / "conformance"))
    import node_tools

    if not node_tools.installed():
        if os.environ.get("CI") != "true":
            pytest.skip("Node tooling not installed: run `python3 dev.py conformance` once")
        node_tools.ensure()
    path: Path = node_tools.node()
    return path
