"""The Redis backend: task records and cancellation requests shared by every worker and node.

``pip install 'trio-mcp-cancel[redis]'`` (it uses `coredis`_, async and
typed, which runs on Trio through anyio and speaks to Redis, Redis Cluster
and Sentinel).  ``McpHttpApp(server, backend=RedisBackend(url))`` and the
ASGI lifespan connects it.

.. _coredis: https://coredis.readthedocs.io

**Standalone, Sentinel or Cluster.**  ``redis://`` (or ``rediss://``,
``unix://``) is one Redis server; ``redis+sentinel://host:port[,host:port...]/service[/db]``
asks the Sentinels for the primary of *service* and follows failovers (the
URL's user and password are the primary's; Sentinels that want their own
need :meth:`RedisBackend.from_client` with coredis's ``sentinel_kwargs``);
``redis+cluster://host:port`` (or ``rediss+cluster://``) is a Redis Cluster
reached through any of its nodes.  :meth:`RedisBackend.from_client` takes a
coredis client built by hand (any of coredis's ``Redis``, ``RedisCluster``,
or a Sentinel's ``primary_for()``) for settings a URL cannot carry.

**One hash slot.**  Every key starts with the hash tag ``{prefix}`` (the
braces are part of the key), so on a Cluster all of a deployment's keys
live in one slot, and every Lua script, which declares each key it touches
in ``KEYS``, runs on one node as Cluster requires.  What is stored is small
(records, counters; no tool data), so one shard carries it easily; give
each deployment its own prefix to spread several over the cluster.  A
*prefix* that already holds a ``{...}`` tag is used as it is.

**What lives in Redis** (``P`` is ``{prefix}``, ``{tmc}`` by default):

* ``P:task:{taskId}``: a hash per task record.  It expires by itself
  at ``createdAt + ttlMs`` (``PEXPIREAT``, wall-clock milliseconds), so a
  worker that dies leaves nothing behind for longer than the TTL.  Settling
  and cancel requests are Lua scripts: one atomic step each, so the first
  terminal state wins whichever process writes it.
* ``P:session:{sha256 of the session id}``: a legacy session (its
  principal, public id and what ``initialize`` negotiated), with the
  session idle timeout as its TTL, so any worker can serve the session.
* ``P:cancel``: a pub/sub channel (on a Cluster, ``PUBLISH`` reaches every
  node). A ``tasks/cancel`` (or a legacy ``notifications/cancelled``)
  arriving at the wrong process is published there; the process that runs
  the work applies it to its local cancel scope, with the registry's two
  phases. The request is also written to the task record, which running
  tasks re-read now and then, so a message lost while Redis was down is
  honoured once it is back.

* ``P:quota:{name}``: per-tenant counters of calls and tasks in
  flight, summed over every live process, so a quota cannot be bypassed by
  spreading requests over workers (see :class:`RedisCounters`).

**When Redis is down or hung** nothing local stops: requests keep running, a
cancel of a request running in this process works as before.  A circuit
breaker (:class:`_Health`) makes the first operation that fails or times out
(``hot_timeout`` for what a request waits for, ``op_timeout`` for background
work) the only one that waits: until the heartbeat's probe finds Redis back,
request-path operations are skipped at once; it closes after several
probes in a row succeed (:class:`~._breaker.Breaker`'s hysteresis).  Each
request-path operation is one round trip (pipelines; the scripts are
loaded by the heartbeat), so a Redis slower than usual but within
``hot_timeout`` never opens it.  What needs Redis fails with a
clear error (``tasks/*`` answer ``-32603`` "the task store is unavailable"),
the quotas fall back to this process's own count, a task that ends
meanwhile keeps its final state in a bounded outbox (written, never over a
terminal state, once Redis answers: :meth:`RedisTaskStore.flush`), and a
``backend.unavailable`` event is emitted (and logged) once per outage, when
the breaker opens, and ``backend.recovered`` once, when it closes; coredis
reconnects by itself, the subscription too.  Meanwhile the HTTP app's
readiness probe answers ``503`` (:meth:`RedisBackend.check_ready`).  The events go to the
:class:`~trio_mcp_cancel.Registry`'s event hub when the backend runs under
an HTTP app (see :meth:`RedisBackend.attach_events`), so one
``registry.events.subscribe`` sees them with every other event.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import secrets
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import unquote, urlsplit

import attrs
import trio

from .._public import missing_extra

try:
    import anyio
    import coredis
    import coredis.exceptions
    from coredis.connection import TCPLocation
    from coredis.retry import ExponentialBackoffRetryPolicy
    from coredis.tokens import PureToken
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("the Redis backend", "redis", exc) from exc

from .._core.events import BackendEvent, EventHub, attach_events
from .._wire.names import INTERNAL_ERROR, TASK_STATUSES, TERMINAL_STATUSES
from ._breaker import Breaker
from ._outbox import Outbox, PendingState
from .base import BackendUnavailable, BusMessage, TaskStoreFull, TaskStoreUnavailable
from .task_records import TaskRecord, TaskStatus, settled_payload

__all__ = [
    "RedisBackend",
    "RedisBus",
    "RedisClient",
    "RedisCounters",
    "RedisSessionRecords",
    "RedisTaskStore",
]

logger = logging.getLogger("trio_mcp_cancel.redis")
T = TypeVar("T")
Clock = Callable[[], float]

RedisClient = coredis.Redis[str] | coredis.RedisCluster[str]
"""A coredis client (``decode_responses=True``): one server, a Sentinel primary, a Cluster."""


@attrs.frozen
class _Keys:
    """Every key and the channel of one deployment, under one hash tag (module docstring)."""

    prefix: str = "tmc"

    @property
    def base(self) -> str:
        tag_start = self.prefix.find("{")
        if tag_start >= 0 and self.prefix.find("}", tag_start) > tag_start + 1:
            return self.prefix  # the caller chose the hash tag
        return "{" + self.prefix + "}"

    def task(self, task_id: str) -> str:
        return f"{self.base}:task:{task_id}"

    def alive(self, instance: str) -> str:
        return f"{self.base}:alive:{instance}"

    def owner(self, owner: str) -> str:
        return f"{self.base}:owner:{hashlib.sha256(owner.encode()).hexdigest()}"

    def session(self, key: str) -> str:
        return f"{self.base}:session:{key}"

    def sessions_of(self, tenant: str | None) -> str:
        return f"{self.base}:sessions-of:{hashlib.sha256((tenant or '').encode()).hexdigest()}"

    def quota(self, name: str) -> str:
        return f"{self.base}:quota:{name}"

    @property
    def channel(self) -> str:
        return f"{self.base}:cancel"


_REDIS_ERRORS: Final = (coredis.exceptions.RedisError, OSError, TimeoutError)
#: What coredis's connections raise from their own cleanup when they are
#: cancelled mid-operation (their anyio streams already closed): harmless
#: at shutdown, so dropped there, while ``trio.Cancelled`` goes on.
#: What a coredis client closed under a call raises (besides its ``RuntimeError``).
_CLOSED: Final = (anyio.ClosedResourceError, anyio.BrokenResourceError)
_SHUTDOWN_NOISE: Final = (
    *_REDIS_ERRORS,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.WouldBlock,
)


def _drop_shutdown_noise(group: BaseExceptionGroup[BaseException]) -> None:
    """Re-raise what is left of *group* without :data:`_SHUTDOWN_NOISE` (usually Cancelled)."""
    _, rest = group.split(_SHUTDOWN_NOISE)
    if rest is not None:
        raise rest


# KEYS: the task, its creator's liveness key, its tenant's index of tasks.
# ARGV: expiry (ms since the epoch, or ''), liveness ms, now ms, cap (or ''),
# task id, then the record's fields.
# O(log n) amortised: only expired members are removed (each once, capped or
# not, so the index never grows with expired ones), the cap is a ZCARD.
_CREATE: Final = """
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3])
if ARGV[4] ~= '' and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 6))
if ARGV[1] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[5])
  if redis.call('PTTL', KEYS[3]) == -1 then
    -- new index, or one holding unlimited tasks (which keep it for ever)
    if redis.call('ZCOUNT', KEYS[3], '+inf', '+inf') == 0 then
      redis.call('PEXPIREAT', KEYS[3], ARGV[1])
    end
  else
    redis.call('PEXPIREAT', KEYS[3], ARGV[1], 'GT')
  end
