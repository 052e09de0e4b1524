"""The httpcore2 internals the HTTP/2 stream reset relies on are still there, as it expects.

``trio_mcp_cancel._client.httpcore2_compat`` subclasses three httpcore2
classes and reads private attributes of them.  An httpcore2 release that
moves any of them must fail here (re-check the module, then widen
``CHECKED``), not leave users' cancels unseen by the server.
"""

from __future__ import annotations

import inspect
import logging
from importlib import metadata

import h2.connection
import httpcore2
import httpx2
import pytest

from trio_mcp_cancel._client import httpcore2_compat
from trio_mcp_cancel._client.httpcore2_compat import CHECKED, ENV, install, reset_default


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_the_installed_httpcore2_is_a_release_the_reset_was_checked_against() -> None:
    version = metadata.version("httpcore2")
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    first, last = CHECKED
    assert first <= major_minor <= last, f"re-check httpcore2_compat against {version}"
    assert reset_default().applied


def test_the_private_classes_and_methods_it_overrides_keep_their_shapes() -> None:
    from httpcore2._async.connection import AsyncHTTPConnection
    from httpcore2._async.http2 import AsyncHTTP2Connection

    assert inspect.iscoroutinefunction(AsyncHTTP2Connection._response_closed)
    assert _parameters(AsyncHTTP2Connection._response_closed) == ["self", "stream_id"]
    assert inspect.iscoroutinefunction(AsyncHTTP2Connection._write_outgoing_data)
    assert _parameters(AsyncHTTP2Connection._write_outgoing_data) == ["self", "request"]
    assert _parameters(httpcore2.AsyncConnectionPool.create_connection) == ["self", "origin"]
    # The connection learns its protocol late and assigns ``_connection`` then.
    assert "self._connection = AsyncHTTP2Connection(" in inspect.getsource(
        AsyncHTTPConnection.handle_async_request
    )
    assert "_connection" not in vars(AsyncHTTPConnection)  # an instance attribute, no property


def test_the_private_attributes_it_reads_exist_on_a_new_http2_connection() -> None:
    from httpcore2._async.connection import AsyncHTTPConnection
    from httpcore2._async.http2 import AsyncHTTP2Connection

    origin = httpcore2.Origin(b"http", b"127.0.0.1", 80)
    connection = AsyncHTTP2Connection(origin=origin, stream=None)  # type: ignore[arg-type]
    assert isinstance(connection._h2_state, h2.connection.H2Connection)
    assert connection._write_exception is None
    assert connection._network_stream is None
    assert callable(connection._write_lock.__aenter__)
    assert "_connection" in vars(AsyncHTTPConnection(origin=origin))


def test_an_http2_client_of_httpx2_is_a_plain_connection_pool_the_reset_can_change() -> None:
    client = httpx2.AsyncClient(http2=True, trust_env=False)
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert type(pool) is httpcore2.AsyncConnectionPool
    assert install(client)
    assert type(pool).__name__ == "ResettingPool"
    assert httpcore2.AsyncConnectionPool.__name__ == "AsyncConnectionPool"  # only this client


def test_importing_the_module_builds_nothing_on_httpcore2s_internals() -> None:
    # The subclasses are built on first use, so an httpcore2 that moved its
    # private modules cannot break ``import trio_mcp_cancel.client``.
    assert "ResettingPool" not in vars(httpcore2_compat)
    assert "AsyncHTTP2Connection" not in vars(httpcore2_compat)


def test_the_off_switch_leaves_the_client_as_httpx2_made_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, "off")
    client = httpx2.AsyncClient(http2=True, trust_env=False)
    with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel.client"):
        assert not install(client)
    assert type(client._transport._pool) is httpcore2.AsyncConnectionPool  # type: ignore[attr-defined]
    assert reset_default().reason == f"{ENV} turned it off"


def test_an_unchecked_httpcore2_release_is_left_alone_and_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(httpcore2_compat, "_version", lambda: "9.0.0")
    monkeypatch.setattr(httpcore2_compat, "_logged", set())
    with caplog.at_level(logging.WARNING, logger="trio_mcp_cancel.client"):
        for _ in range(3):
            client = httpx2.AsyncClient(http2=True, trust_env=False)
            assert not install(client)
            assert type(client._transport._pool) is httpcore2.AsyncConnectionPool  # type: ignore[attr-defined]
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP/2 streams cannot be reset (httpcore2 9.0.0 is not a release it was checked"
        " against): a modern cancel over HTTP/2 may not reach the server"
    ]
