"""The tool context and running a target: what every handler that runs server code shares.

:class:`Context` is the first argument of every tool, resource reader,
prompt and completer.  :func:`make_context` builds it for one request
(opening a modern MRTR ``requestState`` before any server code runs);
:func:`run_target` runs the work inside ``tracked()`` when it is
cancellable; :func:`invoke` runs a tool and turns what it returned or
raised into a tool result, the one place a failing tool becomes
``isError``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import trio

from .._core.errors import RequestCancelled
from .._core.ratelog import failure_key
from .._core.registry import Registry, Tracking, tracked
from .._core.request import TrackedRequest
from .._core.validation import RequestId, is_valid_request_id
from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from .._wire.versions import LOG_LEVELS, MISSING_CLIENT_CAPABILITY, Era
from .calls import HandlerInput
from .client_requests import (
    DEFAULT_CLIENT_REQUEST_TIMEOUT,
    ElicitResult,
    InputRound,
    ask_client,
    input_key,
    mrtr_answers,
)
from .client_table import ClientRequestError
from .content import ToolError
from .exchange import Caller, Exchange
from .lifespan import LifespanState
from .mrtr import InputRequired, binding, input_required_result
from .mrtr import elicit as elicit_request
from .mrtr import list_roots as list_roots_request
from .mrtr import sample as sample_request
from .signature import ContextParameter
from .tools import error_result

T = TypeVar("T")

__all__ = [
    "Context",
    "check_declared",
    "client_capabilities",
    "input_required",
    "invoke",
    "make_context",
    "needs_state",
    "new_context",
    "mrtr_identity",
    "only_rounds",
    "without_rounds",
    "run_target",
]


@attrs.define(eq=False)
class Context(ContextParameter):
    """The first argument of every tool: identity, cancellation, progress and logging."""

    request_id: RequestId
    caller: Caller
    progress_token: str | int | None = None
    _exchange: Exchange = attrs.field(factory=Exchange)
    log_level: str | None = None
    """The least severe level the client wants logged for this request (``None``: none)."""
    era: Era = "legacy"
    _last_progress: float = -math.inf
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    """What the client declared (modern: on this request; legacy: in ``initialize``)."""
    input_responses: Mapping[str, Any] | None = None
    """MRTR: the client's answers to the ``inputRequests`` of the previous round."""
    request_state: Any = None
    """MRTR: the state the previous round returned, verified (see :class:`~.mrtr.StateSigner`)."""
    _task_progress: Callable[[float, float | None, str | None], None] | None = None
    """Inside a task: where progress goes instead (the task's ``statusMessage``)."""
    _ask_task: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]] | None = None
    """Inside a task: parks the task in ``input_required`` until the answers come."""
    _answers: list[Any] = attrs.field(factory=list)
    """Modern: the answers to the tool's questions so far, in order (:mod:`.client_requests`)."""
    _asked: int = 0
    _lifespan: LifespanState | None = None
    """The server's lifespan state (:mod:`.lifespan`), read by :attr:`lifespan`."""

    @property
    def lifespan(self) -> Any:
        """What the server's ``lifespan`` yielded (``McpServer(lifespan=...)``).

        ``Any``, so ``state: AppState = ctx.lifespan`` type-checks as written;
        :meth:`lifespan_as` checks the type as well.  ``RuntimeError`` when the
        server has no lifespan, or it is not entered (serving has not started).
        """
        state = self._lifespan
        if state is None or not state.entered:
            raise RuntimeError(
                "no lifespan state: give McpServer(lifespan=...), and read it while serving"
            )
        return state.value

    def lifespan_as(self, kind: type[T]) -> T:
        """:attr:`lifespan`, checked to be a *kind* (``TypeError`` otherwise), typed as one."""
        value = self.lifespan
        if not isinstance(value, kind):
            raise TypeError(f"the lifespan yielded a {type(value).__name__}, not a {kind.__name__}")
        return value

    @property
    def namespace(self) -> str:
        return self.caller.namespace

    @property
    def registry(self) -> Registry:
        return self.caller.registry

    @property
    def request(self) -> TrackedRequest:
        """The tracked request (available inside a cancellable tool's body)."""
        request = self._exchange.request
        if request is None:
            raise RuntimeError("the tool is not running, or is not cancellable")
        return request

    @property
    def last_progress(self) -> float | None:
        """The last progress value reported (``None`` before the first): the next must exceed it."""
        return None if self._last_progress == -math.inf else self._last_progress

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Send ``notifications/progress`` if the client asked for progress.

        Inside a task (no request stream) it updates the task's
        ``statusMessage`` instead, rate-limited (see :mod:`.task_progress`).
        MCP requires progress to increase; a value that does not is a bug in
        the tool and raises :class:`ValueError`.  Nothing is sent once the
        client cancelled the request.
        """
        if not progress > self._last_progress:
            raise ValueError(f"progress must increase ({progress} after {self._last_progress})")
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            raise ValueError("progress and total must be finite numbers")
        self._last_progress = progress
        if self._task_progress is not None:
            self._task_progress(progress, total, message)
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._exchange.notify(
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        )

    def close_stream(self) -> bool:
        """Close the connection that carries this request's SSE stream, keeping the stream.

        SEP-1699 polling: on a resumable legacy HTTP stream the client then
        reconnects (``GET`` with ``Last-Event-ID``, after the stream's
        ``retry``) and gets what follows, the answer included, so a server
        need not hold a connection open for a long call.  The call goes on;
        the disconnect grace (``resume_window``) applies as to any drop.
        ``False`` (nothing done) on every other stream: modern HTTP (where a
        closed stream is a cancel), stdio, WebSocket, a JSON answer.
        """
        close = self._exchange.close_stream
        return close() if close is not None else False

    async def log(self, level: str, data: object, logger: str | None = None) -> None:
        """Send ``notifications/message`` on this request's stream.

        Sent only when the client asked for *level* or a less severe one:
        per request in the modern era (``_meta`` ``logLevel``; no level, no
        messages), by ``logging/setLevel`` in the legacy era (every level
        until the client sets one).  Never sent after the client cancelled.
        """
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}")
        if self.log_level is None or LOG_LEVELS.index(level) < LOG_LEVELS.index(self.log_level):
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self._exchange.notify(
            {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
        )

    # -- asking the client (see .client_requests) -------------------------------

    async def elicit(
        self,
        message: str,
        schema: Mapping[str, Any],
        *,
        answer_within: float | None = DEFAULT_CLIENT_REQUEST_TIMEOUT,
    ) -> ElicitResult:
        """Ask the user for input (``elicitation/create``, form mode); both eras.

        Legacy: a request to the client on this request's stream, awaited.
        Modern: an MRTR round; the tool is run again with the answer (so do
        nothing irreversible before the last question).  Declined or
        cancelled is a value (``result.action``); an error is
        :class:`~.client_table.ClientRequestError`.
        """
        result = await self._ask(elicit_request(message, schema), answer_within)
        return ElicitResult.from_result(result)

    async def sample(
        self,
        prompt: str | Sequence[Mapping[str, Any]],
        max_tokens: int = 100,
        *,
        answer_within: float | None = DEFAULT_CLIENT_REQUEST_TIMEOUT,
        **params: Any,
    ) -> dict[str, Any]:
        """Ask the client's model (``sampling/createMessage``); its ``CreateMessageResult``.

        *prompt* is one user text, or the ``messages`` themselves; *params*
        adds fields such as ``systemPrompt`` or ``temperature``.
        """
        request = sample_request(prompt if isinstance(prompt, str) else "", max_tokens)
        if not isinstance(prompt, str):
            request["params"]["messages"] = [dict(m) for m in prompt]
        request["params"].update(params)
        return await self._ask(request, answer_within)

    async def list_roots(
        self, *, answer_within: float | None = DEFAULT_CLIENT_REQUEST_TIMEOUT
    ) -> list[dict[str, Any]]:
        """The client's roots (``roots/list``)."""
        result = await self._ask(list_roots_request(), answer_within)
        roots = result.get("roots")
        if not isinstance(roots, list):
            raise ClientRequestError("roots/list: the client's result has no roots list")
        return [root for root in roots if isinstance(root, dict)]

    async def ask(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        answer_within: float | None = DEFAULT_CLIENT_REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """Ask the client *method* (``elicitation/create``, ``sampling/createMessage``,
        ``roots/list``) with *params* as given; its result object.

        What :meth:`elicit`, :meth:`sample` and :meth:`list_roots` build on;
        a gateway relays an upstream's question through it unchanged.
        """
        return await self._ask({"method": method, "params": dict(params)}, answer_within)

    async def _ask(self, request: dict[str, Any], answer_within: float | None) -> dict[str, Any]:
        question = InputRequired({"q": request})
        index, self._asked = self._asked, self._asked + 1
        if self._ask_task is not None:
            check_declared(question, self.client_capabilities)
            answers = await self._ask_task({input_key(index): request})
            return _answer_object(request, answers.get(input_key(index)))
        if self.era == "modern":
            if index < len(self._answers):
                return _answer_object(request, self._answers[index])
            raise InputRound(index, request, self._answers)
        missing = sorted(n for n in question.capabilities() if n not in self.client_capabilities)
        if missing:
            raise ClientRequestError(
                f"{request['method']}: the client did not declare the {missing[0]!r} capability"
            )
        channel = self.caller.channel
        send = self._exchange.send
        if channel is None or send is None or self._exchange.request is None:
            # Without a tracked request nothing could cancel the wait.
            raise ClientRequestError(
                f"{request['method']}: this request has no stream and session to ask the client on"
                " (legacy HTTP needs sessions and SSE responses, and the tool must be cancellable)"
            )
        params = request["params"]
        legacy = channel.legacy
        if legacy is not None and legacy.protocol_version < "2025-11-25":
            # Elicitation modes are 2025-11-25's: older clients get the form alone.
            params = {k: v for k, v in params.items() if k != "mode"}
        return await ask_client(
            channel.client_requests,
            send,
            request["method"],
            params,
            answer_within=answer_within,
            request=self._exchange.request,
        )


def _answer_object(request: Mapping[str, Any], answer: object) -> dict[str, Any]:
    if not isinstance(answer, dict):
        raise ClientRequestError(f"{request['method']}: the client's answer is not an object")
    return answer


def _log_level(h: HandlerInput) -> str | None:
    envelope = h.call.envelope
    if envelope is not None:
        return envelope.log_level
    channel = h.caller.channel
    legacy = channel.legacy if channel is not None else None
    return LOG_LEVELS[0] if legacy is None or legacy.log_level is None else legacy.log_level


def client_capabilities(h: HandlerInput) -> Mapping[str, Any]:
    """What the client declared: on the request (modern) or in ``initialize`` (legacy)."""
    envelope = h.call.envelope
    if envelope is not None:
        return envelope.client_capabilities
    channel = h.caller.channel
    legacy = channel.legacy if channel is not None else None
    return {} if legacy is None else legacy.client_capabilities


async def make_context(h: HandlerInput, target: str) -> Context:
    """The ``ctx`` of one request: identity, progress, logging and (modern) MRTR input.

    A ``requestState`` is opened (verified) and used up here, before any
    code of the server runs, so a tampered or replayed one never reaches a
    tool (``-32602``).  Only that needs an ``await`` (the used-state set may
    be shared): :func:`needs_state` says when, and :func:`new_context` is the
    rest, which a caller on the hot path calls directly.
    """
    ctx = new_context(h)
    if needs_state(h):
        signer = h.registration.state_signer
        opened = signer.open_token(h.call.request.params["requestState"], _mrtr_binding(h, target))
        # Sealed with "e" = int(now + ttl): this is when, or up to a second before.
        issued_at = opened.expires_at - signer.ttl
        used = h.runtime.used_states
        if not await used.use(opened.key, opened.expires_at, signer.now(), issued_at):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: requestState was used already")
        ctx._answers, ctx.request_state = mrtr_answers(opened.state, ctx.input_responses)
    return ctx


def needs_state(h: HandlerInput) -> bool:
    """Whether the request carries a ``requestState`` to open (modern era only)."""
    return h.call.era == "modern" and "requestState" in h.call.request.params


def new_context(h: HandlerInput) -> Context:
    """:func:`make_context` without the ``requestState``: everything that never awaits."""
    request = h.call.request
    params = request.params
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    ctx = Context(
        request.id,
        h.caller,
        token if is_valid_request_id(token) else None,
        h.exchange,
        _log_level(h),
        h.call.era,
        client_capabilities=client_capabilities(h),
        lifespan=h.runtime.lifespan,
    )
    if h.call.era == "modern":
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: inputResponses must be an object")
        ctx.input_responses = responses
        if "requestState" not in params:
            ctx._answers, ctx.request_state = mrtr_answers(None, responses)
    return ctx


def _mrtr_binding(h: HandlerInput, target: str) -> str:
    request = h.call.request
    arguments = request.params.get("arguments") if request.method != "resources/read" else None
    return binding(mrtr_identity(h.caller), request.method, target, arguments)


def mrtr_identity(caller: Caller) -> str | None:
    """Who a ``requestState`` is bound to: the principal, else the caller's tenant.

    Without authentication the tenant is the client's address bucket
    (``ip:<bucket>``), so an anonymous caller elsewhere with the same
    arguments cannot replay another's state.  The ``principal:`` prefix is
    :func:`~.._core.namespace.tenant_for`'s, so a principal named like an
    address never matches that address's anonymous callers.
    """
    if caller.principal is not None:
        return f"principal:{caller.principal}"
    return caller.tenant


def input_required(h: HandlerInput, value: InputRequired, target: str) -> dict[str, Any]:
    """The ``InputRequiredResult`` for *value*, its state sealed; modern era only.

    It may only ask for what the client declared (``-32021`` otherwise).
    """
    if h.call.era != "modern":
        raise JsonRpcError(
            INVALID_PARAMS, "This request needs client input, which requires MCP 2026-07-28"
        )
    check_declared(value, client_capabilities(h))
    token = None
    if value.state is not None:
        token = h.registration.state_signer.seal(value.state, _mrtr_binding(h, target))
    return input_required_result(value, token)


def check_declared(value: InputRequired, declared: Mapping[str, Any]) -> None:
    """Input may only be asked of capabilities the client declared (``-32021``)."""
    missing: dict[str, Any] = {n: {} for n in value.capabilities() if n not in declared}
    if missing:
        raise JsonRpcError(
            MISSING_CLIENT_CAPABILITY,
            "Missing required client capability",
            {"requiredCapabilities": missing},
        )


async def run_target(
    h: HandlerInput,
    work: Awaitable[Any],
    key: tuple[RequestId, str] | None = None,
) -> Any:
    """Await *work* (not started yet) as the request's work: inside ``tracked()`` when the
    call's tool is cancellable.

    The work comes as the awaitable itself, not a function that makes it:
    a closure or ``functools.partial`` per call would be held, with its
    cells and arguments, for as long as the call runs (a suspended call's
    memory).  Work that never starts (tracking refused it) is closed, so
    it is not reported as never awaited.

    It is tracked under the request's id in the caller's namespace, or under
    *key* (``(id, namespace)``: a task is tracked by its task id).

    A :class:`RequestCancelled` raised by a helper task (inside an exception
    group) is the request's cancellation; a modern ``ctx.elicit``'s
    :class:`~.client_requests.InputRound` (alone, or inside an exception
    group of the tool's own nursery) is returned as the
    :class:`InputRequired` it stands for; other exceptions propagate.
    """
    tool = h.call.tool
    assert tool is not None
    try:
        try:
            if tool.cancellable:
                caller = h.caller
                registry = caller.registry
                # The request's id was validated once, by classification; a
                # task's key (the server's own id) goes through tracked().
                tracking = (
                    Tracking(registry, h.call.request.id, caller.namespace)
                    if key is None
                    else tracked(*key, registry=registry)
                )
                with tracking as tracked_request:  # never blocks: a plain ``with``
                    h.exchange.attach(tracked_request, registry)
                    if tool.time_limit_reason is not None:  # counted from this run's start
                        assert tool.time_limit is not None
                        due = tracked_request.started_at + tool.time_limit
                        registry.cancel_at(tracked_request, due, tool.time_limit_reason)
                    h.started()
                    return await work
            h.started()
            return await work
        except BaseException:
            _close(work)  # a no-op once it ran; no cost on the way through
            raise
    except (RequestCancelled, trio.Cancelled):
        raise
    except InputRound as round_:
        # A modern ctx.elicit: this run ends asking (see .client_requests).
        return round_.as_input_required()
    except BaseExceptionGroup as group:
        grouped = only_rounds(group)
        if grouped is not None:
            # ctx.elicit in a task of the tool's own nursery: the same round.
            return grouped.as_input_required()
        rest = without_rounds(group)
        if isinstance(rest, Exception):
            # Only when nothing in it is a trio.Cancelled (never swallowed).
            cancelled = _find_cancellation(rest)
            if cancelled is not None:
                # A helper task of the work stopped at checkpoint_cancelled().
                raise cancelled from group
        if rest is group:
            raise
        raise rest from None  # a round beside a real failure is the failure


async def invoke(
    h: HandlerInput,
    ctx: Context,
    arguments: dict[str, Any],
    key: tuple[RequestId, str] | None = None,
    ask: Callable[[InputRequired], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Run the call's tool with *ctx* (see :func:`run_target`); its result, as a tool result.

    With *ask* (a task), an ``InputRequired`` is handed to it and the tool
    runs again, still tracked, once it returns.
    """
    tool = h.call.tool
    assert tool is not None
    # The common case (no *ask*): the tool's own coroutine is the work, one frame
    # fewer, and no closure here (its cells would be held for the call's life).
    work = tool.fn(ctx, **arguments) if ask is None else _asking(tool.fn, ctx, arguments, ask)
    try:
        value = await run_target(h, work, key)
        if isinstance(value, InputRequired):
            return input_required(h, value, tool.name)
        return tool.result(value)
    except (RequestCancelled, trio.Cancelled, JsonRpcError):
        # A tool raising JsonRpcError asks for a protocol error (a failed task).
        raise
    except ToolError as exc:
        return error_result(str(exc))
    except Exception as exc:
        # A failing tool is a tool result, not a protocol error (MCP "isError").
        h.runtime.failures.exception(failure_key(tool.name, exc), "tool %r failed", tool.name)
        return error_result(f"{type(exc).__name__}: {exc}")


async def _asking(
    fn: Callable[..., Awaitable[Any]],
    ctx: Context,
    arguments: dict[str, Any],
    ask: Callable[[InputRequired], Awaitable[None]],
) -> Any:
    """Run the tool, and again after each ``InputRequired`` it returns has been asked (a task)."""
    value = await fn(ctx, **arguments)
    while isinstance(value, InputRequired):
        await ask(value)
        value = await fn(ctx, **arguments)
    return value


def _close(work: Awaitable[Any]) -> None:
    """Close *work* if it is a coroutine that never ran (no "never awaited" warning)."""
    close = getattr(work, "close", None)
    if close is not None:
        close()


def only_rounds(exc: BaseException) -> InputRound | None:
    """The round an exception group stands for, when rounds are all it holds.

    Several tasks may have asked at once: the first question in call order
    is asked (the others are asked again on the retry).  A round beside a
    real failure is the failure.
    """
    if not isinstance(exc, BaseExceptionGroup):
        return None
    rounds, rest = exc.split(InputRound)
    if rounds is None or rest is not None:
        return None
    leaves: list[InputRound] = []
    pending: list[BaseException] = [rounds]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        elif isinstance(item, InputRound):
            leaves.append(item)
    return min(leaves, key=lambda leaf: leaf.index, default=None)


def without_rounds(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """*group* without its rounds (the real failures beside them), or *group* itself.

    :class:`~.client_requests.InputRound` is a ``BaseException``, so a group
    holding one is a ``BaseExceptionGroup`` that ``except Exception`` would
    miss; what is left once the rounds are gone is what failed.
    """
    rounds, rest = group.split(InputRound)
    if rounds is None or rest is None:
        return group
    return rest


def _find_cancellation(exc: BaseException) -> RequestCancelled | None:
    """The first :class:`RequestCancelled` inside an exception group, if any."""
    if isinstance(exc, RequestCancelled):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_cancellation(inner)
            if found is not None:
                return found
    return None