else
  redis.call('ZADD', KEYS[3], '+inf', ARGV[5])
  redis.call('PERSIST', KEYS[3])
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return 1
"""

_SETTLE: Final = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status == 'completed' or status == 'failed' or status == 'cancelled' then return 1 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'updated_at', ARGV[2],
           'result', ARGV[3], 'error', ARGV[4], 'input_requests', ARGV[6] or '')
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'status_message', ARGV[5]) end
return 2
"""

_REQUEST_CANCEL: Final = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status == 'completed' or status == 'failed' or status == 'cancelled' then return 1 end
if redis.call('HGET', KEYS[1], 'cancel_requested') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel_requested', '1', 'updated_at', ARGV[1])
end
return 2
"""

# KEYS: the task.  ARGV: the status message, now.  Never touches a terminal task.
_SET_MESSAGE: Final = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status == 'completed' or status == 'failed' or status == 'cancelled' then return 1 end
redis.call('HSET', KEYS[1], 'status_message', ARGV[1], 'updated_at', ARGV[2])
return 2
"""


# KEYS: task records (one hash slot).  ARGV: instance, now, error JSON, message.
# Fails the records of *instance* that are not terminal; how many it failed.
_FAIL_OF: Final = """
local failed = 0
for i = 1, #KEYS do
  local fields = redis.call('HMGET', KEYS[i], 'instance', 'status')
  local status = fields[2]
  if fields[1] == ARGV[1] and status and status ~= 'completed' and status ~= 'failed'
     and status ~= 'cancelled' then
    redis.call('HSET', KEYS[i], 'status', 'failed', 'updated_at', ARGV[2], 'result', '',
               'error', ARGV[3], 'input_requests', '', 'status_message', ARGV[4])
    failed = failed + 1
  end
end
return failed
"""
#: Task keys per :data:`_FAIL_OF` call while sweeping (and per ``SCAN`` step).
_SWEEP_BATCH: Final = 500


@attrs.define(eq=False)
class _Health:
    """Turns Redis failures into one clear error type and one event per outage.

    A circuit :class:`~._breaker.Breaker` stands in front of every call:
    once one fails or times out, calls are skipped at once (the caller gets
    its "unavailable" error and falls back to what this process can do
    alone) until probes succeed (several in a row: the breaker's
    hysteresis, so a slow Redis does not make it flap).  The backend's
    heartbeat is the probe (:attr:`prober`: it wakes at the breaker's
    retry time); without a
    heartbeat, one ordinary call is let through when a probe is due.
    Request-path calls wait at most *hot_timeout*; background ones
    (``slow=True``: the heartbeat, quota repair, writing a task's final
    state) the longer *op_timeout*.
    """

    events: EventHub
    op_timeout: float
    hot_timeout: float = 0.1
    breaker: Breaker = attrs.field(factory=lambda: Breaker(trio.current_time))
    prober: bool = False
    """Whether a heartbeat probes the backend (then the request path never does)."""
    _opened: trio.Event = attrs.field(init=False, factory=trio.Event)
    stopped: bool = False
    """Whether the backend stopped (its client closed): calls then fail as "unavailable",
    never with coredis's ``RuntimeError`` about a closed pool (what a call still in
    flight at shutdown, a quota release say, would otherwise get)."""

    @property
    def down(self) -> bool:
        """Whether the breaker is open (the last call failed; none succeeded since)."""
        return self.breaker.is_open

    async def call(
        self,
        operation: str,
        fn: Callable[[], Awaitable[T]],
        error: type[Exception],
        *,
        slow: bool = False,
        probe: bool = False,
        attempt: bool = False,
    ) -> T:
        """*fn*'s value, within the timeout; *error* when it failed, timed out or was skipped.

        *attempt*: a write that must not be skipped (a new session other
        workers will look up): sent even while the breaker is open, and
        then bounded by *hot_timeout*; its success counts toward closing the
        breaker like a probe's, its failure does not delay the next probe.
        """
        if self.stopped:
            await trio.lowlevel.checkpoint()
            raise error(f"Redis is unavailable ({operation}): the backend has stopped")
        if attempt and self.breaker.is_open:
            slow = False  # an open breaker: nobody waits long for a write that may not happen
        elif not probe and not self.breaker.allow():
            probe = not self.prober and self.breaker.try_probe()
            if not probe:
                await trio.lowlevel.checkpoint()
                raise error(f"Redis is unavailable ({operation}): skipped until it answers again")
        try:
            with trio.fail_after(self.op_timeout if slow else self.hot_timeout):
                value = await fn()
        except (*_REDIS_ERRORS, trio.TooSlowError) as exc:
            self.failed(operation, exc, probe=probe)
            raise error(f"Redis is unavailable ({operation}): {exc!r}"[:300]) from exc
        except (RuntimeError, *_CLOSED) as exc:
            if not self.stopped:
                raise
            # The client closed during the call (shutdown): not an outage, no event.
            raise error(f"Redis is unavailable ({operation}): the backend has stopped") from exc
        except BaseException:
            if probe:
                self.breaker.failure(probe=True)  # cancelled: the next probe is due later
            raise
        if self.breaker.success(probe=probe or attempt):
            self.events.emit(BackendEvent("backend.recovered", operation, ""))
        return value

    def failed(self, operation: str, exc: BaseException, *, probe: bool = False) -> None:
        """Count a failure; the first one of an outage opens the breaker and is reported."""
        if self.breaker.failure(probe=probe):
            self.events.emit(BackendEvent("backend.unavailable", operation, repr(exc)[:200]))
            self._opened.set()
            self._opened = trio.Event()

    async def until_probe(self, interval: float) -> None:
        """Sleep *interval* seconds, or only until the breaker's next probe is due."""
        deadline = trio.current_time() + interval
        while not self.breaker.is_open:
            opened = self._opened
            with trio.move_on_at(deadline):
                await opened.wait()
            if not opened.is_set():
                return
        await trio.sleep_until(min(deadline, self.breaker.retry_at))


