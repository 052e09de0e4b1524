"""A server's spans and metrics: the MCP conventions, plus how each cancellation went.

One :class:`ServerTelemetry` per server (``McpServer(telemetry=...)``),
made only when ``opentelemetry-api`` is installed and telemetry is on; the
dispatcher checks ``registration.telemetry is None`` once per request and
otherwise never comes here.

* :meth:`ServerTelemetry.serve` wraps one request in a ``SERVER`` span named
  ``{mcp.method.name} {target}``, parented on the ``traceparent`` /
  ``tracestate`` in the request's ``_meta`` (any era, any transport) or
  else on the ambient context (an HTTP ``traceparent`` header, attached by
  the HTTP app), and records ``mcp.server.operation.duration``.  When the
  request was cancelled it reads the tracked request's record (who, why,
  when the flag was set, whether the hard cancel came, whether it overran)
  and writes it as ``mcp_cancel.*`` attributes and span events, timed
  where the registry recorded them.
* :meth:`ServerTelemetry.wrap_task` gives a task's execution its own span,
  linked to the ``tools/call`` that created it; ``tasks/cancel`` links it too.
* Registry events (``registry.events.subscribe``) count what
  happens outside a request's own task: overruns, abandoned threads, the
  backend going away.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, NamedTuple

import trio

from .._core.errors import RequestCancelled
from .._core.events import BackendEvent, Event, OverrunEvent, ThreadAbandonedEvent
from .._core.registry import Registry
from .._core.request import TrackedRequest
from . import names as n
from .active import Active, current_active
from .config import Telemetry
from .instruments import ServerMetrics
from .otel import Api, load, wall_ns
from .otel_compat import global_providers_set, is_quiet_provider

__all__ = ["ServerTelemetry", "Subject", "for_server"]


class Subject(NamedTuple):
    """What a request's span is named and described by (the dispatcher fills it in)."""

    method: str
    target: str | None
    """The tool of ``tools/call``, the prompt of ``prompts/get``: in the span's name."""
    request_id: object
    params: Mapping[str, Any]
    protocol_version: str | None
    session_id: str | None
    network_transport: str | None = None
    network_protocol: str | None = None


Message = dict[str, Any]

#: The ``_meta`` keys SEP-414 reserves for trace context, read as the carrier.
_CARRIER_KEYS: Final = ("traceparent", "tracestate", "baggage")
_MAX_CARRIER_VALUE: Final = 1024
#: Task execution spans kept for ``tasks/cancel`` to link to (tasks are capped anyway).
_MAX_TASK_SPANS: Final = 10_000
_CANCELLED_CODE: Final = "-32800"
_SESSION_KEYS: Final = (
    "mcp.protocol.version",
    n.ATTR_NETWORK_TRANSPORT,
    n.ATTR_NETWORK_PROTOCOL,
    "error.type",
)


def for_server(setting: bool | Telemetry) -> ServerTelemetry | None:
    """The telemetry *setting* asks for, or ``None`` (off, or no ``opentelemetry-api``)."""
    if setting is False:
        return None
    api = load()
    if api is None:
        return None
    return ServerTelemetry(api, Telemetry() if setting is True else setting)


