"""An unauthenticated caller's tenant is its address bucket, exactly as the namespace rules say."""

from __future__ import annotations

import ipaddress

import pytest

from trio_mcp_cancel._core.namespace import GLOBAL_NAMESPACE, namespace_for, tenant_for

CLIENTS: list[object] = [
    ("127.0.0.1", 5000),
    ["10.0.0.7", 1],
    ("2001:db8::1", 443),
    ("::ffff:192.0.2.1", 80),
    ("fe80::1%eth0", 1),
    "192.0.2.9",
    ipaddress.ip_address("2001:db8:1:2::9"),
    ("/run/mcp.sock", 0),
    ("", 0),
    (),
    None,
    42,
]


@pytest.mark.parametrize("client", CLIENTS, ids=repr)
def test_the_tenant_without_a_principal_is_what_namespace_for_gives(client: object) -> None:
    namespace = namespace_for(principal=None, client=client)
    expected = None if namespace == GLOBAL_NAMESPACE else namespace
    assert tenant_for(None, client) == expected


def test_an_address_is_bucketed_and_a_socket_path_is_no_tenant() -> None:
    assert tenant_for(None, ("127.0.0.1", 1)) == "ip:127.0.0.1"
    assert tenant_for(None, ("2001:db8::1", 1)) == "ip:2001:db8::/64"
    assert tenant_for(None, ("/run/mcp.sock", 0)) is None
    assert tenant_for("alice", ("127.0.0.1", 1)) == "principal:alice"