def _dump(value: object) -> str:
    return "" if value is None else json.dumps(value, separators=(",", ":"))


def _opt_int(value: int | None) -> str:
    return "" if value is None else str(value)


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text else None


def _load(text: str | None) -> Any:
    return None if not text else json.loads(text)


@attrs.define(eq=False)
class RedisTaskStore:
    """Task records as Redis hashes; see the module docstring."""

    client: RedisClient
    health: _Health
    keys: _Keys = _Keys()
    clock: Clock = time.time
    liveness: float = 15.0
    """See :class:`RedisCounters`: a task whose process's liveness key is gone is orphaned."""
    outbox: Outbox = attrs.field(factory=Outbox)
    """Final states of tasks that ended while Redis could not be written (see :meth:`flush`)."""
    _create: Any = attrs.field(init=False, default=None)
    _settle: Any = attrs.field(init=False, default=None)
    _request_cancel: Any = attrs.field(init=False, default=None)
    _set_message: Any = attrs.field(init=False, default=None)
    _fail_of: Any = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._set_message = self.client.register_script(_SET_MESSAGE)
        self._fail_of = self.client.register_script(_FAIL_OF)
        self._create = self.client.register_script(_CREATE)
        self._settle = self.client.register_script(_SETTLE)
        self._request_cancel = self.client.register_script(_REQUEST_CANCEL)

    def key(self, task_id: str) -> str:
        return self.keys.task(task_id)

    async def create(self, record: TaskRecord, max_per_owner: int | None = None) -> None:
        expires = record.expires_at
        fields = [
            "owner", record.owner,
            "tenant", record.tenant,
            "status", record.status,
            "created_at", repr(record.created_at),
            "updated_at", repr(record.updated_at),
            "ttl_ms", _opt_int(record.ttl_ms),
            "poll_interval_ms", _opt_int(record.poll_interval_ms),
            "status_message", record.status_message or "",
            "result", _dump(record.result),
            "error", _dump(record.error),
            "cancel_requested", "1" if record.cancel_requested else "0",
            "instance", record.instance,
            "input_requests", _dump(record.input_requests),
        ]  # fmt: skip
        at = "" if math.isinf(expires) else str(int(expires * 1000))
        key = self.key(record.task_id)
        # The creator's liveness key is set with the record, so a task is
        # never seen without it (after a Redis restart, say).
        alive = self.keys.alive(record.instance)
        # The quota index is the tenant's: its connections and sessions share it.
        owned = self.keys.owner(record.quota_key)
        args = [
            at,
            str(max(1, int(self.liveness * 1000))),
            str(int(self.clock() * 1000)),
            "" if max_per_owner is None else str(max_per_owner),
            record.task_id,
            *fields,
        ]
        created: object = await self.health.call(
            "tasks.create",
            lambda: self._create(keys=[key, alive, owned], args=args),
            TaskStoreUnavailable,
            slow=True,  # durable: a write cut short could leave a task nobody knows of
        )
        if created == 0:
            assert max_per_owner is not None
            raise TaskStoreFull(max_per_owner)

    async def orphaned(self, record: TaskRecord) -> bool:
        """Whether the process running the task stopped refreshing its liveness key."""
        if record.terminal or not record.instance:
            return False
        key = self.keys.alive(record.instance)
        alive = await self.health.call(
            "tasks.orphaned", lambda: self.client.exists([key]), TaskStoreUnavailable
        )
        return alive == 0

    async def fail_tasks_of(self, instance: str, message: str) -> int:
        """Settle ``failed`` every task *instance* was running; how many it failed.

        For a supervisor that saw the process with that instance id die
        (``trio-mcp-cancel run --workers N``): its tasks read ``failed`` at
        once instead of when its liveness key expires.  The liveness key is
        deleted first, so a record this sweep misses is still settled by the
        next ``tasks/get`` (:meth:`orphaned`).  The records are found by a
        ``SCAN`` of the task keys (the store keeps no index per instance: a
        rare event pays, not every task creation), each step bounded by
        ``op_timeout``; the first terminal state still wins.
        """
        error = {"code": INTERNAL_ERROR, "message": "The server process running it stopped"}
        _, kept, _ = settled_payload("failed", result=None, error=error, input_requests=None)
        args = [instance, repr(self.clock()), _dump(kept), message]
        glob = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self.keys.base)
        keys = self.client.scan_iter(match=f"{glob}:task:*", count=_SWEEP_BATCH)
        alive = self.keys.alive(instance)
        call = self.health.call
        await call("tasks.fail_of", lambda: self.client.delete([alive]), TaskStoreUnavailable)
        failed = 0
        while True:
            batch: list[str] = []
            with contextlib.suppress(StopAsyncIteration):
                while len(batch) < _SWEEP_BATCH:
                    batch.append(await call("tasks.fail_of", keys.__anext__, TaskStoreUnavailable))
            if batch:
                done: object = await call(
                    "tasks.fail_of",
                    lambda: self._fail_of(keys=batch, args=args),  # noqa: B023
                    TaskStoreUnavailable,
                )
                failed += int(done)  # type: ignore[call-overload]
            if len(batch) < _SWEEP_BATCH:
                return failed

    async def get(self, task_id: str) -> TaskRecord | None:
        key = self.key(task_id)
        data = await self.health.call(
            "tasks.get", lambda: self.client.hgetall(key), TaskStoreUnavailable
        )
        return self._loaded(task_id, data)

    async def get_many(self, task_ids: list[str]) -> list[TaskRecord | None]:
        """The records of *task_ids* (``None`` where unknown), read in one round trip."""
        if not task_ids:
            await trio.lowlevel.checkpoint()
            return []
        keys = [self.key(task_id) for task_id in task_ids]

        async def read() -> list[dict[str, str]]:
            async with self.client.pipeline(transaction=False) as pipe:
                replies = [pipe.hgetall(key) for key in keys]
            return [await reply for reply in replies]

        found = await self.health.call("tasks.get", read, TaskStoreUnavailable)
        return [self._loaded(task_id, data) for task_id, data in zip(task_ids, found, strict=True)]

    def _loaded(self, task_id: str, data: dict[str, str]) -> TaskRecord | None:
        """A record from its hash (``None``: missing, malformed or expired), as this
        process knows it (a final state still in the :attr:`outbox` is applied)."""
        if not data or data.get("status") not in TASK_STATUSES:
            return None
        record = TaskRecord(
            task_id=task_id,
            owner=data.get("owner", ""),
            tenant=data.get("tenant", ""),
            status=data["status"],  # type: ignore[arg-type]
            created_at=float(data.get("created_at", "0")),
            updated_at=float(data.get("updated_at", "0")),
            ttl_ms=_int_or_none(data.get("ttl_ms")),
            poll_interval_ms=_int_or_none(data.get("poll_interval_ms")),
            status_message=data.get("status_message") or None,
            result=_load(data.get("result")),
            error=_load(data.get("error")),
            cancel_requested=data.get("cancel_requested") == "1",
            instance=data.get("instance", ""),
            input_requests=_load(data.get("input_requests")),
        )
        if record.expires_at <= self.clock():
            return None
        return self.outbox.overlay(record)

    async def settle(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        message: str | None = None,
        input_requests: dict[str, Any] | None = None,
    ) -> TaskRecord | None:
        kept = settled_payload(status, result=result, error=error, input_requests=input_requests)
        args = [
            status,
            repr(self.clock()),
            _dump(kept[0]),
            _dump(kept[1]),
            message or "",
            _dump(kept[2]),
        ]
        key = self.key(task_id)
        final = None
        if status in TERMINAL_STATUSES:
            final = PendingState(status, float(args[1]), kept[0], kept[1], message)
        try:
            await self.health.call(
                "tasks.settle",
                lambda: self._settle(keys=[key], args=args),
                TaskStoreUnavailable,
                slow=True,
            )
        except TaskStoreUnavailable as exc:
            if final is None:
                raise
            self.outbox.keep(task_id, final)
            raise TaskStoreUnavailable(f"{exc}; kept to be written when Redis answers") from exc
        except BaseException:
            if final is not None:  # cancelled while Redis did not answer
                self.outbox.keep(task_id, final)
                logger.warning(
                    "task %s ended %s; Redis did not answer in time: kept to be written later",
                    task_id[:8],
                    status,
                )
            raise
        if final is not None:
            self.outbox.discard(task_id)
        return await self.get(task_id)

    async def flush(self) -> int:
        """Write the final states kept in the :attr:`outbox` (the heartbeat's job once
        Redis answers); how many were written.

        The settle script never overwrites a terminal state, so a task that
        another process settled meanwhile (or one that expired) keeps what
        Redis has.
        """
        written = kept = gone = 0
        for task_id, state in self.outbox.pending():
            kept_result, kept_error, _ = settled_payload(
                state.status, result=state.result, error=state.error, input_requests=None
            )
            args = [
                state.status,
                repr(state.updated_at),
                _dump(kept_result),
                _dump(kept_error),
                state.message or "",
                "",
            ]
            key = self.key(task_id)
            outcome: object = await self.health.call(
                "tasks.outbox",
                lambda key=key, args=args: self._settle(  # type: ignore[misc]
                    keys=[key], args=args
                ),
                TaskStoreUnavailable,
                slow=True,
            )
            self.outbox.done(task_id, state)
            if outcome == 2:
                written += 1
                logger.debug("task %s: final state %s written", task_id[:8], state.status)
            elif outcome == 1:
                kept += 1
            else:
                gone += 1
        if written or kept or gone:
            logger.info(
                "Redis answers again: %d final task state(s) kept during the outage written "
                "(%d already settled elsewhere, %d expired)",
                written,
                kept,
                gone,
            )
        return written

    async def request_cancel(self, task_id: str) -> TaskRecord | None:
        key = self.key(task_id)
        now = repr(self.clock())
        done: object = await self.health.call(
            "tasks.cancel",
            lambda: self._request_cancel(keys=[key], args=[now]),
            TaskStoreUnavailable,
        )
        return None if done == 0 else await self.get(task_id)

    async def set_message(self, task_id: str, message: str) -> TaskRecord | None:
        key = self.key(task_id)
        args = [message, repr(self.clock())]
        done: object = await self.health.call(
            "tasks.progress",
            lambda: self._set_message(keys=[key], args=args),
            TaskStoreUnavailable,
            slow=True,
        )
        return None if done != 2 else await self.get(task_id)

    async def purge(self) -> int:
        """Redis expires task keys by itself (``PEXPIREAT``): nothing to do."""
        await trio.lowlevel.checkpoint()
        return 0


