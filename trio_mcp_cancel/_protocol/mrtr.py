"""Multi round-trip requests (MRTR, SEP-2322): ask the client for input without calling it.

In the modern era a server never sends requests to the client.  A tool (or
prompt, or resource reader) that needs input returns :class:`InputRequired`:
the client answers the ``inputRequests`` and **retries the same request**
with ``inputResponses`` and the ``requestState`` echoed.  Each round is an
independent request, so abandoning the flow needs no cancellation at all.

``requestState`` comes back from the client, so it is attacker-controlled:
:class:`StateSigner` seals it with an HMAC-SHA256 under a server secret,
binding the caller (its principal, else its client address bucket: an
anonymous state cannot be replayed from another address), the method and
target (tool name, prompt name or URI), the request's arguments and an
expiry.  A state that was altered,
replayed for another caller or request, or is too old is refused with
``-32602``, before the tool runs.  The state is signed, not encrypted: do
not put secrets in it.  Pure code with no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from .jsonrpc import INVALID_PARAMS, JsonRpcError

__all__ = ["MRTR_METHODS", "InputRequired", "StateSigner", "elicit", "list_roots", "sample"]

#: The only requests that may be answered ``input_required``.
MRTR_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
_CAPABILITY_OF: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


@attrs.frozen
class InputRequired:
    """Return this to ask the client for input; it retries with the answers.

    *requests* maps your keys to ``elicitation/create``, ``sampling/createMessage``
    or ``roots/list`` requests (see :func:`elicit`, :func:`sample`,
    :func:`list_roots`); the retry's ``ctx.input_responses`` has the same
    keys.  *state* is any JSON value you want back on the retry
    (``ctx.request_state``), sealed by the server.
    """

    requests: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    state: Any = None

    def __attrs_post_init__(self) -> None:
        if not self.requests and self.state is None:
            raise ValueError("InputRequired needs input requests, a state, or both")
        for key, request in self.requests.items():
            if not isinstance(key, str) or request.get("method") not in _CAPABILITY_OF:
                raise ValueError(f"input request {key!r}: unsupported method")

    def capabilities(self) -> set[str]:
        """The client capabilities these requests need."""
        return {_CAPABILITY_OF[request["method"]] for request in self.requests.values()}


def elicit(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """An ``elicitation/create`` (form) input request."""
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": dict(schema)},
    }


def sample(prompt: str, max_tokens: int = 100) -> dict[str, Any]:
    """A ``sampling/createMessage`` input request with one user text message."""
    return {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": max_tokens,
        },
    }


def list_roots() -> dict[str, Any]:
    """A ``roots/list`` input request."""
    return {"method": "roots/list", "params": {}}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def binding(caller: str | None, method: str, target: str, arguments: object) -> str:
    """What a state is bound to: who asked, what, and with which arguments (a digest).

    *caller* names who asked: ``principal:<id>`` when authenticated, else
    the client's address bucket (``ip:<bucket>``, see :mod:`.._core.namespace`),
    ``None`` only when nothing at all is known (stdio, tests).
    """
    return hashlib.sha256(_canonical([caller, method, target, arguments])).hexdigest()


@attrs.define
class StateSigner:
    """Seals and opens ``requestState`` values; see the module docstring.

    *secret* defaults to a random key, which is right for one process; servers
    behind a load balancer must share one secret (at least 32 bytes).  *now*
    is the wall clock (injectable for tests); *ttl* is in seconds.
    """

    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32))
    ttl: float = 600.0
    now: Callable[[], float] = time.time

    def __attrs_post_init__(self) -> None:
        if len(self.secret) < 32:
            raise ValueError("the requestState secret must be at least 32 bytes")

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self.secret, payload, hashlib.sha256).digest()

    def seal(self, state: object, bound_to: str) -> str:
        payload = _canonical({"s": state, "b": bound_to, "e": int(self.now() + self.ttl)})
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def open(self, token: object, bound_to: str) -> Any:
        """The state sealed in *token*; ``-32602`` when it was tampered with, misused or expired."""
        if not isinstance(token, str) or len(token) > 65536:
            raise _invalid("requestState must be a string")
        head, dot, tag = token.partition(".")
        try:
            payload, mac = _unb64(head), _unb64(tag)
        except (ValueError, TypeError):
            raise _invalid("requestState is malformed") from None
        if not dot or not hmac.compare_digest(mac, self._mac(payload)):
            raise _invalid("requestState failed its integrity check")
        fields = json.loads(payload)
        if not hmac.compare_digest(str(fields.get("b")), bound_to):
            raise _invalid("requestState belongs to another request")
        if not isinstance(fields.get("e"), int) or fields["e"] < self.now():
            raise _invalid("requestState expired")
        return fields.get("s")


def _invalid(why: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, f"Invalid params: {why}")


def input_required_result(required: InputRequired, token: str | None) -> dict[str, Any]:
    """The wire ``InputRequiredResult``."""
    result: dict[str, Any] = {"resultType": "input_required"}
    if required.requests:
        result["inputRequests"] = {k: dict(v) for k, v in required.requests.items()}
    if token is not None:
        result["requestState"] = token
    return result
