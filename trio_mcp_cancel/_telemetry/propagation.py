"""What the library's own client passes downstream: the caller's trace context.

A tool of server A that calls server B with this library's client puts the
running span's ``traceparent`` / ``tracestate`` (and ``baggage``) in the
request's ``_meta``, where SEP-414 reserves them, so B's span is a child of
A's and the chain is one trace, over any transport.  :func:`trace_headers`
copies them to HTTP headers, for a transport that sends them too: read from
the message (not from the sending task's context, which over HTTP is a
connection's task, not the caller's).  Without ``opentelemetry-api``
nothing is injected, so nothing is copied.
"""

from __future__ import annotations

from typing import Any

from .otel import load

__all__ = ["inject_meta", "trace_headers"]

#: The ``_meta`` keys SEP-414 reserves for trace context, which are HTTP headers too.
TRACE_KEYS = ("traceparent", "tracestate", "baggage")


def inject_meta(meta: dict[str, Any]) -> None:
    """Add the current trace context to a request's ``_meta`` (a caller's own keys win)."""
    if "traceparent" in meta:
        return
    api = load()
    if api is not None:
        api.propagate.inject(meta)


def trace_headers(message: dict[str, Any]) -> dict[str, str]:
    """The trace context a request's ``_meta`` carries, as HTTP headers (string values only)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return {}
    return {key: value for key in TRACE_KEYS if isinstance(value := meta.get(key), str)}