# KEYS: the session record, its tenant's index of live sessions.
# ARGV: record JSON, TTL ms (or ''), now ms, cap (or ''), member, index score.
# The used-requestState set and its epoch (KEYS[2]: when the set began, Redis
# time in seconds; both keys share the deployment's hash tag).  A set without
# its epoch lost its data: the epoch restarts now, and a state sealed before
# it (ARGV[2]) cannot be confirmed unused (-1).
_CLAIM_STATE: Final = """
local epoch = redis.call('GET', KEYS[2])
if not epoch then
    epoch = redis.call('TIME')[1]
    redis.call('SET', KEYS[2], epoch)
end
if tonumber(ARGV[2]) < tonumber(epoch) then
    return -1
end
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
    return 1
end
return 0
"""

_MARK_STATE_EPOCH: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SET', KEYS[1], redis.call('TIME')[1])
end
return 1
"""

_PUT_SESSION: Final = """
if ARGV[4] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
  if not redis.call('ZSCORE', KEYS[2], ARGV[5])
     and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then
    return 0
  end
end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
if ARGV[2] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT') end
if redis.call('PTTL', KEYS[2]) == -1 and ARGV[2] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
"""

# KEYS: the session record, its tenant's index of live sessions.
# ARGV: member, cap, now ms.  Ends the session only while its tenant still
# holds its cap (so two workers asked to make room for one new session do
# not both end one): 1 ended, 0 the room is made already, -1 not listed.
_EVICT_SESSION: Final = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
if redis.call('ZCARD', KEYS[2]) < tonumber(ARGV[2]) then
  return 0
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return -1
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return 1
"""


