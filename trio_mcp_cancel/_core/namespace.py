"""Derivation of the cancellation namespace: *whose* request id is this?

JSON-RPC ids are chosen by the client and are usually small integers, so an
id alone names nothing: every client has a request ``1``.  Cancellations are
therefore keyed by ``(namespace, id)``, with the namespace derived from the caller,
most specific first:

1. ``session:<id>`` - the MCP session the transport issued;
2. ``principal:<id>`` - the authenticated principal (string ids only);
3. ``ip:<bucket>`` - the client address: the IPv4 address itself, or the
   IPv6 ``/64`` prefix, because a host is routinely handed a whole ``/64``
   and could otherwise rotate addresses to multiply its quota;
4. ``global`` - nothing is known about the caller.

The prefixes keep the namespaces apart: a principal whose id happens to be
an IP address string does not share that client's rows.  The same request
shape must produce the same namespace on the request being cancelled and on the
notification that cancels it, which is why every component is per-client
and none is per-request.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "GLOBAL_NAMESPACE",
    "client_bucket",
    "is_private",
    "stateless",
    "namespace_for",
    "namespace_from_asgi",
    "tenant_for",
]

GLOBAL_NAMESPACE: Final = "global"

# Longest session/principal id that becomes part of a namespace.  Longer ones are
# not truncated (that would merge distinct callers) but refused, and the next
# component is tried.
_MAX_COMPONENT: Final = 256


def client_bucket(address: object) -> str | None:
    """Return the rate/quota bucket of a client address, or ``None``.

    IPv4 addresses (and IPv4-mapped IPv6 ones, ``::ffff:192.0.2.1``) are
    their own bucket; IPv6 addresses are bucketed by their ``/64`` prefix.
    ``address`` may be a string, an :mod:`ipaddress` object or an ASGI
    ``(host, port)`` pair.  Anything unparseable (a Unix socket path) gives
    ``None``.
    """
    if isinstance(address, (tuple, list)) and address:
        address = address[0]
    if isinstance(address, str):
        return _bucket_of_text(address)
    return _bucket_of_address(address)


@functools.lru_cache(maxsize=4096)
def _bucket_of_text(address: str) -> str | None:
    """:func:`client_bucket` of a textual address, cached: every HTTP request
    asks for its client's bucket, and parsing an address costs more than the
    rest of a no-op call's routing."""
    # Strip a zone index ("fe80::1%eth0"); it names our interface, not the peer.
    try:
        return _bucket_of_address(ipaddress.ip_address(address.split("%", 1)[0].strip("[]")))
    except ValueError:
        return None


def _bucket_of_address(address: object) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    return None


#: Prefix of the namespaces of stateless (modern HTTP) requests.  No client
#: message can name a request there: on that wire a client cancels by closing
#: its own stream, and a legacy ``notifications/cancelled`` from the same
#: address or principal must not reach a stateless request by its id.
STATELESS_PREFIX: Final = "stateless:"


def stateless(namespace: str) -> str:
    """The namespace of a stateless request from the caller *namespace* names."""
    return STATELESS_PREFIX + namespace


def is_private(namespace: str) -> bool:
    """Whether *namespace* belongs to one client: a session or an authenticated principal.

    An ``ip:`` or ``global`` namespace may be shared by strangers (behind a
    NAT or proxy), so nothing is kept there on a client's word alone.
    """
    return namespace.startswith(("session:", "principal:"))


def _component(value: object) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= _MAX_COMPONENT:
        return value
    return None


def namespace_for(
    *,
    session_id: object = None,
    principal: object = None,
    client: object = None,
) -> str:
    """Derive the namespace from plain values; see the module docstring for the order.

    ``principal`` may be a string id or an object with a string ``id``
    attribute.  Non-string ids are ignored rather than stringified: ``1`` and
    ``"1"`` would otherwise collide, and an object's ``str()`` is not a
    stable identity.
    """
    session = _component(session_id)
    if session is not None:
        return f"session:{session}"
    principal_id = _component(getattr(principal, "id", principal))
    if principal_id is not None:
        return f"principal:{principal_id}"
    bucket = client_bucket(client)
    if bucket is not None:
        return f"ip:{bucket}"
    return GLOBAL_NAMESPACE


def tenant_for(principal: object = None, client: object = None) -> str | None:
    """Who a caller is for per-tenant limits: ``principal:<id>``, ``ip:<bucket>`` or ``None``.

    The namespace rules without the session: a tenant opening many sessions
    (or connections) is still one tenant.
    """
    if principal is None:
        # Every unauthenticated HTTP request asks: the address bucket alone,
        # without namespace_for's session and principal steps (both empty).
        bucket = client_bucket(client)
        return None if bucket is None else f"ip:{bucket}"
    namespace = namespace_for(principal=principal, client=client)
    return None if namespace == GLOBAL_NAMESPACE else namespace


def namespace_from_asgi(
    asgi_scope: Mapping[str, Any],
    *,
    session_id: object = None,
    principal: object = None,
) -> str:
    """Derive the namespace of an ASGI ``http``/``websocket`` connection.

    ``session_id`` and ``principal`` are the *verified* values (a session the
    server issued, a principal its auth hook returned); when they are not
    given, ``asgi_scope["state"]`` entries ``"mcp_session_id"`` and
    ``"principal"`` are used.  The ``Mcp-Session-Id`` header itself is never
    trusted here: only the transport knows which sessions it issued.
    """
    state = asgi_scope.get("state") or {}
    if session_id is None:
        session_id = state.get("mcp_session_id")
    if principal is None:
        principal = state.get("principal")
    return namespace_for(
        session_id=session_id, principal=principal, client=asgi_scope.get("client")
    )
