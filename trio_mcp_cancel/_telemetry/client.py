"""The client's spans and metric: one ``CLIENT`` span per request, as the MCP conventions ask.

One :class:`ClientTelemetry` per client (``open_*_client(telemetry=...)``,
the same setting as the server's: ``True`` for the global providers,
a :class:`~.config.Telemetry` for your own, ``False`` for none), made only
when ``opentelemetry-api`` is installed.

:meth:`ClientTelemetry.start` opens the request's span, named
``{mcp.method.name} {target}``, as a child of whatever span is current in
the calling task, and writes *its* context into the request's ``_meta``
(``traceparent``, ``tracestate``, ``baggage``: SEP-414), so the server's
span is the client span's child and a gateway chain (agent, client, server,
its own client, the next server) is one trace.  The span ends when the
call settles (:class:`ClientSpan`): answered, failed for good, or
cancelled by the client, and ``mcp.client.operation.duration`` is recorded
then.

While nothing would record (no SDK behind the global providers) no span is
made at all, and the ambient trace context is injected as before
(:func:`.propagation.inject_meta`), so a quiet client costs one check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from . import names as n
from .config import Telemetry
from .otel import Api, load
from .otel_compat import global_providers_set, is_quiet_provider
from .propagation import inject_meta

__all__ = ["ClientSpan", "ClientTelemetry", "Network", "for_client", "trace_request"]

Message = dict[str, Any]
Network = tuple[str | None, str | None]
"""``network.transport`` and ``network.protocol.name`` of the client's wire."""

#: ``error.type`` of a call the client itself cancelled: the code a server
#: answers such a call with, so both sides of the hop read the same.
_CANCELLED: Final = "-32800"
_MAX_TARGET: Final = 100


def for_client(
    setting: bool | Telemetry, network: Network = (None, None)
) -> ClientTelemetry | None:
    """The telemetry *setting* asks for, or ``None`` (off, or no ``opentelemetry-api``).

    *network*: ``network.transport`` and ``network.protocol.name`` of the
    client's wire (``(None, None)`` in memory).
    """
    if setting is False:
        return None
    api = load()
    if api is None:
        return None
    return ClientTelemetry(api, Telemetry() if setting is True else setting, network)


def trace_request(
    telemetry: ClientTelemetry | None,
    method: str,
    params: Mapping[str, Any],
    meta: Message,
    request_id: int,
    protocol_version: str,
) -> ClientSpan | None:
    """The span of a request about to be sent, its context in *meta*; without
    telemetry (or while quiet) the caller's own context goes in *meta* instead."""
    if telemetry is None:
        inject_meta(meta)
        return None
    return telemetry.start(method, params, meta, request_id, protocol_version)


class ClientTelemetry:
    """A client's tracer and ``mcp.client.operation.duration``; see the module docstring."""

    def __init__(self, api: Api, config: Telemetry, network: Network = (None, None)) -> None:
        self.api = api
        self.network = network
        self._kind = api.trace.SpanKind.CLIENT
        self.error_status = api.trace.StatusCode.ERROR
        self.tracer = api.trace.get_tracer(
            n.INSTRUMENTATION_NAME, tracer_provider=config.tracer_provider
        )
        meter = api.metrics.get_meter(n.INSTRUMENTATION_NAME, meter_provider=config.meter_provider)
        self.duration = meter.create_histogram(
            "mcp.client.operation.duration",
            unit="s",
            description="The duration of the MCP request as observed on the sender.",
            explicit_bucket_boundaries_advisory=list(n.DURATION_BUCKETS),
        )
        given = (config.tracer_provider, config.meter_provider)
        real = any(p is not None and not is_quiet_provider(api, p) for p in given)
        self._recording: Callable[[], bool] = (lambda: True) if real else global_providers_set(api)

    def start(
        self,
        method: str,
        params: Mapping[str, Any],
        meta: Message,
        request_id: int,
        protocol_version: str,
    ) -> ClientSpan | None:
        """Open the span of one request and put its trace context in *meta*.

        ``None`` (the ambient context injected instead) while nothing would
        record the span.
        """
        if not self._recording():
            inject_meta(meta)
            return None
        attributes: dict[str, Any] = {"mcp.method.name": method}
        metric: dict[str, Any] = {
            "mcp.method.name": method,
            "mcp.protocol.version": protocol_version,
        }
        transport, protocol = self.network
        if transport is not None:
            metric[n.ATTR_NETWORK_TRANSPORT] = transport
        if protocol is not None:
            metric[n.ATTR_NETWORK_PROTOCOL] = protocol
        name = method
        target = params.get("name")
        if method in ("tools/call", "prompts/get") and isinstance(target, str):
            target = n.bounded(target, _MAX_TARGET)
            name = f"{method} {target}"
            if method == "tools/call":
                metric["gen_ai.operation.name"] = "execute_tool"
                metric["gen_ai.tool.name"] = target
            else:
                metric["gen_ai.prompt.name"] = target
        attributes.update(metric)
        attributes["jsonrpc.request.id"] = str(request_id)
        uri = params.get("uri")
        if method in n.RESOURCE_METHODS and isinstance(uri, str):
            attributes[n.ATTR_RESOURCE_URI] = n.bounded(uri)
        span = self.tracer.start_span(name, kind=self._kind, attributes=attributes)
        if "traceparent" not in meta:  # a caller's own trace context wins
            context = self.api.trace.set_span_in_context(span)
            self.api.propagate.inject(meta, context=context)
        return ClientSpan(self, span, method, metric, trio.current_time())


class ClientSpan:
    """One request's open span; :meth:`end` it once (later calls do nothing)."""

    __slots__ = ("_method", "_metric", "_span", "_started", "_telemetry")

    def __init__(
        self,
        telemetry: ClientTelemetry,
        span: Any,
        method: str,
        metric: dict[str, Any],
        started: float,
    ) -> None:
        self._telemetry: ClientTelemetry | None = telemetry
        self._span = span
        self._method = method
        self._metric = metric
        self._started = started

    def answered(self, response: Mapping[str, Any]) -> None:
        """The server answered: a JSON-RPC error's code, or ``tool_error``, is the error."""
        error = response.get("error")
        if isinstance(error, Mapping):
            code = n.bounded(error.get("code"), 20)
            message = n.bounded(error.get("message", ""), 200)
            self._end(code, message, code)
            return
        result = response.get("result")
        if (
            self._method == "tools/call"
            and isinstance(result, Mapping)
            and result.get("isError") is True
        ):
            self._end("tool_error", None)
        else:
            self._end(None, None)

    def failed(self, failure: BaseException) -> None:
        """No answer can come (the transport gave up)."""
        self._end(type(failure).__qualname__, n.bounded(str(failure), 200))

    def cancelled(self) -> None:
        """The client cancelled the call: MCP forbids the server to answer it."""
        self._end(_CANCELLED, "Request cancelled")

    def _end(self, error_type: str | None, message: str | None, code: str | None = None) -> None:
        telemetry, self._telemetry = self._telemetry, None
        if telemetry is None:
            return
        span, metric = self._span, self._metric
        if error_type is not None:
            metric["error.type"] = error_type
            span.set_attribute("error.type", error_type)
            if code is not None:
                span.set_attribute("rpc.response.status_code", code)
            span.set_status(telemetry.error_status, message or None)
        span.end()
        telemetry.duration.record(max(0.0, trio.current_time() - self._started), metric)