@attrs.define(eq=False)
class RedisSessionRecords:
    """Legacy session records (JSON strings with an idle TTL), shared by every worker.

    Each tenant also has an index of its live sessions (a sorted set scored
    by expiry), which bounds sessions per tenant across every process.
    """

    client: RedisClient
    health: _Health
    keys: _Keys = _Keys()
    clock: Clock = time.time
    shared: bool = True
    _put: Any = attrs.field(init=False, default=None)
    _evict: Any = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._put = self.client.register_script(_PUT_SESSION)
        self._evict = self.client.register_script(_EVICT_SESSION)

    def _key(self, key: str) -> str:
        return self.keys.session(key)

    def _index(self, tenant: str | None) -> str:
        return self.keys.sessions_of(tenant)

    async def put(
        self,
        key: str,
        record: dict[str, Any],
        ttl: float | None,
        *,
        tenant: str | None = None,
        cap: int | None = None,
    ) -> bool:
        text = json.dumps(record, separators=(",", ":"))
        now_ms = int(self.clock() * 1000)
        ttl_ms = None if ttl is None else max(1, int(ttl * 1000))
        args = [
            text,
            "" if ttl_ms is None else str(ttl_ms),
            str(now_ms),
            "" if cap is None else str(cap),
            key,
            "+inf" if ttl_ms is None else str(now_ms + ttl_ms),
        ]
        keys = [self._key(key), self._index(tenant)]
        stored: object = await self.health.call(
            "sessions.put",
            lambda: self._put(keys=keys, args=args),
            BackendUnavailable,
            # Durable, as a task's creation, and tried even with the breaker open:
            # the next POST may reach a worker that finds no record and says 404.
            slow=True,
            attempt=True,
        )
        return stored == 1

    async def oldest(self, tenant: str | None, count: int) -> list[str]:
        """Up to *count* of *tenant*'s live sessions, the least recently refreshed first."""
        index, now_ms = self._index(tenant), int(self.clock() * 1000)
        members = await self.health.call(
            "sessions.oldest",
            lambda: self.client.zrange(
                index, now_ms, "+inf", sortby=PureToken.BYSCORE, offset=0, count=count
            ),
            BackendUnavailable,
        )
        return [m if isinstance(m, str) else str(m) for m in members]

    async def evict(self, key: str, *, tenant: str | None, cap: int) -> int:
        keys = [self._key(key), self._index(tenant)]
        args = [key, str(cap), str(int(self.clock() * 1000))]
        ended: object = await self.health.call(
            "sessions.evict", lambda: self._evict(keys=keys, args=args), BackendUnavailable
        )
        return ended if isinstance(ended, int) else 0

    async def get(self, key: str) -> dict[str, Any] | None:
        redis_key = self._key(key)
        text = await self.health.call(
            "sessions.get", lambda: self.client.get(redis_key), BackendUnavailable
        )
        try:
            record = json.loads(text) if text else None
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    async def touch(self, key: str, ttl: float | None, *, tenant: str | None = None) -> None:
        if ttl is None:
            return
        redis_key, index = self._key(key), self._index(tenant)
        ttl_ms = max(1, int(ttl * 1000))
        expiry = int(self.clock() * 1000) + ttl_ms

        async def refresh() -> None:
            # One round trip (pipelined): two in a row cost twice the latency, so
            # a Redis more than half the hot timeout away made every touch time out.
            async with self.client.pipeline(transaction=False) as pipe:
                replies = [
                    pipe.pexpire(redis_key, ttl_ms),
                    pipe.zadd(index, {key: expiry}, condition=PureToken.XX),
                ]
            for reply in replies:
                await reply

        await self.health.call("sessions.touch", refresh, BackendUnavailable)

    async def delete(self, key: str, *, tenant: str | None = None) -> None:
        redis_key, index = self._key(key), self._index(tenant)

        async def remove() -> None:
            async with self.client.pipeline(transaction=False) as pipe:  # one round trip
                replies = [pipe.delete([redis_key]), pipe.zrem(index, [key])]
            for reply in replies:
                await reply

        await self.health.call("sessions.delete", remove, BackendUnavailable)


# A counter is one hash: field <instance> holds its units, field
# "exp:<instance>" the wall-clock ms until which they count (refreshed by
# the instance's heartbeat).  Scripts touch only KEYS[1] (Cluster-safe).
# ARGV: instance, cap, now ms, the caller's new expiry ms.
_ACQUIRE: Final = """
local fields = redis.call('HGETALL', KEYS[1])
local expiry = {}
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 4) == 'exp:' then
    expiry[string.sub(fields[i], 5)] = tonumber(fields[i + 1])
  end
end
local now = tonumber(ARGV[3])
local total = 0
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, 1, 4) ~= 'exp:' then
    if name == ARGV[1] or (expiry[name] and expiry[name] > now) then
      total = total + tonumber(fields[i + 1])
    else
      redis.call('HDEL', KEYS[1], name, 'exp:' .. name)
    end
  end
end
if total >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HSET', KEYS[1], 'exp:' .. ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], 86400000)
return 1
"""

# ARGV: instance.
_RELEASE: Final = """
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left <= 0 then redis.call('HDEL', KEYS[1], ARGV[1], 'exp:' .. ARGV[1]) end
return left
"""

# The instance's true count and a fresh expiry.  ARGV: instance, count, expiry ms.
_RESYNC: Final = """
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'exp:' .. ARGV[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[1], 86400000)
else
  redis.call('HDEL', KEYS[1], ARGV[1], 'exp:' .. ARGV[1])
end
return 1
"""


