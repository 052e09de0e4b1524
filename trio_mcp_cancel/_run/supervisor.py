"""``--workers N``: keep N HTTP worker processes serving one socket, whatever happens to them.

Why a supervisor of our own: hypercorn's ``--workers N`` master (0.18)
answers the death of one worker by SIGTERM-ing every other one (a Trio
worker has no SIGTERM handler, so they die without a graceful shutdown)
and exiting, usually with status 0, nothing logged: one crashed worker
stops the whole deployment and ``Restart=on-failure`` does not restart it.

Here the supervisor binds the listening socket itself and passes it to each
worker (hypercorn's ``fd://`` bind, :mod:`.worker`), so the survivors keep
accepting while a replacement starts.  A dead worker is logged (which,
pid, exit status or signal) and replaced after a backoff that doubles while
its slot's workers die young; with a shared backend, the tasks it was
running are settled ``failed`` at once (each worker has its own
``MCP_INSTANCE_ID``, chosen here, see
:meth:`~trio_mcp_cancel.backends.redis.RedisTaskStore.fail_tasks_of`).

A worker that stops answering without exiting (its event loop blocked,
the process stopped) is noticed too: each serving worker beats a pipe
every second, and one silent for ``MCP_WORKER_HEARTBEAT_TIMEOUT`` seconds
(10 by default) is killed (logged) and replaced, see :mod:`.heartbeat`.

It gives up (every worker stopped gracefully, exit status 1) only on a
crash loop while starting: ``max_start_failures`` (3) workers of one slot
in a row *failed* before serving, that is exited on their own (any exit
status: the module cannot be imported, the configuration is wrong) or
crashed (killed by SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS or
SIGTRAP, which a process raises itself on a fault); restarting cannot
help there.  A starting worker killed by any other signal (SIGKILL from
the OOM killer or an operator, a stray SIGTERM) did not fail: it is
logged and replaced with the same back-off, and neither counts nor resets
the failures in a row, so the healthy workers keep serving.  A worker
that served and then died is always replaced, however often: if one
request could crash workers, giving up would hand it the whole
deployment.

SIGINT or SIGTERM to the supervisor forwards SIGTERM to every worker,
which shuts down within ``server_config()``'s ``graceful_timeout`` (calls
in flight answered ``-32800``, see :func:`~..transports.http.serving.serve`),
kills whatever still runs ``stop_timeout`` seconds after the signal,
gives the tasks of a killed worker ``settle_timeout`` more seconds to be
settled, and exits 0: the bound it logs.  A second signal is forwarded
again (the workers then stop at once).  Workers run in their own
process group, so a terminal's Ctrl-C reaches them only through the
supervisor; they shut down by themselves if the supervisor disappears.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping

import attrs
import trio

from ..backends.base import Backend, TaskStoreUnavailable
from . import heartbeat

__all__ = ["Supervisor", "describe_exit", "failed_by_itself"]

logger = logging.getLogger("trio_mcp_cancel.run")


#: Signals a process raises itself on a fault: a worker killed by one before
#: serving crashed (it counts towards giving up); any other signal came from
#: outside and does not.
_CRASH_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS", "SIGTRAP")
    if hasattr(signal, name)
)


def failed_by_itself(returncode: int) -> bool:
    """Whether a worker's exit was its own doing (an exit status, a crash), not a kill."""
    return returncode >= 0 or -returncode in _CRASH_SIGNALS


def describe_exit(returncode: int) -> str:
    """``"exited with status 3"`` or ``"killed by SIGKILL"``."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


async def _ready_line(ready: trio.lowlevel.FdStream) -> str | None:
    """A worker's ready line (``serving PATH``), or ``None`` if it closed the pipe first."""
    data = b""
    while b"\n" not in data and len(data) < 4096:  # a path, not a stream: bounded
        chunk = await ready.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data.partition(b"\n")[0].decode(errors="replace") if data else None


@attrs.define(eq=False)
class _Worker:
    slot: int
    instance: str
    process: trio.Process
    ready: trio.lowlevel.FdStream
    """The read end of the pipe the worker writes a line to once it serves."""
    beats: trio.lowlevel.FdStream | None = None
    """The read end of its heartbeat pipe (:mod:`.heartbeat`; ``None``: not watched)."""
    serving: bool = False
    terminated: bool = False
    """Whether it was sent SIGTERM (a second one would stop it at once)."""


