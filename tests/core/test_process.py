"""run_process(): the two phases of a cancellation carried to real child processes.

Real, short-lived children (Python one-liners) on the real clock: the
behaviour lives in signals, process groups and pipes.  Every test is bounded
by ``trio.fail_after`` and asserts outcomes, never durations.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable

import pytest
import trio

from trio_mcp_cancel import Registry, RequestCancelled, tracked
from trio_mcp_cancel.process import CLOSE_STDIN, run_process
from trio_mcp_cancel.testing import EventRecorder, assert_no_leaks

# Every test starts child processes; ``registry(...)`` configures ``mcp_registry``.
pytestmark = [pytest.mark.subprocess, pytest.mark.mcp_registry(grace_period=10)]

PY = sys.executable
BOUND = 30  # seconds: a hang fails the test instead of the suite

# Prints "ready" once its SIGTERM disposition is in place, then sleeps.
EXITS_ON_TERM = "import time; print('ready', flush=True); time.sleep(60)"
IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)"
)
# Forks a grandchild that ignores SIGTERM too and reports its pid.
FORKS = (
    "import os, signal, subprocess, sys, time;"
    " signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " g = subprocess.Popen([sys.executable, '-c', 'import signal, time;"
    " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)']);"
    " print(g.pid, flush=True); print('ready', flush=True); time.sleep(60)"
)


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def wait_gone(pid: int) -> None:
    with trio.fail_after(10):
        while not gone(pid):
            await trio.sleep(0.02)


@pytest.fixture
async def registry(mcp_registry: Registry) -> AsyncIterator[Registry]:
    """``mcp_registry``, which every test here must leave empty."""
    yield mcp_registry
    assert_no_leaks(mcp_registry)


class Lines:
    """An on_line callback that records lines and signals when one arrives."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.ready = trio.Event()

    async def __call__(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))
        if line == "ready":
            self.ready.set()


async def run_and_cancel(
    registry: Registry, code: str, *, grace: float, **kwargs: object
) -> tuple[BaseException | None, Lines, list[int]]:
    """Run *code* in a tracked request, cancel it once the child is ready."""
    lines = Lines()
    pids: list[int] = []
    outcome: BaseException | None = None

    async def tool(task_status: trio.TaskStatus[None]) -> None:
        nonlocal outcome
        async with tracked(1, "ns"):
            task_status.started()
            try:
                await run_process([PY, "-c", code], on_line=lines, **kwargs)  # type: ignore[arg-type]
            except BaseException as exc:
                outcome = exc
                raise

    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            with pytest.raises(RequestCancelled):  # tracked() turns a hard cancel into this
                await _run_catching(nursery, tool, lines, registry, grace)
    for _, line in lines.lines:
        if line.isdigit():
            pids.append(int(line))
    return outcome, lines, pids


async def _run_catching(
    nursery: trio.Nursery,
    tool: Callable[..., object],
    lines: Lines,
    registry: Registry,
    grace: float,
) -> None:
    errors: list[BaseException] = []

    async def guarded(task_status: trio.TaskStatus[None]) -> None:
        try:
            await tool(task_status=task_status)  # type: ignore[operator]
        except RequestCancelled as exc:
            errors.append(exc)

    await nursery.start(guarded)
    await lines.ready.wait()
    request = registry.requests()[0]
    registry.cancel_request(request, "stop", kind="client", grace_period=grace)
    await registry.wait_idle()
    if errors:
        raise errors[0]


async def test_a_child_that_exits_on_sigterm_stops_politely(registry: Registry) -> None:
    recorder = EventRecorder.attach(registry)
    outcome, _, _ = await run_and_cancel(registry, EXITS_ON_TERM, grace=20)
    # Stopped by the polite phase: the child died of SIGTERM, long before
    # the hard cancel, and the request says it was cancelled (not "finished").
    assert isinstance(outcome, RequestCancelled) and outcome.reason == "stop"
    assert "request.hard_cancelled" not in recorder.names()