@attrs.define(eq=False)
class RedisCounters:
    """Quota counters: one hash per counter, one field per live instance.

    Each instance's units count only until the expiry stored next to them
    in the same hash, which the backend's heartbeat pushes ``liveness``
    seconds ahead every ``liveness / 3`` seconds (rewriting the true count
    too, so a Redis restart or a lost release heals within a beat), so the
    units of a process that died lapse within ``liveness`` seconds.  Every
    script touches its one hash only, as Redis Cluster requires.  Expiries
    are wall-clock: the hosts' clocks must agree to well within
    ``liveness``.
    """

    client: RedisClient
    health: _Health
    keys: _Keys
    instance_id: str
    clock: Clock = time.time
    liveness: float = 15.0
    shared: bool = True
    _acquire: Any = attrs.field(init=False, default=None)
    _release: Any = attrs.field(init=False, default=None)
    _resync: Any = attrs.field(init=False, default=None)
    _held: dict[str, int] = attrs.field(init=False, factory=dict)
    """Units this process holds, by counter: the truth a failed release is repaired from."""
    _dirty: set[str] = attrs.field(init=False, factory=set)

    def __attrs_post_init__(self) -> None:
        self._acquire = self.client.register_script(_ACQUIRE)
        self._release = self.client.register_script(_RELEASE)
        self._resync = self.client.register_script(_RESYNC)

    @property
    def alive_key(self) -> str:
        return self.keys.alive(self.instance_id)

    def _expiry(self) -> tuple[str, str]:
        now = int(self.clock() * 1000)
        return str(now), str(now + max(1, int(self.liveness * 1000)))

    async def acquire(self, name: str, cap: int) -> bool:
        key = self.keys.quota(name)
        now, expiry = self._expiry()
        args = [self.instance_id, str(cap), now, expiry]
        try:
            taken: object = await self.health.call(
                "quota.acquire",
                lambda: self._acquire(keys=[key], args=args),
                BackendUnavailable,
            )
        except BackendUnavailable:
            # A hung Redis may still run it once it wakes up: the next resync
            # writes this process's true count over whatever it did.
            self._dirty.add(name)
            raise
        if taken == 1:
            self._held[name] = self._held.get(name, 0) + 1
        return taken == 1

    async def release(self, name: str) -> None:
        """Give a unit back; when Redis cannot be told, the next heartbeat repairs it."""
        held = self._held.get(name, 0) - 1
        if held > 0:
            self._held[name] = held
        else:
            self._held.pop(name, None)
        key = self.keys.quota(name)
        try:
            await self.health.call(
                "quota.release",
                lambda: self._release(keys=[key], args=[self.instance_id]),
                BackendUnavailable,
            )
        except BackendUnavailable:
            self._dirty.add(name)
            raise

    async def resync(self) -> None:
        """Write the true count, with a fresh expiry, of every counter held here
        and of every one a failed release left wrong (the heartbeat's job)."""
        for name in list(self._held.keys() | self._dirty):
            key = self.keys.quota(name)
            count = str(self._held.get(name, 0))
            _, expiry = self._expiry()
            await self.health.call(
                "quota.resync",
                lambda key=key, count=count, expiry=expiry: self._resync(  # type: ignore[misc]
                    keys=[key], args=[self.instance_id, count, expiry]
                ),
                BackendUnavailable,
                slow=True,
            )
            self._dirty.discard(name)


@attrs.define(eq=False)
class RedisBus:
    """Cancellation requests over Redis pub/sub; see the module docstring."""

    client: RedisClient
    health: _Health
    channel: str
    instance_id: str
    shared: bool = True
    _handlers: list[Callable[[BusMessage], object]] = attrs.field(init=False, factory=list)
    subscribed: trio.Event = attrs.field(init=False, factory=trio.Event)

    async def publish(self, message: BusMessage) -> None:
        text = json.dumps({**message, "origin": self.instance_id}, separators=(",", ":"))
        await self.health.call(
            "publish", lambda: self.client.publish(self.channel, text), BackendUnavailable
        )

    def subscribe(self, handler: Callable[[BusMessage], object]) -> Callable[[], None]:
        self._handlers.append(handler)

        def unsubscribe() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return unsubscribe

    def _deliver(self, text: object) -> None:
        try:
            message = json.loads(text) if isinstance(text, str | bytes) else None
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("origin") == self.instance_id:
            return
        for handler in list(self._handlers):
            try:
                handler(message)
            except Exception:
                # One broken handler must not stop cancellation for the others.
                logger.exception("cancel bus handler failed")

    async def pump(self, reconnect_delay: float) -> None:
        """Receive messages until cancelled, resubscribing after every failure."""
        retry = ExponentialBackoffRetryPolicy(
            (coredis.exceptions.ConnectionError,),
            retries=None,
            base_delay=0.05,
            max_delay=reconnect_delay,
            jitter=True,
        )
        while True:
            try:
                try:
                    async with self.client.pubsub(
                        channels=[self.channel], ignore_subscribe_messages=True, retry_policy=retry
                    ) as pubsub:
                        self.subscribed.set()
                        async for item in pubsub:
                            if item.get("type") == "message":
                                self._deliver(item.get("data"))
                except BaseExceptionGroup as group:
                    _drop_shutdown_noise(group)
                    raise _Resubscribe from None
            except (*_REDIS_ERRORS, _Resubscribe) as exc:
                self.health.failed("subscribe", exc)
            await trio.sleep(reconnect_delay)


async def _beat(backend: RedisBackend) -> None:
    key = backend.counters.alive_key
    ttl = max(1, int(backend.liveness * 1000))
    await backend.tasks.health.call(
        "heartbeat",
        lambda: backend.client.set(key, "1", px=ttl),
        BackendUnavailable,
        slow=True,
        probe=True,
    )


class _Resubscribe(Exception):
    """The subscription ended with errors only: subscribe again."""


#: URL schemes of a Redis Cluster (the rest of the URL is coredis's ``redis://`` one).
_CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
_SENTINEL_SCHEME: Final = "redis+sentinel"
SCHEMES: Final = ("redis", "rediss", "unix", _SENTINEL_SCHEME, *_CLUSTER_SCHEMES)
"""The URL schemes :class:`RedisBackend` accepts."""


