"""The HTTP app's health probes: ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness).

An orchestrator asks a server two different questions, and mixing them up
costs either restarts or lost requests:

* **Liveness** (``/healthz``): is the process up and its event loop
  answering?  Always ``200 {"status":"ok"}`` while it can answer at all,
  draining included: restarting a server that is writing its last answers
  would cut them.
* **Readiness** (``/readyz``): should this process get new traffic now?
  ``200 {"status":"ready"}``, or ``503 {"status":"not ready","reason":...}``
  while its registry is not running (before the lifespan started it, after
  it closed), while it drains on shutdown (``McpHttpApp.begin_shutdown``),
  or while its shared backend is unreachable or its circuit breaker is
  open (a backend that offers :class:`~...backends.base.ReadinessCheck`).

The probes are not MCP requests: the app answers them before the
``Origin`` check, authentication (an orchestrator holds no token), session
look-ups and the dispatcher, so they never count as calls, never take a
quota, and never reach a tool.  They live off the MCP endpoint, which is
routed first and which no probe path may equal.  ``GET`` and ``HEAD``
(the head of ``GET``'s answer, ``Content-Length`` included); any other
method is ``405``.

**Cheap under a flood.**  Liveness reads nothing.  Readiness reads the
app's own state (no I/O), and asks the backend at most once per
:data:`CHECK_TTL` seconds per process: the answer is cached, and probes
arriving while a check is in flight wait for that one, so a probe flood
never becomes a backend flood.  A check is bounded by
:data:`CHECK_TIMEOUT` seconds.  Each worker process answers for itself.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any, Final

import attrs
import trio

from ...backends.base import ReadinessCheck
from .writer import Sink

__all__ = ["CHECK_TIMEOUT", "CHECK_TTL", "Probes"]

logger = logging.getLogger("trio_mcp_cancel.http")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Seconds a backend check's answer is reused: one check per second per
#: process at most, however many probes arrive.
CHECK_TTL: Final = 1.0
#: Seconds a backend check may take before the answer is "did not answer in time".
CHECK_TIMEOUT: Final = 1.0

_ALIVE: Final = b'{"status":"ok"}'
_READY: Final = b'{"status":"ready"}'
_NOT_ALLOWED: Final = b'{"status":"method not allowed"}'
#: Probes are about now: no cache may answer one for the server.
_HEADERS: Final = ((b"content-type", b"application/json"), (b"cache-control", b"no-store"))
_ALLOW: Final = ((b"allow", b"GET, HEAD"),)


@attrs.define(eq=False)
class Probes:
    """The probe paths of one app and the readiness state behind them (see the module)."""

    health_path: str | None
    ready_path: str | None
    local: Callable[[], str | None]
    """Why the app is not ready from its own state (no I/O), or ``None``."""
    backend: ReadinessCheck | None = None
    """The shared backend, when it can say whether it is reachable."""
    paths: frozenset[str] = attrs.field(init=False)
    checks: int = attrs.field(init=False, default=0)
    """Backend checks started so far (at most one per :data:`CHECK_TTL`)."""
    _result: str | None = attrs.field(init=False, default=None)
    _checked_at: float = attrs.field(init=False, default=-math.inf)
    _checking: trio.Event | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.paths = frozenset(p for p in (self.health_path, self.ready_path) if p is not None)

    @classmethod
    def build(
        cls,
        health_path: str | None,
        ready_path: str | None,
        local: Callable[[], str | None],
        backend: object,
        *,
        taken: Collection[str],
    ) -> Probes:
        """Probes on these paths; :class:`ValueError` for a path that is not a path, or one
        in *taken* (the MCP endpoint, the OAuth metadata paths): a probe never shadows them."""
        for option, path in (("health_path", health_path), ("ready_path", ready_path)):
            if path is None:
                continue
            if not isinstance(path, str) or not path.startswith("/"):
                raise ValueError(f"{option} must be a path starting with '/' or None, not {path!r}")
            if path in taken:
                raise ValueError(f"{option} {path!r} is taken (the MCP endpoint or OAuth metadata)")
        if health_path is not None and health_path == ready_path:
            raise ValueError(f"health_path and ready_path must differ, both are {health_path!r}")
        check = backend if isinstance(backend, ReadinessCheck) else None
        return cls(health_path, ready_path, local, check)

    async def answer(self, sink: Sink, send: Send, path: str, method: str) -> None:
        """Answer the probe at *path* (one of :attr:`paths`)."""
        if method not in ("GET", "HEAD"):
            await _write(sink, send, 405, _NOT_ALLOWED, head_only=False, extra=_ALLOW)
            return
        if path == self.health_path:
            status, body = 200, _ALIVE
        else:
            reason = await self.not_ready()
            if reason is None:
                status, body = 200, _READY
            else:
                status = 503
                body = json.dumps({"status": "not ready", "reason": reason}).encode()
        await _write(sink, send, status, body, head_only=method == "HEAD")

    async def not_ready(self) -> str | None:
        """Why the app should get no new traffic now; ``None``: it is ready.

        The app's own state first (a draining app is not ready, whatever
        its backend says, and is not worth a round trip), then the backend's.
        """
        reason = self.local()
        if reason is not None:
            await trio.lowlevel.checkpoint()
            return reason
        return await self._backend_problem()

    async def _backend_problem(self) -> str | None:
        """The backend's answer, from the cache while fresh, else from one check for all."""
        backend = self.backend
        if backend is None:
            await trio.lowlevel.checkpoint()
            return None
        while True:
            if trio.current_time() < self._checked_at + CHECK_TTL:
                await trio.lowlevel.checkpoint()
                return self._result
            checking = self._checking
            if checking is None:
                break
            # Another probe is asking: its answer is ours too.  (A check that
            # was cancelled left the cache stale: then one of us asks again.)
            await checking.wait()
        self._checking = done = trio.Event()
        self.checks += 1
        try:
            result = await _ask(backend)
            self._result, self._checked_at = result, trio.current_time()
        finally:
            self._checking = None
            done.set()
        return result


async def _ask(backend: ReadinessCheck) -> str | None:
    """The backend's :meth:`~...backends.base.ReadinessCheck.check_ready`, bounded in time;
    a check that fails says so rather than failing the probe."""
    with trio.move_on_after(CHECK_TIMEOUT):
        try:
            return await backend.check_ready()
        except Exception as exc:
            logger.debug("the backend's readiness check failed: %r", exc)
            return "the shared backend's readiness check failed"
    return f"the shared backend did not answer within {CHECK_TIMEOUT:g}s"


async def _write(
    sink: Sink,
    send: Send,
    status: int,
    body: bytes,
    *,
    head_only: bool,
    extra: Collection[tuple[bytes, bytes]] = (),
) -> None:
    """Write a whole probe answer through the app's *sink* (so a client that does not
    read it is bounded by the write timeout, as any other); for ``HEAD``, the head
    ``GET`` would have (its ``Content-Length`` too) and no body."""
    headers = [(b"content-length", str(len(body)).encode()), *_HEADERS, *extra]
    writer = sink.writer(send)
    writer.put({"type": "http.response.start", "status": status, "headers": headers})
    message = {"type": "http.response.body", "body": b"" if head_only else body, "more_body": False}
    writer.put(message, final=True)
    service = sink.service
    if service is None:
        await writer.run()  # no lifespan: inline, as an ASGI app usually writes
        return
    await sink.write_whole(writer, send, service)
    await sink.drain(writer)
