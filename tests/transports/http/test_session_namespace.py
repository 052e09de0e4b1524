"""A legacy session's namespace and header are worked out once, and mean what they did."""

from __future__ import annotations

from trio_mcp_cancel._core.namespace import namespace_for
from trio_mcp_cancel.transports.http.sessions import Session


def test_a_session_is_named_by_its_public_id_never_by_its_secret() -> None:
    session = Session("secret-id", None, 0.0, "ip:127.0.0.1")
    assert session.namespace == namespace_for(session_id=session.public_id)
    assert session.namespace == f"session:{session.public_id}"
    assert "secret-id" not in session.namespace
    assert session.header == (b"mcp-session-id", b"secret-id")


def test_a_public_id_that_cannot_name_a_namespace_leaves_it_to_the_tenant() -> None:
    # A record from a shared backend may carry any string: an empty or
    # oversized one is not a namespace component (namespace_for skips it).
    for public_id in ("", "x" * 257):
        session = Session("secret-id", None, 0.0, "ip:127.0.0.1", public_id)
        assert session.namespace is None