def _client_from_url(
    url: str, options: dict[str, Any]
) -> tuple[RedisClient, list[contextlib.AbstractAsyncContextManager[Any]]]:
    """A coredis client for *url*, and what ``run`` must enter to connect it (in order)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"a Redis URL must start with one of {', '.join(SCHEMES)}: {url!r}")
    if scheme in _CLUSTER_SCHEMES:
        with warnings.catch_warnings():
            # coredis's own from_url passes its startup node the deprecated way.
            warnings.filterwarnings("ignore", "Use coredis.connection.TCPLocation")
            cluster: RedisClient = coredis.RedisCluster.from_url(
                f"{_CLUSTER_SCHEMES[scheme]}://{rest}", decode_responses=True, **options
            )
        return cluster, [cluster]
    if scheme == _SENTINEL_SCHEME:
        parts = urlsplit(url)
        service, _, db = parts.path.strip("/").partition("/")
        hosts = parts.netloc.rpartition("@")[2]
        if not service or not hosts:
            raise ValueError(
                "a Sentinel URL is redis+sentinel://[:password@]host:port[,host:port...]"
                f"/service[/db], not {url!r}"
            )
        sentinels = []
        for host in hosts.split(","):
            name, _, port = host.rpartition(":")
            if not name or not port.isdigit():
                raise ValueError(f"a Sentinel address is host:port, not {host!r} in {url!r}")
            sentinels.append(TCPLocation(name.strip("[]"), int(port)))
        extra: dict[str, Any] = {}
        if parts.password:
            extra["password"] = unquote(parts.password)
        if parts.username:
            extra["username"] = unquote(parts.username)
        if db:
            if not db.isdigit():
                raise ValueError(f"the Sentinel URL's database must be a number: {url!r}")
            extra["db"] = int(db)
        sentinel: coredis.Sentinel[str] = coredis.Sentinel(
            sentinels, decode_responses=True, **options, **extra
        )
        primary = sentinel.primary_for(service)
        return primary, [sentinel, primary]
    client: RedisClient = coredis.Redis.from_url(url, decode_responses=True, **options)
    return client, [client]


class RedisBackend:
    """Everything shared between server processes, in Redis; see the module docstring.

    Parameters:
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS,
            ``unix://`` for a socket), ``redis+sentinel://host:port[,...]/service[/db]``
            (the primary the Sentinels name), or ``redis+cluster://host:port``
            (``rediss+cluster://``: a Cluster, any node as the entry point).
            Or build the coredis client yourself: :meth:`from_client`.
        prefix: prefix of every key and channel, to share one Redis
            between deployments; it becomes the keys' hash tag (``{tmc}``).
        op_timeout: seconds one background Redis operation (the heartbeat,
            writing a task's final state, repairing quota counters) may take
            before it counts as failed.
        hot_timeout: the same for the operations a request waits for (quota
            checks, session look-ups, ``tasks/*``): short, so a hung Redis
            costs the one request that finds it hung this long, and nothing
            more while the circuit breaker is open (module docstring).
            Default :attr:`HOT_TIMEOUT` (``MCP_REDIS_HOT_TIMEOUT`` with
            ``app_from_env``).
        outbox_size: how many final task states that could not be written
            (Redis down) this process keeps to write once it is back.
        reconnect_delay: longest pause between reconnection attempts of the
            subscription.
        clock: wall-clock time for stored times (tests derive it from Trio's clock).
        events: where ``backend.unavailable``/``backend.recovered`` go first
            (default: a hub of its own, :attr:`events`); the HTTP app also
            forwards them to its registry's hub (:meth:`attach_events`).
        liveness: seconds after which the quota units of a process that
            stopped refreshing its liveness key (it died) no longer count.
    """

    #: The default *hot_timeout*.  A process whose event loop is starved
    #: (a CPU-bound neighbour, a test suite on a loaded machine) can miss it
    #: with Redis healthy and open the breaker; raise it there.
    HOT_TIMEOUT: ClassVar[float] = 0.1

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "tmc",
        op_timeout: float = 2.0,
        connect_timeout: float = 1.0,
        reconnect_delay: float = 1.0,
        clock: Clock = time.time,
        instance_id: str | None = None,
        events: EventHub | None = None,
        liveness: float = 15.0,
        hot_timeout: float | None = None,
        outbox_size: int = 1024,
    ) -> None:
        client, contexts = _client_from_url(
            url, {"connect_timeout": connect_timeout, "stream_timeout": op_timeout}
        )
        self._setup(
            client,
            contexts,
            url=url,
            prefix=prefix,
            op_timeout=op_timeout,
            reconnect_delay=reconnect_delay,
            clock=clock,
            instance_id=instance_id,
            events=events,
            liveness=liveness,
            hot_timeout=hot_timeout,
            outbox_size=outbox_size,
        )

    @classmethod
    def from_client(
        cls,
        client: RedisClient,
        *,
        connect: list[contextlib.AbstractAsyncContextManager[Any]] | None = None,
        prefix: str = "tmc",
        op_timeout: float = 2.0,
        reconnect_delay: float = 1.0,
        clock: Clock = time.time,
        instance_id: str | None = None,
        events: EventHub | None = None,
        liveness: float = 15.0,
        hot_timeout: float | None = None,
        outbox_size: int = 1024,
    ) -> RedisBackend:
        """A backend on a coredis client you configured (``decode_responses=True``).

        :meth:`run` enters *connect* (default: ``[client]``), in order, to
        connect; for a Sentinel primary pass ``[sentinel, client]``.  The
        client must not be used by anything else after :meth:`run` ends,
        which closes it.
        """
        self = cls.__new__(cls)
        self._setup(
            client,
            [client] if connect is None else list(connect),
            url=None,
            prefix=prefix,
            op_timeout=op_timeout,
            reconnect_delay=reconnect_delay,
            clock=clock,
            instance_id=instance_id,
            events=events,
            liveness=liveness,
            hot_timeout=hot_timeout,
            outbox_size=outbox_size,
        )
        return self

    def _setup(
        self,
        client: RedisClient,
        contexts: list[contextlib.AbstractAsyncContextManager[Any]],
        *,
        url: str | None,
        prefix: str,
        op_timeout: float,
        reconnect_delay: float,
        clock: Clock,
        instance_id: str | None,
        events: EventHub | None,
        liveness: float,
        hot_timeout: float | None,
        outbox_size: int,
    ) -> None:
        if not prefix:
            raise ValueError("the key prefix must not be empty")
        self.url = url
        self.client: RedisClient = client
        self._contexts = contexts
        self.instance_id = instance_id or secrets.token_hex(8)
        self.events = EventHub() if events is None else events
        self.reconnect_delay = reconnect_delay
        self.keys = _Keys(prefix)
        self._state_epoch = f"{self.keys.base}:state-epoch"
        self._claim_state: Any = None  # its script, registered at the first claim
        if hot_timeout is None:
            hot_timeout = type(self).HOT_TIMEOUT
        health = _Health(self.events, op_timeout, hot_timeout)
        self.tasks = RedisTaskStore(client, health, self.keys, clock, liveness, Outbox(outbox_size))
        self.bus = RedisBus(client, health, self.keys.channel, self.instance_id)
        self.sessions = RedisSessionRecords(client, health, self.keys, clock)
        self.counters = RedisCounters(
            client, health, self.keys, self.instance_id, clock=clock, liveness=liveness
        )
        self.liveness = liveness
        self._running = False

    def attach_events(self, hub: EventHub) -> Callable[[], None]:
        """Emit ``backend.*`` events to *hub* (a registry's) too; returns the detach function.

        While attached, *hub* logs them (the backend's own hub stops logging
        them, so an outage is logged once); subscribers of :attr:`events`
        still get every event.
        """
        return attach_events(self.events, hub)

    async def _heartbeat(self) -> None:
        """Keep this instance's liveness key (see :class:`RedisCounters`) alive.

        The beat is also the circuit breaker's probe: while Redis is away it
        comes as soon as a probe is due, and the beat that finds Redis back
        repairs the quota counters and writes the task states kept meanwhile.
        """
        health = self.tasks.health
        health.prober = True
        scripts_loaded = False
        try:
            while True:
                try:
                    await _beat(self)
                    await self.counters.resync()
                    await self.tasks.flush()
                    # After the flush, so what an outage left behind is written first.
                    if not scripts_loaded and not health.down:
                        await self._load_scripts()
                        scripts_loaded = True
                except (BackendUnavailable, TaskStoreUnavailable):
                    # Reported by the health check; retried at the next probe.  A
                    # Redis that went away may come back without its scripts.
                    scripts_loaded = False
                await health.until_probe(self.liveness / 3)
        finally:
            health.prober = False

    async def _load_scripts(self) -> None:
        """``SCRIPT LOAD`` every script, in the background, before a request needs one.

        A script Redis does not hold yet costs its first caller three round
        trips (``NOSCRIPT``, the load, the retry): against a Redis a third
        of the hot timeout away, that call timed out and opened the breaker.
        """
        tasks, sessions, counters = self.tasks, self.sessions, self.counters
        scripts = [
            tasks._create, tasks._settle, tasks._request_cancel, tasks._set_message,
            sessions._put, sessions._evict, counters._acquire, counters._release, counters._resync,
        ]  # fmt: skip
        for script in scripts:
            await self.tasks.health.call(
                "scripts.load",
                lambda script=script: self.client.script_load(script.script),  # type: ignore[misc]
                BackendUnavailable,
                slow=True,
            )

    @property
    def health_down(self) -> bool:
        """Whether the circuit breaker is open: Redis failed, and no probe found it back yet."""
        return self.tasks.health.down

    async def check_ready(self) -> str | None:
        """Why this process should not take new traffic because of Redis, or ``None``.

        The readiness probe's question (:class:`~.base.ReadinessCheck`; the
        HTTP app asks at most once a second): not running or not connected
        yet, the circuit breaker open (answered without a round trip: the
        heartbeat is probing already), or one ``PING`` within the hot
        timeout.  A ``PING`` that fails opens the breaker, as any request's
        call would: the outage is the same one.
        """
        health = self.tasks.health
        if not self._running or health.stopped:
            reason: str | None = "Redis (the shared backend) is not running"
        elif not self.bus.subscribed.is_set():
            reason = "Redis (the shared backend) is not connected yet"
        elif health.down:
            reason = "Redis (the shared backend) is unreachable: its circuit breaker is open"
        else:
            try:
                await health.call("ready", self.client.ping, BackendUnavailable)
            except BackendUnavailable:
                return "Redis (the shared backend) is unreachable"
            return None
        await trio.lowlevel.checkpoint()
        return reason

    async def claim_once(self, key: str, ttl: float, issued_at: float | None = None) -> bool | None:
        """``True`` the first time *key* is claimed within *ttl* seconds, on any worker.

        The used-``requestState`` set every worker shares (``SET NX PX``; see
        :mod:`trio_mcp_cancel._protocol.replay`); :class:`BackendUnavailable`
        when Redis cannot tell, and the caller falls back to its own set.

        With *issued_at* (when the state was sealed, wall clock): ``None`` when
        the set is younger than the state, so a use of it may have been lost
        with Redis's data (``P:state-epoch``, see :meth:`mark_state_epoch`).
        """
        name, ms = f"{self.keys.base}:state:{key}", max(1, math.ceil(ttl * 1000))
        if issued_at is None:
            claimed = await self.tasks.health.call(
                "state.claim",
                lambda: self.client.set(name, "1", condition=PureToken.NX, px=ms),
                BackendUnavailable,
            )
            return bool(claimed)
        script = self._claim_state = self._claim_state or self.client.register_script(_CLAIM_STATE)
        keys, args = [name, self._state_epoch], [ms, math.floor(issued_at)]
        answer = await self.tasks.health.call(
            "state.claim", lambda: script(keys=keys, args=args), BackendUnavailable
        )
        return None if answer == -1 else bool(answer)

    async def mark_state_epoch(self) -> None:
        """Note when the used-``requestState`` set began, unless it is noted already.

        Called when a worker starts, before it seals any state: a set found
        without its mark later lost its data (``FLUSHALL``, a restart without
        persistence, a failover to a replica that missed the writes), and
        :meth:`claim_once` then refuses the states sealed before the loss.
        """
        epoch = self._state_epoch
        await self.tasks.health.call(
            "state.epoch",
            lambda: self.client.eval(_MARK_STATE_EPOCH, keys=[epoch]),
            BackendUnavailable,
        )

    async def run(
        self, *, task_status: trio.TaskStatus[RedisBackend] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect and pump the bus until cancelled; close the connections on the way out.

        Reports started once subscribed, or after ``op_timeout`` when Redis
        is not reachable yet: the server starts anyway, and everything that
        needs Redis works as soon as it is there.
        """
        if self._running:
            raise RuntimeError("this backend is already running")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._serve)
                with trio.move_on_after(self.tasks.health.op_timeout):
                    await self.bus.subscribed.wait()
                task_status.started(self)
                await trio.sleep_forever()
        except BaseExceptionGroup as group:
            _drop_shutdown_noise(group)
        finally:
            self._running = False

    async def _serve(self) -> None:
        """Connect the client (until it works), then pump the bus and beat the heart."""
        health = self.tasks.health
        health.stopped = False
        async with contextlib.AsyncExitStack() as stack:
            try:
                for context in self._contexts:  # the client (a Sentinel before its primary)
                    await self._enter(stack, context)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self.bus.pump, self.reconnect_delay)
                    nursery.start_soon(self._heartbeat)
            finally:
                # Before the stack closes the client: from here on every call is
                # "unavailable" (debug-logged by its caller, repaired on restart).
                health.stopped = True

    async def _enter(
        self, stack: contextlib.AsyncExitStack, context: contextlib.AbstractAsyncContextManager[Any]
    ) -> None:
        """Enter *context*, retrying while Redis is unreachable.

        A Cluster client fetches the slot map when entered, so a Cluster
        that is down at startup must not stop the server: its operations
        fail as "unavailable" meanwhile, as on any outage.
        """
        health = self.tasks.health
        while True:
            try:
                try:
                    await stack.enter_async_context(context)
                    return
                except BaseExceptionGroup as group:
                    _drop_shutdown_noise(group)
                    raise _Resubscribe from None
            except (*_REDIS_ERRORS, _Resubscribe) as exc:
                health.failed("connect", exc)
            await trio.sleep(self.reconnect_delay)