async def test_polite_signal_is_configurable_and_the_child_sees_it(registry: Registry) -> None:
    code = (
        "import signal, sys, time;"
        " signal.signal(signal.SIGINT, lambda *a: (print('got SIGINT', flush=True), sys.exit(3)));"
        " print('ready', flush=True); time.sleep(60)"
    )
    outcome, lines, _ = await run_and_cancel(registry, code, grace=20, stop=signal.SIGINT)
    assert isinstance(outcome, RequestCancelled)
    assert ("stdout", "got SIGINT") in lines.lines


async def test_a_child_that_ignores_sigterm_is_killed_at_the_hard_cancel(
    registry: Registry,
) -> None:
    recorder = EventRecorder.attach(registry)
    outcome, _, _ = await run_and_cancel(registry, IGNORES_TERM, grace=0.3)
    assert isinstance(outcome, trio.Cancelled)  # the hard cancel reached run_process
    assert "request.hard_cancelled" in recorder.names()


async def test_the_hard_cancel_kills_the_grandchildren_too(registry: Registry) -> None:
    outcome, _, pids = await run_and_cancel(registry, FORKS, grace=0.3)
    assert isinstance(outcome, trio.Cancelled)
    assert len(pids) == 1
    await wait_gone(pids[0])  # SIGKILL went to the whole group