@attrs.define(eq=False)
class Supervisor:
    """Run *workers* copies of :mod:`.worker` for *target* on *listener*; see the module doc.

    *environ* is every worker's environment (the supervisor adds
    ``MCP_INSTANCE_ID``); *backend*, when shared, is where a dead worker's
    tasks are settled.  The timing parameters are attributes so tests can
    shrink them.
    """

    target: str
    workers: int
    listener: socket.socket
    environ: Mapping[str, str]
    backend: Backend | None = None
    log_level: str = "info"
    http: str = "h11"
    """The workers' HTTP/1.1 protocol (``serve(http=...)``)."""
    backoff: float = 0.1
    """Delay before the first replacement in a slot; doubles while its workers die young."""
    max_backoff: float = 10.0
    stable_after: float = 10.0
    """A worker that lived this long resets its slot's backoff."""
    max_start_failures: int = 3
    """Workers of one slot that fail before serving, in a row, before giving up
    (a worker killed from outside does not count: :func:`failed_by_itself`)."""
    stop_timeout: float = 6.0
    """Seconds the workers get to stop after SIGTERM (their graceful timeout + a margin)."""
    settle_timeout: float = 1.0
    """Seconds after ``stop_timeout`` that settling a killed worker's tasks may take at a stop."""

    heartbeat_timeout: float | None = attrs.field(
        default=attrs.Factory(lambda self: heartbeat.timeout_from(self.environ), takes_self=True)
    )
    """Seconds a serving worker may send no heartbeat before it is killed and replaced
    (``MCP_WORKER_HEARTBEAT_TIMEOUT``, default 10; ``None``: never), see :mod:`.heartbeat`."""
    url: str = ""
    """Where the listener is (``http://host:port``); logged with the MCP path the first
    worker serving reports (the supervisor does not import the target)."""
    run_id: str = attrs.field(factory=lambda: secrets.token_hex(4))
    gave_up: bool = False
    _live: dict[int, _Worker] = attrs.field(factory=dict)
    _stopping: trio.Event = attrs.field(factory=trio.Event)
    _settling: trio.CancelScope | None = None
    _announced: bool = False

    async def run(self) -> int:
        """Supervise until a signal (then 0) or giving up (then 1)."""
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            # Every worker holds the read end; at end of file (the supervisor
            # is gone, however) it shuts down by itself.
            lifeline_read, lifeline_write = os.pipe()
            try:
                async with trio.open_nursery() as nursery:
                    if self.backend is not None:
                        await nursery.start(self.backend.run)
                    nursery.start_soon(self._watch_signals, signals)
                    # Settling a dead worker's tasks may outlive its slot (a stop
                    # right after a death): done before the backend goes.
                    async with trio.open_nursery() as settling:
                        self._settling = settling.cancel_scope
                        async with trio.open_nursery() as slots:
                            for slot in range(self.workers):
                                slots.start_soon(self._keep_slot, slot, lifeline_read, settling)
                    nursery.cancel_scope.cancel()
            finally:
                os.close(lifeline_read)
                os.close(lifeline_write)
        return 1 if self.gave_up else 0

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            name = signal.Signals(signum).name
            if self._stopping.is_set():
                logger.info("%s received again: stopping the workers now", name)
                self._signal_all(again=True)
                continue
            logger.info(
                "%s received: stopping every worker gracefully (up to %.1fs)",
                name, self.stop_timeout + self.settle_timeout,
            )  # fmt: skip
            self._stop()

    def _stop(self) -> None:
        if not self._stopping.is_set():
            self._stopping.set()
            if self._settling is not None:
                deadline = trio.current_time() + self.stop_timeout + self.settle_timeout
                self._settling.deadline = min(self._settling.deadline, deadline)
            self._signal_all()

    def _signal_all(self, *, again: bool = False) -> None:
        for worker in list(self._live.values()):
            self._terminate(worker, again=again)

    @staticmethod
    def _terminate(worker: _Worker, *, again: bool = False) -> None:
        if worker.process.returncode is None and (again or not worker.terminated):
            worker.terminated = True
            worker.process.send_signal(signal.SIGTERM)

    async def _keep_slot(self, slot: int, lifeline_read: int, settling: trio.Nursery) -> None:
        """Keep one worker running in *slot* until stopping."""
        failures = start_failures = generation = 0
        while not self._stopping.is_set():
            generation += 1
            worker = await self._spawn(slot, f"{self.run_id}-{slot}-{generation}", lifeline_read)
            started = trio.current_time()
            returncode = await self._wait(worker)
            if self._stopping.is_set():
                logger.info("worker %d (pid %d) %s", slot, worker.process.pid,
                            describe_exit(returncode))  # fmt: skip
                if returncode < 0:  # killed: it did not settle its own tasks
                    settling.start_soon(self._settle, worker)
                return
            settling.start_soon(self._settle, worker)
            if worker.serving:
                start_failures = 0
            elif failed_by_itself(returncode):
                start_failures += 1
                if start_failures >= self.max_start_failures:
                    logger.error(
                        "worker %d (pid %d) %s before serving, %d times in a row: giving up,"
                        " stopping every worker", slot, worker.process.pid,
                        describe_exit(returncode), start_failures,
                    )  # fmt: skip
                    self.gave_up = True
                    self._stop()
                    return
            if trio.current_time() - started >= self.stable_after:
                failures = 0
            delay = min(self.max_backoff, self.backoff * 2**failures)
            failures += 1
            logger.error(
                "worker %d (pid %d, instance %s) %s%s; replacing it in %.1f s",
                slot, worker.process.pid, worker.instance, describe_exit(returncode),
                "" if worker.serving
                else " before serving" if failed_by_itself(returncode)
                else " before serving (killed from outside: not a failure to start)",
                delay,
            )  # fmt: skip
            with trio.move_on_after(delay):
                await self._stopping.wait()

    async def _spawn(self, slot: int, instance: str, lifeline_read: int) -> _Worker:
        ready_read, ready_write = os.pipe()
        fd = self.listener.fileno()
        command = [
            sys.executable, "-m", "trio_mcp_cancel._run.worker",
            "--fd", str(fd), "--ready-fd", str(ready_write),
            "--lifeline-fd", str(lifeline_read), "--log-level", self.log_level,
            "--http", self.http, self.target,
        ]  # fmt: skip
        passed = [fd, ready_write, lifeline_read]
        beats_read = beats_write = None
        if self.heartbeat_timeout is not None:
            beats_read, beats_write = os.pipe()
            passed.append(beats_write)
            interval = heartbeat.interval_for(self.heartbeat_timeout)
            command[-1:-1] = ["--heartbeat-fd", str(beats_write),
                              "--heartbeat-interval", repr(interval)]  # fmt: skip
        try:
            process = await trio.lowlevel.open_process(
                command,
                env={**self.environ, "MCP_INSTANCE_ID": instance},
                stdin=subprocess.DEVNULL,
                pass_fds=tuple(passed),
                process_group=0,
            )
        except BaseException:
            os.close(ready_read)
            if beats_read is not None:
                os.close(beats_read)
            raise
        finally:
            os.close(ready_write)
            if beats_write is not None:
                os.close(beats_write)
        worker = _Worker(slot, instance, process, trio.lowlevel.FdStream(ready_read))
        if beats_read is not None:
            worker.beats = trio.lowlevel.FdStream(beats_read)
        self._live[slot] = worker
        logger.info("worker %d started (pid %d, instance %s)", slot, process.pid, instance)
        return worker

    async def _wait(self, worker: _Worker) -> int:
        """Until *worker* exits (killed if it outlives a stop by ``stop_timeout``); its status."""
        ready = worker.ready
        process = worker.process
        try:
            async with trio.open_nursery() as nursery:

                async def watch_ready() -> None:
                    line = await _ready_line(ready)
                    if line is not None:
                        worker.serving = True
                        logger.info("worker %d (pid %d) serving", worker.slot, process.pid)
                        if not self._announced and self.url:
                            self._announced = True
                            path = line.removeprefix("serving").strip()
                            logger.info(
                                "serving MCP on %s%s (%d workers)", self.url, path, self.workers
                            )
                        await self._watch_heartbeat(worker)

                async def bound_stop() -> None:
                    await self._stopping.wait()
                    self._terminate(worker)  # started after the others were signalled
                    await trio.sleep(self.stop_timeout)
                    logger.warning(
                        "worker %d (pid %d) still running %.0f s after SIGTERM: killing it",
                        worker.slot, process.pid, self.stop_timeout,
                    )  # fmt: skip
                    process.kill()

                nursery.start_soon(watch_ready)
                nursery.start_soon(bound_stop)
                await process.wait()
                nursery.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()  # the supervisor itself is being cancelled
            del self._live[worker.slot]
            await ready.aclose()
            if worker.beats is not None:
                await worker.beats.aclose()
        assert process.returncode is not None
        return process.returncode

    async def _watch_heartbeat(self, worker: _Worker) -> None:
        """Kill *worker* once it has sent no heartbeat for ``heartbeat_timeout`` seconds.

        Its event loop is stuck (or the process stopped): it answers nobody,
        and must not finish tasks that are about to be settled ``failed``.
        Killed, it is replaced (and its tasks settled) like any dead worker.
        """
        timeout = self.heartbeat_timeout
        if worker.beats is None or timeout is None:
            return
        await heartbeat.silent(worker.beats, timeout)
        logger.error(
            "worker %d (pid %d, instance %s) sent no heartbeat for %.1f s (its event loop"
            " is blocked or the process is stopped): killing it",
            worker.slot, worker.process.pid, worker.instance, timeout,
        )  # fmt: skip
        worker.process.kill()

    async def _settle(self, worker: _Worker) -> None:
        """Settle *worker*'s tasks ``failed`` (a shared Redis backend only)."""
        fail = getattr(getattr(self.backend, "tasks", None), "fail_tasks_of", None)
        if fail is None:
            return
        try:
            failed = await fail(worker.instance, "the server process running the task stopped")
        except TaskStoreUnavailable as exc:
            logger.warning(
                "worker %d (pid %d): its tasks could not be settled now (%s); they will be"
                " once its liveness key expires", worker.slot, worker.process.pid, exc,
            )  # fmt: skip
            return
        if failed:
            logger.warning(
                "worker %d (pid %d): %d running task(s) settled failed",
                worker.slot, worker.process.pid, failed,
            )  # fmt: skip
