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
not put secrets in it.  Pure code with no I/O (that a state is used only
once is :mod:`.replay`'s job).

Servers behind a load balancer share one secret (``MCP_STATE_SECRET``,
see :func:`secret_from_text`), else a retry landing on another worker is
refused.  Rotation: seal with the new secret and keep the old one as
*previous*, accepted for opening only, for at least one TTL (the longest
a state sealed under it stays valid), then drop it.

A token is ``<payload>.<mac>``, both unpadded URL-safe base64, and has
exactly one spelling: padding, other characters or non-zero trailing bits
are refused, so a token's MAC names it (the replay set keys on it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError

__all__ = [
    "MRTR_METHODS",
    "InputRequired",
    "OpenedState",
    "StateSigner",
    "elicit",
    "list_roots",
    "sample",
    "secret_from_text",
]

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
    or ``roots/list`` requests (built with :meth:`elicit`, :meth:`sample`,
    :meth:`list_roots`); the retry's ``ctx.input_responses`` has the same
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

    # The request builders are static methods, so that a tool doing MRTR by
    # hand needs one name: ``InputRequired({"ok": InputRequired.elicit(...)})``.

    @staticmethod
    def elicit(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """An ``elicitation/create`` (form) input request: *message* and the *schema* to fill."""
        return {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": message, "requestedSchema": dict(schema)},
        }

    @staticmethod
    def sample(prompt: str, max_tokens: int = 100) -> dict[str, Any]:
        """A ``sampling/createMessage`` input request with one user text message."""
        return {
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                "maxTokens": max_tokens,
            },
        }

    @staticmethod
    def list_roots() -> dict[str, Any]:
        """A ``roots/list`` input request."""
        return {"method": "roots/list", "params": {}}


#: The request builders, also as plain functions (the context's own rounds use them).
elicit = InputRequired.elicit
sample = InputRequired.sample
list_roots = InputRequired.list_roots


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_B64_TEXT: Final = re.compile(r"[A-Za-z0-9_-]*")


def _unb64(text: str) -> bytes:
    """Strict inverse of :func:`_b64`: only the one spelling :func:`_b64` makes decodes.

    ``urlsafe_b64decode`` alone ignores padding it does not need and the
    unused low bits of the last character, so one token would have
    several spellings that all verify.
    """
    if len(text) % 4 == 1 or _B64_TEXT.fullmatch(text) is None:
        raise ValueError("not unpadded URL-safe base64")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not the canonical spelling")
    return data


#: The text form of a shared secret: base64 (URL-safe or standard alphabet), padding optional.
_SECRET_TEXT: Final = re.compile(r"[A-Za-z0-9_+/-]+={0,2}")


def secret_from_text(text: str, name: str = "MCP_STATE_SECRET") -> bytes:
    """The ``requestState`` key written as text (in *name*): base64 of at least 32 bytes.

    URL-safe or standard alphabet, padding optional, surrounding whitespace
    ignored: ``python -c "import secrets; print(secrets.token_urlsafe(32))"``
    or ``openssl rand -base64 32`` make one.  The decoded bytes are the HMAC
    key.  A passphrase is refused rather than stretched: the key must be
    random, and saying so beats a KDF that hides a weak one.  A bad value
    raises :class:`ValueError` naming *name* (never echoing the value).
    """
    text = text.strip()
    if _SECRET_TEXT.fullmatch(text) is None:
        raise ValueError(
            f"{name} must be base64 (e.g. secrets.token_urlsafe(32)): it has other characters"
        )
    body = text.rstrip("=").replace("+", "-").replace("/", "_")
    try:
        key = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise ValueError(f"{name} is not valid base64 (e.g. secrets.token_urlsafe(32))") from None
    if len(key) < 32:
        raise ValueError(
            f"{name} must decode to at least 32 bytes, not {len(key)}"
            " (e.g. secrets.token_urlsafe(32))"
        )
    return key


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def binding(caller: str | None, method: str, target: str, arguments: object) -> str:
    """What a state is bound to: who asked, what, and with which arguments (a digest).

    *caller* names who asked: ``principal:<id>`` when authenticated, else
    the client's address bucket (``ip:<bucket>``, see :mod:`.._core.namespace`),
    ``None`` only when nothing at all is known (stdio, tests).
    """
    return hashlib.sha256(_canonical([caller, method, target, arguments])).hexdigest()


@attrs.frozen
class OpenedState:
    """A verified ``requestState``: its *state*, its *key* (names the token) and expiry."""

    state: Any
    key: bytes
    expires_at: float


def _key(secret: bytes | str) -> bytes:
    key = secret_from_text(secret, "state_secret") if isinstance(secret, str) else secret
    if len(key) < 32:
        raise ValueError("the requestState secret must be at least 32 bytes")
    return key


def _previous_key(secret: bytes | str | None) -> bytes | None:
    return None if secret is None else _key(secret)


@attrs.define
class StateSigner:
    """Seals and opens ``requestState`` values; see the module docstring.

    *secret* defaults to a random key, which is right for one process; servers
    behind a load balancer must share one secret (at least 32 bytes; text is
    read by :func:`secret_from_text`).  *previous* is the secret before a
    rotation: accepted for opening, never used to seal.  *now* is the wall
    clock (injectable for tests); *ttl* is in seconds.
    """

    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32), converter=_key)
    ttl: float = 600.0
    now: Callable[[], float] = time.time
    previous: bytes | None = attrs.field(default=None, converter=_previous_key)

    def _mac(self, payload: bytes, secret: bytes | None = None) -> bytes:
        return hmac.digest(self.secret if secret is None else secret, payload, "sha256")

    def seal(self, state: object, bound_to: str) -> str:
        # The nonce makes every token unique, so using one never spends another.
        nonce = _b64(secrets.token_bytes(12))
        payload = _canonical(
            {"s": state, "b": bound_to, "e": int(self.now() + self.ttl), "n": nonce}
        )
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def open(self, token: object, bound_to: str) -> Any:
        """The state sealed in *token*; ``-32602`` when it was tampered with, misused or expired."""
        return self.open_token(token, bound_to).state

    def open_token(self, token: object, bound_to: str) -> OpenedState:
        """:meth:`open`, with what the replay check needs (the token's MAC and expiry)."""
        if not isinstance(token, str) or len(token) > 65536:
            raise _invalid("requestState must be a string")
        head, dot, tag = token.partition(".")
        try:
            payload, mac = _unb64(head), _unb64(tag)
        except (ValueError, TypeError):
            raise _invalid("requestState is malformed") from None
        if not dot or not self._verify(payload, mac):
            raise _invalid("requestState failed its integrity check")
        fields = json.loads(payload)
        if not hmac.compare_digest(str(fields.get("b")), bound_to):
            raise _invalid("requestState belongs to another request")
        if not isinstance(fields.get("e"), int) or fields["e"] < self.now():
            raise _invalid("requestState expired")
        return OpenedState(fields.get("s"), mac, float(fields["e"]))

    def _verify(self, payload: bytes, mac: bytes) -> bool:
        if hmac.compare_digest(mac, self._mac(payload)):
            return True
        previous = self.previous
        return previous is not None and hmac.compare_digest(mac, self._mac(payload, previous))


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