class ServerTelemetry:
    """A server's tracer and instruments; see the module docstring."""

    def __init__(self, api: Api, config: Telemetry) -> None:
        self.api = api
        self._span_kind = api.trace.SpanKind
        self._status_error = api.trace.StatusCode.ERROR
        self._link = api.trace.Link
        self._set_span_in_context = api.trace.set_span_in_context
        self._attach = api.context.attach
        self._detach = api.context.detach
        self.tracer = api.trace.get_tracer(
            n.INSTRUMENTATION_NAME, tracer_provider=config.tracer_provider
        )
        meter = api.metrics.get_meter(n.INSTRUMENTATION_NAME, meter_provider=config.meter_provider)
        self.metrics = ServerMetrics.create(meter)
        self._watched: weakref.WeakSet[Registry] = weakref.WeakSet()
        self._task_spans: dict[str, Any] = {}
        given = (config.tracer_provider, config.meter_provider)
        real = any(p is not None and not is_quiet_provider(api, p) for p in given)
        self._recording: Callable[[], bool] = (lambda: True) if real else global_providers_set(api)
        self._live = False

    def quiet(self, params: Mapping[str, Any]) -> bool:
        """Whether a request can skip :meth:`serve`: nothing would record its span or metrics.

        True while the providers are no-ops or the API's global proxies with
        no provider installed yet (the API is there, pulled in by something,
        with no SDK), unless ``_meta`` has a ``traceparent`` (a no-op span
        still carries it downstream).  Re-checked per request until a
        provider appears (a global read); never quiet from then on.
        """
        if self._live:
            return False
        if self._recording():
            self._live = True
            return False
        meta = params.get("_meta")
        return not (isinstance(meta, dict) and "traceparent" in meta)

    # -- one request ------------------------------------------------------------

    async def serve(
        self,
        answer: Callable[[], Awaitable[Message | None]],
        subject: Subject,
        *,
        registry: Registry,
        tracked: Callable[[], TrackedRequest | None],
    ) -> Message | None:
        """Run *answer* (the dispatcher's) inside the request's ``SERVER`` span."""
        if registry not in self._watched:
            self._watched.add(registry)
            registry.events.subscribe(self._on_event)
        name, attributes, metric, parent, links = self._describe(subject)
        method = subject.method
        counted = {"mcp.method.name": method}
        self.metrics.in_flight.add(1, counted)
        started = trio.current_time()
        span = self.tracer.start_span(
            name, context=parent, kind=self._span_kind.SERVER, attributes=attributes, links=links
        )
        # Made current by hand (no context manager: this is every request's
        # path); a no-op tracer's invalid span, with no caller context to
        # carry on, need not be current at all.
        attached = None
        if span.is_recording() or span.get_span_context().is_valid:
            attached = self._attach(self._set_span_in_context(span, parent))
        token = current_active.set(Active(self, span))
        try:
            reply = await answer()
        except BaseException as exc:  # trio.Cancelled: the transport stopping
            metric["error.type"] = type(exc).__qualname__
            span.set_attribute("error.type", metric["error.type"])
            span.set_status(self._status_error)
            raise
        else:
            self._record_reply(span, method, reply, metric)
            return reply
        finally:
            current_active.reset(token)
            self._record_cancellation(span, tracked())
            if attached is not None:
                self._detach(attached)
            span.end()
            self.metrics.in_flight.add(-1, counted)
            self.metrics.duration.record(trio.current_time() - started, metric)

    def _describe(
        self, subject: Subject
    ) -> tuple[str, dict[str, Any], dict[str, Any], Any, tuple[Any, ...]]:
        """A request span's name, attributes, metric attributes, parent and links."""
        method, target, request_id, params, _, session_id = subject[:6]
        attributes: dict[str, Any] = {"mcp.method.name": method}
        metric = _common(attributes, subject)
        if request_id is not None:
            attributes["jsonrpc.request.id"] = n.bounded(request_id)
        if session_id is not None:
            attributes["mcp.session.id"] = session_id
        if method in n.RESOURCE_METHODS:
            uri = params.get("uri")
            if isinstance(uri, str):
                attributes[n.ATTR_RESOURCE_URI] = n.bounded(uri)
        name = method
        if target is not None:
            name = f"{method} {target}"
            if method == "tools/call":
                attributes["gen_ai.operation.name"] = metric["gen_ai.operation.name"] = (
                    "execute_tool"
                )
                attributes["gen_ai.tool.name"] = metric["gen_ai.tool.name"] = target
            else:
                attributes["gen_ai.prompt.name"] = target
        parent, links = self._parent(params)
        if method == "tasks/cancel":
            links = self._task_link(params, links)
        return name, attributes, metric, parent, links

    def refused_request(self, reply: Message, subject: Subject) -> None:
        """A request an admission limit refused: its span (with the error) and duration."""
        name, attributes, metric, parent, links = self._describe(subject)
        span = self.tracer.start_span(
            name, context=parent, kind=self._span_kind.SERVER, attributes=attributes, links=links
        )
        self._record_reply(span, subject.method, reply, metric)
        span.end()
        self.metrics.duration.record(0.0, metric)

    def notification(self, subject: Subject, outcome: str) -> None:
        """A ``notifications/cancelled`` received: a short span, its outcome, its duration.

        It carries the id and reason it names under Sentry's keys too (bounded:
        the client chose them).
        """
        params = subject.params
        parent, links = self._parent(params)
        attributes: dict[str, Any] = {"mcp.method.name": subject.method}
        metric = _common(attributes, subject)
        attributes["mcp_cancel.outcome"] = outcome
        if subject.session_id is not None:
            attributes["mcp.session.id"] = subject.session_id
        cancelled, reason = params.get("requestId"), params.get("reason")
        if isinstance(cancelled, (str, int)) and not isinstance(cancelled, bool):
            attributes[n.ATTR_SENTRY_CANCELLED_REQUEST_ID] = n.bounded(cancelled)
        if isinstance(reason, str):
            attributes[n.ATTR_SENTRY_CANCELLED_REASON] = n.bounded(reason)
        span = self.tracer.start_span(
            subject.method,
            context=parent,
            kind=self._span_kind.SERVER,
            attributes=attributes,
            links=links,
        )
        span.end()
        self.metrics.duration.record(0.0, metric)

    def session_ended(
        self,
        started: float,
        protocol_version: str | None,
        network: tuple[str | None, str | None],
        error_type: str | None = None,
    ) -> None:
        """A session ended (legacy HTTP) or a connection closed: ``mcp.server.session.duration``."""
        attributes: dict[str, Any] = {}
        for key, value in zip(_SESSION_KEYS, (protocol_version, *network, error_type), strict=True):
            if value is not None:
                attributes[key] = value
        self.metrics.session_duration.record(max(0.0, trio.current_time() - started), attributes)

    def _parent(self, params: Mapping[str, Any]) -> tuple[Any, tuple[Any, ...]]:
        """The span's parent from ``_meta`` (and a link to the ambient context), if any.

        Only string values of the reserved keys are read, each bounded, so a
        hostile ``_meta`` costs nothing and breaks nothing.
        """
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return None, ()
        carrier: dict[str, str] = {}
        for key in _CARRIER_KEYS:
            value = meta.get(key)
            if isinstance(value, str) and len(value) <= _MAX_CARRIER_VALUE:
                carrier[key] = value
        if "traceparent" not in carrier:
            return None, ()
        trace = self.api.trace
        try:
            context = self.api.propagate.extract(carrier)
        except (ValueError, TypeError):
            return None, ()
        if not trace.get_current_span(context).get_span_context().is_valid:
            return None, ()
        ambient = trace.get_current_span().get_span_context()
        return context, ((self._link(ambient),) if ambient.is_valid else ())

    def _record_reply(
        self, span: Any, method: str, reply: Message | None, metric: dict[str, Any]
    ) -> None:
        """``error.type``: the JSON-RPC code, ``tool_error``, ``-32800`` for a silenced cancel."""
        message = "Request cancelled"
        code: str | None = None
        if reply is None:
            error_type: str | None = _CANCELLED_CODE
        else:
            error = reply.get("error")
            if isinstance(error, dict):
                error_type = code = str(error.get("code"))
                message = str(error.get("message", ""))[:200]
            else:
                result = reply.get("result")
                error_type = None
                if method == "tools/call" and isinstance(result, dict):
                    if result.get("isError") is True:
                        error_type, message = "tool_error", ""
        if error_type is None:
            return
        metric["error.type"] = error_type
        span.set_attribute("error.type", error_type)
        if code is not None:
            span.set_attribute("rpc.response.status_code", code)
        span.set_status(self._status_error, message or None)

    def _record_cancellation(self, span: Any, request: TrackedRequest | None) -> None:
        """How the request's cancellation went, as attributes, events and metric points."""
        if request is None or request.cancellation is None:
            return
        cancellation = request.cancellation
        now = trio.current_time()
        hard = now >= request.hard_deadline
        phase = "overrun" if request.overran else "hard_cancel" if hard else "flag"
        kind = cancellation.kind
        cause = kind if kind != "server" else n.server_cause(cancellation.reason)
        after = max(0.0, now - cancellation.at)
        attributes: dict[str, Any] = {
            n.ATTR_CANCEL_KIND: kind,
            n.ATTR_CANCEL_CAUSE: cause,
            n.ATTR_CANCEL_PHASE: phase,
            n.ATTR_CANCEL_HARD: hard,
            n.ATTR_CANCEL_FLAG_TO_STOP: after,
        }
        if cancellation.reason is not None:
            attributes[n.ATTR_CANCEL_REASON] = cancellation.reason
            attributes[n.ATTR_SENTRY_CANCELLED_REASON] = cancellation.reason
        request_id = request.request_id
        if request_id is not None:
            attributes[n.ATTR_SENTRY_CANCELLED_REQUEST_ID] = n.bounded(request_id)
        if request.overran:
            attributes[n.ATTR_CANCEL_OVERRUN] = now - request.hard_deadline
        span.set_attributes(attributes)
        flag: dict[str, Any] = {n.ATTR_CANCEL_KIND: kind, n.ATTR_CANCEL_CAUSE: cause}
        if cancellation.reason is not None:
            flag[n.ATTR_CANCEL_REASON] = cancellation.reason
        span.add_event(n.EVENT_FLAG, flag, timestamp=wall_ns(cancellation.at))
        if hard:
            grace_period = {
                "mcp_cancel.cancel.grace_period": request.hard_deadline - cancellation.at
            }
            span.add_event(
                n.EVENT_HARD_CANCEL, grace_period, timestamp=wall_ns(request.hard_deadline)
            )
        if request.overran:
            span.add_event(n.EVENT_OVERRUN, {n.ATTR_CANCEL_OVERRUN: now - request.hard_deadline})
        span.add_event(
            n.EVENT_STOP, {n.ATTR_CANCEL_PHASE: phase, n.ATTR_CANCEL_FLAG_TO_STOP: after}
        )
        metric = {n.ATTR_CANCEL_KIND: kind, n.ATTR_CANCEL_CAUSE: cause, n.ATTR_CANCEL_PHASE: phase}
        self.metrics.cancellations.add(1, metric)
        self.metrics.flag_to_stop.record(after, metric)

    def http_parent(self, headers: Mapping[str, str]) -> Any:
        """A context manager making an HTTP request's ``traceparent`` header the ambient context.

        The request's span is parented on it unless its ``_meta`` carries a
        trace context of its own (which wins, with this one as a link).
        """
        carrier = {k: headers[k] for k in _CARRIER_KEYS if k in headers}
        return _Attached(self.api, self.api.propagate.extract(carrier))

    # -- limits, helpers, events --------------------------------------------------

    def refused(self, limit: str) -> None:
        """An admission limit refused a call."""
        self.metrics.refusals.add(1, {n.ATTR_LIMIT: limit})

    def process_event(self, span: Any, killed: bool, signal_name: str) -> None:
        """``run_process``: the child's group was killed, or sent its stop signal."""
        event = n.EVENT_PROCESS_KILLED if killed else n.EVENT_PROCESS_SIGNALLED
        span.add_event(event, {"mcp_cancel.signal": signal_name})
        if killed:
            self.metrics.process_groups_killed.add(1)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, ThreadAbandonedEvent):
            self.metrics.threads_abandoned.add(1, {n.ATTR_CANCEL_KIND: event.kind})
            active = current_active.get()  # delivered in the request's own task
            if active is not None and active.telemetry is self:
                active.span.add_event(n.EVENT_THREAD_ABANDONED, {"thread.name": event.thread})
        elif isinstance(event, OverrunEvent):
            self.metrics.overruns.add(1, {n.ATTR_CANCEL_KIND: event.kind})
        elif isinstance(event, BackendEvent) and event.name == "backend.unavailable":
            operation = {"mcp_cancel.backend.operation": event.operation}
            self.metrics.backend_unavailable.add(1, operation)

    # -- tasks ----------------------------------------------------------------------

    def wrap_task(
        self, runner: Callable[[Any, str], Awaitable[Message]], tool_name: str
    ) -> Callable[[Any, str], Awaitable[Message]]:
        """*runner* (a task's execution) in a span of its own, linked to the creating call.

        Called inside the ``tools/call`` span, whose context becomes the link.
        """
        trace = self.api.trace
        creator = trace.get_current_span().get_span_context()
        links = (self._link(creator),) if creator.is_valid else ()
        root = self.api.context.Context()

        async def run(exchange: Any, task_id: str) -> Message:
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool_name,
                "mcp_cancel.task.id": task_id,
            }
            self.metrics.tasks.add(1, {"mcp_cancel.task.status": "working"})
            status = "failed"
            with self.tracer.start_as_current_span(
                f"mcp_cancel.task {tool_name}",
                context=root,
                kind=self._span_kind.INTERNAL,
                attributes=attributes,
                links=links,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                if len(self._task_spans) < _MAX_TASK_SPANS:
                    self._task_spans[task_id] = span
                token = current_active.set(Active(self, span))
                try:
                    result = await runner(exchange, task_id)
                    status = "completed" if exchange.cancel_kind is None else "cancelled"
                    return result
                except RequestCancelled as exc:
                    status = "cancelled" if exc.kind == "client" else "failed"
                    raise
                finally:
                    current_active.reset(token)
                    self._task_spans.pop(task_id, None)
                    self._record_cancellation(span, exchange.request)
                    span.set_attribute("mcp_cancel.task.status", status)
                    if status == "failed":
                        span.set_status(self._status_error)
                    self.metrics.tasks.add(1, {"mcp_cancel.task.status": status})

        return run

    def _task_link(self, params: Mapping[str, Any], links: tuple[Any, ...]) -> tuple[Any, ...]:
        """``tasks/cancel``: link the task's execution span, and mark it there."""
        task_id = params.get("taskId")
        span = self._task_spans.get(task_id) if isinstance(task_id, str) else None
        if span is None:
            return links
        span.add_event(n.EVENT_TASK_CANCEL)
        return (*links, self._link(span.get_span_context()))


def _common(attributes: dict[str, Any], subject: Subject) -> dict[str, Any]:
    """Set what a span and its duration point share; return the point's attributes."""
    metric: dict[str, Any] = {"mcp.method.name": attributes["mcp.method.name"]}
    if subject.protocol_version is not None:
        metric["mcp.protocol.version"] = subject.protocol_version
    if subject.network_transport is not None:
        metric[n.ATTR_NETWORK_TRANSPORT] = subject.network_transport
    if subject.network_protocol is not None:
        metric[n.ATTR_NETWORK_PROTOCOL] = subject.network_protocol
    attributes.update(metric)
    return metric


class _Attached:
    """``with``: *context* is the current OpenTelemetry context inside the block."""

    __slots__ = ("_api", "_context", "_token")

    def __init__(self, api: Api, context: Any) -> None:
        self._api = api
        self._context = context

    def __enter__(self) -> None:
        self._token = self._api.context.attach(self._context)

    def __exit__(self, *exc: object) -> None:
        self._api.context.detach(self._token)
