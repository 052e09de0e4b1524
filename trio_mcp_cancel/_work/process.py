"""Child processes that stop when their request is cancelled, in two phases.

A tool that runs ``make``, ``pytest``, ``git`` or ``ffmpeg`` does its work in
another process, where neither the polled flag nor a Trio cancel scope can
reach.  :func:`run_process` carries both phases there:

* when the request's polled flag is set, the child gets a *polite* stop: a
  signal (``SIGTERM`` by default) or its stdin closed, so it can flush, save
  and exit by itself within the grace period;
* when the hard cancel comes (the grace period ran out, or any enclosing
  cancel scope was cancelled), its whole process group gets ``SIGKILL``.

The child runs in a session (and so a process group) of its own, which is
what makes "the whole group" mean the child and everything it forked, and
nothing else.  When the child exits, whatever it left behind in its group is
killed too: a tool's grandchildren must not outlive the tool.  The child is
always reaped (``trio.run_process`` underneath waits for it, even when
cancelled), so no zombie stays behind either.

The flag reaches the child through :meth:`TrackedRequest.on_cancelled`: the
signal is sent synchronously by whoever sets the flag, with no watcher task
and no polling.  POSIX only.  Children run in real time: under an autojump
``MockClock`` the grace period passes as soon as every task waits on the child.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, Protocol

import attrs
import trio

from .._core.context import current_request
from .._core.errors import RequestCancelled
from .._core.request import TrackedRequest
from .._telemetry.work import process_note

__all__ = ["CLOSE_STDIN", "ProcessResult", "ProgressReporter", "run_process"]

#: ``stop=CLOSE_STDIN``: the polite stop closes the child's stdin instead of signalling.
CLOSE_STDIN: Final = "close-stdin"

Stop = int | signal.Signals | Literal["close-stdin"] | None
LineCallback = Callable[[Literal["stdout", "stderr"], str], Awaitable[object]]

#: Options that would undo what run_process guarantees.
_RESERVED: Final = frozenset(
    {"start_new_session", "process_group", "preexec_fn", "stdin", "stdout", "stderr"}
)


class ProgressReporter(Protocol):
    """What ``progress=`` needs: a :class:`~trio_mcp_cancel.server.Context` fits.

    A reporter that also has a ``last_progress`` number (``Context``
    does) has its line count continue from it, since MCP progress must
    increase.
    """

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...


@attrs.frozen
class ProcessResult:
    """How a child process ended, and what it wrote."""

    args: str | Sequence[str]
    returncode: int
    """The exit status; negative: killed by that signal (``-9`` is ``SIGKILL``)."""
    stdout: bytes | None
    """Captured standard output (``None`` when not captured)."""
    stderr: bytes | None
    truncated: bool = False
    """Output beyond ``max_output`` bytes was dropped (the beginning is kept)."""

    def check_returncode(self) -> None:
        """Raise :class:`subprocess.CalledProcessError` unless the child exited with 0."""
        if self.returncode:
            raise subprocess.CalledProcessError(
                self.returncode, self.args, self.stdout, self.stderr
            )


@attrs.define(eq=False)
class _Output:
    """One of the child's output pipes: captured up to a cap, and/or split into lines."""

    name: Literal["stdout", "stderr"]
    capture: bool
    max_output: int
    max_line: int
    on_line: LineCallback | None
    data: bytearray = attrs.field(factory=bytearray)
    truncated: bool = False
    _partial: bytearray = attrs.field(factory=bytearray)

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        async with stream:
            while chunk := await stream.receive_some(65536):
                if self.capture:
                    room = self.max_output - len(self.data)
                    if len(chunk) > room:
                        self.truncated = True
                    self.data += chunk[: max(room, 0)]
                if self.on_line is not None:
                    await self._lines(chunk)
        if self.on_line is not None and self._partial:
            await self._emit(bytes(self._partial))

    async def _lines(self, chunk: bytes | bytearray) -> None:
        self._partial += chunk
        while True:
            end = self._partial.find(b"\n")
            if end < 0:
                if len(self._partial) > self.max_line:  # one endless line: cut it
                    line = bytes(self._partial[: self.max_line])
                    del self._partial[: self.max_line]
                    await self._emit(line)
                    continue
                return
            line = bytes(self._partial[:end])
            del self._partial[: end + 1]
            await self._emit(line[: self.max_line])

    async def _emit(self, line: bytes) -> None:
        assert self.on_line is not None
        await self.on_line(self.name, line.decode("utf-8", "replace").rstrip("\r"))


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by *pid*; nothing if it is already empty.

    Safe after the leader was reaped: Linux does not reuse a pid while a
    process group of that id still has members.
    """
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def run_process(
    command: str | Sequence[str],
    *,
    input: bytes | None = None,
    capture_stdout: bool = True,
    capture_stderr: bool = True,
    on_line: LineCallback | None = None,
    progress: ProgressReporter | None = None,
    stop: Stop = signal.SIGTERM,
    stop_group: bool = False,
    check: bool = False,
    max_output: int = 16 * 1024 * 1024,
    max_line: int = 16 * 1024,
    drain_timeout: float = 2.0,
    request: TrackedRequest | None = None,
    **options: Any,
) -> ProcessResult:
    """Run *command* as a child process bound to the current request's cancellation.

    Usable inside any tracked request (a tool body); outside one it still
    kills the child's group when the calling scope is cancelled.

    * *stop*: the polite stop sent when the polled flag is set: a signal
      number (default ``SIGTERM``), :data:`CLOSE_STDIN` (the child's stdin
      is closed: for children that read commands until end of input), or
      ``None`` (nothing: the child runs until the hard cancel).  The signal
      goes to the child only, which may pass it on; *stop_group* sends it
      to the whole group instead, as a terminal's Ctrl-C does (use it with
      ``shell=True``: a shell that dies of it would leave its command to the
      group ``SIGKILL`` that follows the child's exit).  The hard cancel
      always sends ``SIGKILL`` to the whole process group.
    * *input*: bytes written to the child's stdin (else stdin is
      ``/dev/null``, or, with ``CLOSE_STDIN``, a pipe held open until the stop).
    * Output is captured (``capture_stdout``, ``capture_stderr``; at most
      *max_output* bytes each, the rest is dropped and ``truncated`` set)
      and/or streamed: *on_line* gets ``("stdout" | "stderr", line)`` for
      every line, and *progress* (a tool's ``ctx``) gets one
      ``report_progress(n, message=line)`` per line.  Output that is neither
      captured nor streamed goes to ``/dev/null``, never to the server's own
      stdout (which may be the stdio transport).
    * Returns a :class:`ProcessResult` with the exit status; ``check=True``
      raises :class:`subprocess.CalledProcessError` for a non-zero one.
      When the polite stop was sent, the child's exit raises
      :class:`RequestCancelled` instead: the request was cancelled, and
      whatever the child managed to do is not a result.  A request that is
      already cancelled raises it before starting anything.
    * *options* go to :func:`trio.run_process` (``cwd``, ``env``, ``shell``,
      ...); the ones that decide the process group and the pipes are
      reserved.  *request* defaults to the current request.

    After the child exits its leftover group members are killed and the
    pipes are read for at most *drain_timeout* more seconds (a descendant
    that left the group may still hold them open).
    """
    reserved = sorted(_RESERVED & options.keys())
    if reserved:
        raise TypeError(f"run_process() manages {reserved[0]!r} itself")
    if max_output < 0 or max_line < 1:
        raise ValueError("max_output must be >= 0 and max_line >= 1")
    if stop is not None and stop != CLOSE_STDIN:
        stop = signal.Signals(stop)  # a clear ValueError for a bad signal number
    if request is None:
        request = current_request(None)
    if request is not None and request.cancellation is not None:
        raise RequestCancelled(request.cancellation.reason, request.cancellation.kind)

    if progress is not None:
        on_line = _with_progress(progress, on_line)
    outputs = {
        "stdout": _Output("stdout", capture_stdout, max_output, max_line, on_line),
        "stderr": _Output("stderr", capture_stderr, max_output, max_line, on_line),
    }
    piped = {name: out.capture or on_line is not None for name, out in outputs.items()}
    stdin_piped = input is not None or stop == CLOSE_STDIN

    stopped = False
    process: trio.Process | None = None
    stdin_scope = trio.CancelScope()
    note = process_note()  # the request's span (telemetry), captured in its own task

    def polite_stop() -> None:
        nonlocal stopped
        stopped = True
        if stop == CLOSE_STDIN:
            stdin_scope.cancel()
        elif stop is not None and process is not None and process.returncode is None:
            if note is not None:
                note(False, stop)
            if stop_group:
                _kill_group(process.pid, stop)
                return
            try:
                process.send_signal(stop)
            except OSError:  # already gone
                pass

    async def deliver_cancel(proc: trio.Process) -> None:
        if note is not None:
            note(True, signal.SIGKILL)
        _kill_group(proc.pid)

    async def feed(stream: trio.abc.SendStream) -> None:
        async with stream:
            with stdin_scope:
                try:
                    if input:
                        await stream.send_all(input)
                    if stop == CLOSE_STDIN:
                        await trio.sleep_forever()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass  # the child closed its stdin or exited: fine

    remove_watch: Callable[[], None] = _no_watch
    drain_scopes: list[trio.CancelScope] = []
    try:
        async with trio.open_nursery() as nursery:
            process = await nursery.start(
                functools.partial(
                    trio.run_process,
                    command,
                    stdin=subprocess.PIPE if stdin_piped else subprocess.DEVNULL,
                    stdout=subprocess.PIPE if piped["stdout"] else subprocess.DEVNULL,
                    stderr=subprocess.PIPE if piped["stderr"] else subprocess.DEVNULL,
                    check=False,
                    deliver_cancel=deliver_cancel,
                    start_new_session=True,
                    **options,
                )
            )
            assert process is not None
            if request is not None and stop is not None:
                remove_watch = request.on_cancelled(polite_stop)
            if process.stdin is not None:
                nursery.start_soon(feed, process.stdin)
            for name, stream in (("stdout", process.stdout), ("stderr", process.stderr)):
                if stream is not None:
                    drain_scopes.append(trio.CancelScope())
                    nursery.start_soon(_drain, drain_scopes[-1], outputs[name].pump, stream)
            await process.wait()
            remove_watch()
            stdin_scope.cancel()
            _kill_group(process.pid)
            for scope in drain_scopes:
                scope.deadline = trio.current_time() + drain_timeout
    except BaseExceptionGroup as group:
        # Our nursery is an implementation detail: the caller sees the
        # Cancelled (or the one failure, an on_line callback's, say) as itself.
        raise _one_exception(group) from None
    finally:
        remove_watch()
        if process is not None:
            _kill_group(process.pid)

    assert process is not None and process.returncode is not None
    if stopped and request is not None and request.cancellation is not None:
        raise RequestCancelled(request.cancellation.reason, request.cancellation.kind)
    out, err = outputs["stdout"], outputs["stderr"]
    result = ProcessResult(
        command,
        process.returncode,
        bytes(out.data) if capture_stdout else None,
        bytes(err.data) if capture_stderr else None,
        out.truncated or err.truncated,
    )
    if check:
        result.check_returncode()
    return result


def _one_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The group's one real failure, or its first ``Cancelled`` if that is all it holds."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    failures = [exc for exc in leaves if not isinstance(exc, trio.Cancelled)]
    if not failures:
        return leaves[0]
    if len(failures) == 1:
        return failures[0]
    return group


def _no_watch() -> None:
    pass


async def _drain(
    scope: trio.CancelScope,
    pump: Callable[[trio.abc.ReceiveStream], Awaitable[None]],
    stream: trio.abc.ReceiveStream,
) -> None:
    with scope:
        await pump(stream)


def _with_progress(progress: ProgressReporter, on_line: LineCallback | None) -> LineCallback:
    # MCP progress must increase: continue from what the tool already reported
    # (Context.last_progress), so a tool may report before and after.
    count = 0

    async def report(name: Literal["stdout", "stderr"], line: str) -> None:
        nonlocal count
        last = getattr(progress, "last_progress", None)
        if isinstance(last, (int, float)) and math.isfinite(last):
            count = max(count, math.floor(last))
        count += 1
        await progress.report_progress(count, None, line)
        if on_line is not None:
            await on_line(name, line)

    return report
