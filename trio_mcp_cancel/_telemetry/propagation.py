"""What the library's own client passes downstream: the caller's trace context.

A tool of server A that calls server B with this library's client puts the
running span's ``traceparent`` / ``tracestate`` (and ``baggage``) in the
request's ``_meta``, where SEP-414 reserves them, so B's span is a child of
A's and the chain is one trace, over any transport.  :func:`outgoing_headers`
gives the same as HTTP headers, for a transport that sends them too.
Without ``opentelemetry-api`` both do nothing.
"""

from __future__ import annotations

from typing import Any

from .otel import load

__all__ = ["inject_meta", "outgoing_headers"]


def inject_meta(meta: dict[str, Any]) -> None:
    """Add the current trace context to a request's ``_meta`` (a caller's own keys win)."""
    if "traceparent" in meta:
        return
    api = load()
    if api is not None:
        api.propagate.inject(meta)


def outgoing_headers() -> dict[str, str]:
    """The current trace context as HTTP headers (``traceparent``...); empty without one."""
    carrier: dict[str, str] = {}
    api = load()
    if api is not None:
        api.propagate.inject(carrier)
    return carrier