# Ignores SIGTERM itself and waits for a grandchild that does not (and says "ready"
# once it has restored SIGTERM: an ignored signal stays ignored across exec).
WAITS_FOR_GRANDCHILD = (
    "import signal, subprocess, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " g = subprocess.Popen([sys.executable, '-c', 'import signal, time;"
    " signal.signal(signal.SIGTERM, signal.SIG_DFL); print(\\'ready\\', flush=True);"
    " time.sleep(60)']);"
    " sys.exit(g.wait() == -signal.SIGTERM)"
)


@pytest.mark.parametrize("stop_group", [True, False])
async def test_stop_group_sends_the_polite_signal_to_the_whole_group(
    registry: Registry, stop_group: bool
) -> None:
    recorder = EventRecorder.attach(registry)
    grace = 20 if stop_group else 0.3
    outcome, _, _ = await run_and_cancel(
        registry, WAITS_FOR_GRANDCHILD, grace=grace, stop_group=stop_group
    )
    if stop_group:  # the grandchild got SIGTERM, so the child finished in the polite phase
        assert isinstance(outcome, RequestCancelled)
        assert "request.hard_cancelled" not in recorder.names()
    else:  # only the child got it, and ignored it
        assert isinstance(outcome, trio.Cancelled)
        assert "request.hard_cancelled" in recorder.names()


async def test_a_grandchild_left_behind_by_a_finished_child_is_killed() -> None:
    code = (
        "import subprocess, sys; g = subprocess.Popen([sys.executable, '-c',"
        " 'import time; time.sleep(60)'], stdout=subprocess.DEVNULL); print(g.pid)"
    )
    with trio.fail_after(BOUND):
        result = await run_process([PY, "-c", code])
    assert result.returncode == 0
    await wait_gone(int(result.stdout or b"0"))


async def test_close_stdin_is_a_polite_stop(registry: Registry) -> None:
    code = "import sys; print('ready', flush=True); sys.stdin.read(); print('eof', flush=True)"
    outcome, lines, _ = await run_and_cancel(registry, code, grace=20, stop=CLOSE_STDIN)
    assert isinstance(outcome, RequestCancelled)
    assert ("stdout", "eof") in lines.lines


async def test_output_is_captured_and_the_exit_status_returned() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"
    with trio.fail_after(BOUND):
        result = await run_process([PY, "-c", code])
    assert (result.returncode, result.stdout, result.stderr) == (7, b"out\n", b"err\n")
    with pytest.raises(subprocess.CalledProcessError) as info:
        result.check_returncode()
    assert info.value.returncode == 7
    with trio.fail_after(BOUND), pytest.raises(subprocess.CalledProcessError):
        await run_process([PY, "-c", code], check=True)


async def test_input_goes_to_stdin_and_output_is_bounded() -> None:
    with trio.fail_after(BOUND):
        result = await run_process(
            [PY, "-c", "import sys; sys.stdout.write(sys.stdin.read() * 3)"],
            input=b"abcd",
            max_output=5,
        )
    assert result.stdout == b"abcda" and result.truncated


async def test_lines_are_streamed_as_progress() -> None:
    reports: list[tuple[float, str | None]] = []

    class Ctx:
        async def report_progress(
            self, progress: float, total: float | None = None, message: str | None = None
        ) -> None:
            reports.append((progress, message))

    with trio.fail_after(BOUND):
        result = await run_process(
            [PY, "-c", "print('compiling a'); print('compiling b', end='')"],
            progress=Ctx(),
            capture_stdout=False,
        )
    assert result.stdout is None
    assert reports == [(1, "compiling a"), (2, "compiling b")]


async def test_a_reporter_with_last_progress_is_continued_from_it() -> None:
    # Any reporter may say where it stands (Context.last_progress does).
    reports: list[float] = []

    class Ctx:
        last_progress = 41.7

        async def report_progress(
            self, progress: float, total: float | None = None, message: str | None = None
        ) -> None:
            reports.append(progress)

    with trio.fail_after(BOUND):
        await run_process([PY, "-c", "print('a'); print('b')"], progress=Ctx())
    assert reports == [42, 43]


async def test_line_progress_continues_after_the_tools_own_progress() -> None:
    from trio_mcp_cancel.server import Context

    sent: list[dict[str, object]] = []

    class Exchange:
        silenced = False

        async def notify(self, message: dict[str, object]) -> None:
            sent.append(message["params"])  # type: ignore[arg-type]

    ctx = Context(1, None, "tok", Exchange())  # type: ignore[arg-type]
    assert ctx.last_progress is None
    await ctx.report_progress(10.5, None, "before")
    assert ctx.last_progress == 10.5
    with trio.fail_after(BOUND):
        await run_process([PY, "-c", "print('one'); print('two')"], progress=ctx)
    assert ctx.last_progress == 12
    await ctx.report_progress(13, None, "after")
    assert [(p["progress"], p["message"]) for p in sent] == [
        (10.5, "before"),
        (11, "one"),
        (12, "two"),
        (13, "after"),
    ]


async def test_an_already_cancelled_request_starts_no_child(registry: Registry) -> None:
    async with tracked(1, "ns") as request:
        registry.cancel_request(request, "early", grace_period=None)
        with pytest.raises(RequestCancelled):
            await run_process([PY, "-c", "open('/nonexistent/should-not-run', 'w')"])


async def test_outside_a_request_an_enclosing_cancel_kills_the_group() -> None:
    lines = Lines()
    with trio.fail_after(BOUND):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: run_process([PY, "-c", FORKS], on_line=lines)  # type: ignore[arg-type]
                )
                await lines.ready.wait()
                scope.cancel()
    pid = int(next(line for _, line in lines.lines if line.isdigit()))
    await wait_gone(pid)


async def test_reserved_options_and_bad_signals_are_refused() -> None:
    with pytest.raises(TypeError, match="start_new_session"):
        await run_process(["true"], start_new_session=False)
    with pytest.raises(ValueError):
        await run_process(["true"], stop=12345)


async def test_the_child_is_reaped(registry: Registry) -> None:
    # No zombie of ours: once run_process returns (or is cancelled), the
    # child has been waited for, so waitpid no longer knows it.
    with trio.fail_after(BOUND):
        result = await run_process([PY, "-c", "import os; print(os.getpid())"])
    with pytest.raises(ChildProcessError):
        os.waitpid(int(result.stdout or b"0"), os.WNOHANG)  # noqa: ASYNC222 (never blocks)
    code = "import os, time; print(os.getpid()); print('ready', flush=True); time.sleep(60)"
    _, _, pids = await run_and_cancel(registry, code, grace=0.1, stop=None)
    with pytest.raises(ChildProcessError):
        os.waitpid(pids[0], os.WNOHANG)  # noqa: ASYNC222
