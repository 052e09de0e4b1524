from __future__ import annotations

import ipaddress

import pytest

from trio_mcp_cancel._core.namespace import GLOBAL_NAMESPACE, client_bucket
from trio_mcp_cancel.lowlevel import namespace_for, namespace_from_asgi


def test_session_beats_principal_beats_ip() -> None:
    assert namespace_for(session_id="s1", principal="alice", client="192.0.2.1") == "session:s1"
    assert namespace_for(principal="alice", client="192.0.2.1") == "principal:alice"
    assert namespace_for(client="192.0.2.1") == "ip:192.0.2.1"
    assert namespace_for() == GLOBAL_NAMESPACE == "global"


def test_non_string_principal_is_ignored() -> None:
    assert namespace_for(principal=42, client="192.0.2.1") == "ip:192.0.2.1"
    assert namespace_for(principal={"id": "x"}, client="192.0.2.1") == "ip:192.0.2.1"


def test_principal_object_with_string_id() -> None:
    class Principal:
        id = "bob"

    assert namespace_for(principal=Principal()) == "principal:bob"


def test_empty_or_oversized_components_fall_through() -> None:
    assert namespace_for(session_id="", principal="alice") == "principal:alice"
    assert namespace_for(session_id="s" * 257, client="192.0.2.9") == "ip:192.0.2.9"


def test_prefixes_keep_namespaces_apart() -> None:
    assert namespace_for(principal="192.0.2.1") != namespace_for(client="192.0.2.1")
    assert namespace_for(session_id="alice") != namespace_for(principal="alice")


@pytest.mark.parametrize(
    ("address", "bucket"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("[2001:db8:1:3::1]", "2001:db8:1:3::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        (ipaddress.ip_address("198.51.100.4"), "198.51.100.4"),
        (("203.0.113.5", 51234), "203.0.113.5"),
        (["2001:db8::5", 443], "2001:db8::/64"),
    ],
)
def test_client_bucket(address: object, bucket: str) -> None:
    assert client_bucket(address) == bucket


@pytest.mark.parametrize("address", [None, "", "not-an-ip", "/tmp/sock", 12, ()])
def test_unparseable_client_has_no_bucket(address: object) -> None:
    assert client_bucket(address) is None
    assert namespace_for(client=address) == GLOBAL_NAMESPACE


def test_ipv6_hosts_in_one_64_share_a_scope() -> None:
    assert namespace_for(client="2001:db8:0:1::1") == namespace_for(
        client="2001:db8:0:1:dead::beef"
    )
    assert namespace_for(client="2001:db8:0:1::1") != namespace_for(client="2001:db8:0:2::1")


def test_scope_from_asgi() -> None:
    asgi = {"type": "http", "client": ("192.0.2.10", 4000), "headers": []}
    assert namespace_from_asgi(asgi) == "ip:192.0.2.10"
    assert namespace_from_asgi(asgi, principal="carol") == "principal:carol"
    assert namespace_from_asgi(asgi, session_id="abc", principal="carol") == "session:abc"
    with_state = {**asgi, "state": {"mcp_session_id": "s9", "principal": "dave"}}
    assert namespace_from_asgi(with_state) == "session:s9"
    assert namespace_from_asgi({"type": "http", "client": None}) == GLOBAL_NAMESPACE


def test_scope_from_asgi_ignores_the_raw_session_header() -> None:
    asgi = {
        "type": "http",
        "client": ("192.0.2.10", 4000),
        "headers": [(b"mcp-session-id", b"forged")],
    }
    assert namespace_from_asgi(asgi) == "ip:192.0.2.10"
