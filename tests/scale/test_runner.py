"""``trio-mcp-cancel run``: the command serves, and its supervisor outlives its workers.

Subprocess tests: each starts the real command (``python -m trio_mcp_cancel``)
on 127.0.0.1, port 0, and the ``--workers`` ones a real redis-server; every
wait is bounded (``trio.fail_after``) and every process is killed on the way
out.  The server is ``tests/_support/runner_app.py``, whose tools say which worker
answered.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trio_mcp_cancel._run.supervisor import describe_exit, failed_by_itself
from trio_mcp_cancel.backends.redis import RedisBackend
from trio_mcp_cancel.http import backend_from_env

from _support.asgi import (
    headers_of,
    initialize_message,
    legacy_call,
    legacy_headers,
    modern_call,
    notification,
)
from _support.deploy import WITH_TASKS, RedisServer, answer, modern, task_request
from _support.redis import prefix, record, redis, running
from _support.repo_paths import ROOT
from _support.runner import APP, LISTENING, SERVING, environment, gone, run

__all__ = ["prefix", "redis"]  # fixtures

LEGACY = "2025-11-25"
_RUNNING_ON = re.compile(r"Running on http://127\.0\.0\.1:(\d+)")
_STARTED = re.compile(r"worker \d+ started \(pid (\d+),")
_KILLED_STARTING = re.compile(r"killed by SIGKILL before serving")

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(90)]


async def whoami(client: httpx.AsyncClient, url: str, request_id: int = 1) -> list[str]:
    """``[pid, instance id, secret digest]`` of the worker that answered."""
    reply = await modern(client, url, "tools/call", {"name": "whoami", "arguments": {}},
                         request_id=request_id)  # fmt: skip
    assert "result" in reply, reply
    text: str = reply["result"]["content"][0]["text"]
    return text.split()


# -- stdio and one HTTP process ---------------------------------------------------------


def test_the_console_script_is_the_same_command_as_python_m() -> None:
    import importlib
    import tomllib

    import trio_mcp_cancel._run.cli as cli

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["trio-mcp-cancel"].partition(":")
    assert getattr(importlib.import_module(module), name) is cli.main
    assert "from ._run.cli import main" in (ROOT / "trio_mcp_cancel" / "__main__.py").read_text()


async def test_run_serves_an_mcp_server_on_stdio(tmp_path: Path) -> None:
    async with run(tmp_path, APP) as server:
        stdin, stdout = server.process.stdin, server.process.stdout
        assert stdin is not None and stdout is not None
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": LEGACY, "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "whoami", "arguments": {}}},
        ]  # fmt: skip
        await stdin.send_all(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
        received = b""
        with trio.fail_after(30):
            while received.count(b"\n") < 2:
                chunk = await stdout.receive_some()
                assert chunk, server.log()
                received += chunk
        answers = {m["id"]: m for m in map(json.loads, received.splitlines())}
        assert answers[1]["result"]["protocolVersion"] == LEGACY
        pid = answers[2]["result"]["content"][0]["text"].split()[0]
        assert pid == str(server.process.pid)  # served by the command's own process
        await stdin.aclose()  # the host is done: a clean exit
        with trio.fail_after(20):
            await server.process.wait()
    assert server.process.returncode == 0, server.log()


@pytest.mark.parametrize("http", ["h11", "httptools"])
async def test_run_serves_http_in_one_process_and_stops_on_sigterm(
    tmp_path: Path, http: str
) -> None:
    env = {}
    if http == "httptools":  # wherever it is installed, the child imports it too
        where = Path(pytest.importorskip("httptools").__file__ or "").parent.parent
        env["PYTHONPATH"] = os.pathsep.join([environment()["PYTHONPATH"], str(where)])
    args = ["--transport", "http", "--port", "0", "--http", http]
    async with run(tmp_path, APP, *args, env=env) as server:
        (port,) = await server.wait_log(_RUNNING_ON)
        server.port = int(port)
        async with httpx.AsyncClient(timeout=10) as client:
            pid, _, _ = await whoami(client, server.url)
        assert pid == str(server.process.pid)
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await server.process.wait()
    assert server.process.returncode == 0, server.log()
    assert "shutting down gracefully" in server.log()


SHUTDOWN = {"reason": "server shutting down"}
_STOPPED_FOR_SHUTDOWN = "cancelled by the server ('server shutting down')"


async def legacy_session(client: httpx.AsyncClient, url: str) -> str:
    """A new legacy session's ``Mcp-Session-Id``."""
    reply = await client.post(url, headers=legacy_headers(version=None),
                              json=initialize_message())  # fmt: skip
    session: str = reply.headers["mcp-session-id"]
    await client.post(url, headers=legacy_headers(session),
                      json=notification("notifications/initialized"))  # fmt: skip
    return session


async def call_answer(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], message: dict[str, Any]
) -> Any:
    """POST a call and read its response to the end: its JSON-RPC answer."""
    async with client.stream("POST", url, headers=headers, json=message) as response:
        await response.aread()
    return answer(response)


async def test_sigterm_answers_calls_in_flight_minus_32800_on_both_eras_within_the_stated_time(
    tmp_path: Path,
) -> None:
    async with run(tmp_path, APP, "--transport", "http", "--port", "0") as server:
        (port,) = await server.wait_log(_RUNNING_ON)
        server.port = int(port)
        answers: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=20) as client, trio.open_nursery() as nursery:
            session = await legacy_session(client, server.url)
            calls = {
                # Polls the flag: stops at once.
                "modern": (headers_of(m := modern_call(1, "until_cancelled")), m),
                # Ignores the flag: hard-cancelled before the stated time runs out.
                "legacy": (legacy_headers(session), legacy_call(2, "hold", {"seconds": 60})),
            }

            async def call(era: str) -> None:
                answers[era] = await call_answer(client, server.url, *calls[era])

            for era in calls:
                nursery.start_soon(call, era)
            await server.wait_log(re.compile(r"until_cancelled started"))
            await server.wait_log(re.compile(r"hold started"))
            server.process.send_signal(signal.SIGTERM)
            signalled = trio.current_time()
            with trio.fail_after(20):
                await server.process.wait()
            elapsed = trio.current_time() - signalled
    log = server.log()
    assert server.process.returncode == 0, log[-3000:]
    for era in calls:
        assert answers[era]["error"]["code"] == -32800, (era, answers[era])
        assert answers[era]["error"]["data"] == SHUTDOWN, (era, answers[era])
    assert "until_cancelled saw kind=server reason=server shutting down" in log, log[-3000:]
    assert log.count(_STOPPED_FOR_SHUTDOWN) == 2, log[-3000:]
    assert "shutting down gracefully (up to 5.0s" in log
    assert elapsed < 5.0, f"exited {elapsed:.2f}s after SIGTERM"
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "http", "--workers", "2"], "MCP_REDIS_URL"),
        (["--workers", "2"], "--workers is for --transport http"),
        (["--port", "1"], "--port is for --transport http"),
        (["--http", "httptools"], "--http is for --transport http"),
        (["--grace-period", "soon"], "--grace-period must be a number"),
    ],
)
async def test_run_refuses_what_it_cannot_do_with_a_clear_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    async with run(tmp_path, APP, *args) as server:
        with trio.fail_after(20):
            await server.process.wait()
    assert server.process.returncode == 2
    assert message in server.log() and "Traceback" not in server.log(), server.log()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("_support.runner_app", "expected MODULE:ATTR"),
        ("no_such_module_here:app", "no module named 'no_such_module_here'"),
        ("_support.runner_app:missing", "has no attribute 'missing'"),
        ("_support.runner_app:os", "expected an McpServer or an ASGI app"),
    ],
)
async def test_run_names_a_target_it_cannot_serve(tmp_path: Path, spec: str, message: str) -> None:
    async with run(tmp_path, spec, "--transport", "http", "--port", "0") as server:
        with trio.fail_after(20):
            await server.process.wait()
    assert server.process.returncode == 2
    assert message in server.log() and "Traceback" not in server.log(), server.log()


# -- the supervisor ---------------------------------------------------------------------


async def wait_task(
    client: httpx.AsyncClient, url: str, task_id: str, done: Any, within: float = 15.0
) -> dict[str, Any]:
    """``tasks/get`` until ``done(status)``; that status."""
    with trio.fail_after(within):
        while True:
            reply = await task_request(client, url, "tasks/get", task_id)
            assert "result" in reply, reply
            if done(reply["result"]):
                return dict(reply["result"])
            await trio.sleep(0.05)


async def test_a_killed_worker_is_replaced_its_tasks_fail_and_the_others_keep_serving(
    tmp_path: Path, redis: RedisServer, prefix: str
) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2"]
    env = {"MCP_REDIS_URL": redis.url, "MCP_REDIS_PREFIX": prefix}
    async with run(tmp_path, *args, env=env) as server, httpx.AsyncClient(timeout=10) as client:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        first = set(server.serving_pids())
        assert len(first) == 2

        # Both workers share one MRTR secret and have instance ids of their own.
        seen: dict[str, list[str]] = {}
        with trio.fail_after(30):
            while len(seen) < 2:  # fresh connections until both workers answered
                async with httpx.AsyncClient(timeout=10) as fresh:
                    pid, instance, secret = await whoami(fresh, server.url)
                seen[pid] = [instance, secret]
        assert {int(p) for p in seen} == first
        (one, other) = seen.values()
        assert one[0] != other[0] and one[1] == other[1] != "-"

        # A task runs on one of them; which one, its statusMessage says.
        hold = {"name": "hold", "arguments": {}}
        created = await modern(client, server.url, "tools/call", hold, capabilities=WITH_TASKS)
        task_id = created["result"]["taskId"]
        status = await wait_task(
            client, server.url, task_id, lambda s: "pid" in (s.get("statusMessage") or "")
        )
        victim = int(status["statusMessage"].rsplit(" ", 1)[1])
        (survivor,) = first - {victim}

        os.kill(victim, signal.SIGKILL)
        # The survivor serves at once; every answer now comes from it.
        for i in range(5):
            async with httpx.AsyncClient(timeout=10) as fresh:
                assert int((await whoami(fresh, server.url, i))[0]) == survivor
        failed = await wait_task(client, server.url, task_id, lambda s: s["status"] != "working")
        assert failed["status"] == "failed", failed
        assert "stopped" in failed["statusMessage"]
        await server.wait_log(re.compile(r"1 running task\(s\) settled failed"))
        assert f"(pid {victim}, instance " in server.log()
        assert describe_exit(-signal.SIGKILL) in server.log()

        # A replacement comes up; with the survivor killed too, it alone serves.
        await server.wait_log(SERVING, 3)
        (replacement,) = set(server.serving_pids()) - first
        os.kill(survivor, signal.SIGKILL)
        with trio.fail_after(30):
            while True:
                try:
                    async with httpx.AsyncClient(timeout=10) as fresh:
                        pid = int((await whoami(fresh, server.url))[0])
                    break
                except httpx.TransportError:  # the survivor's half-open connection
                    await trio.sleep(0.05)
        assert pid in {replacement, *set(server.serving_pids()) - first}

        # SIGTERM: every worker stops gracefully, the supervisor exits 0.
        await server.wait_log(SERVING, 4)
        workers = set(server.serving_pids()) - {victim, survivor}
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await server.process.wait()
    assert server.process.returncode == 0, server.log()[-3000:]
    assert all(gone(pid) for pid in workers)
    assert server.log().count("exited with status 0") == 2, server.log()[-3000:]
    assert "Traceback" not in server.log(), server.log()[-3000:]


async def test_mrtr_retries_succeed_on_whichever_worker_they_reach(
    tmp_path: Path, redis: RedisServer, prefix: str
) -> None:
    """The supervisor's one MCP_STATE_SECRET: a retry opens on the other worker too."""
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2"]
    env = {"MCP_REDIS_URL": redis.url, "MCP_REDIS_PREFIX": prefix}
    async with run(tmp_path, *args, env=env) as server:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        asked_by: set[int] = set()
        crossed = 0
        answer = {"ok": {"action": "accept", "content": {"ok": True}}}
        with trio.fail_after(60):
            for n in range(40):  # every request on a fresh connection: either worker
                item = {"item": f"file-{n}"}
                async with httpx.AsyncClient(timeout=10) as fresh:
                    first = await modern(
                        fresh,
                        server.url,
                        "tools/call",
                        {"name": "confirm", "arguments": item},
                        capabilities={"elicitation": {}},
                    )
                    mine = int((await whoami(fresh, server.url))[0])
                assert "result" in first, first
                result = first["result"]
                assert result["resultType"] == "input_required", result
                retry = {
                    "name": "confirm",
                    "arguments": item,
                    "inputResponses": answer,
                    "requestState": result["requestState"],
                }
                async with httpx.AsyncClient(timeout=10) as fresh:
                    done = await modern(
                        fresh,
                        server.url,
                        "tools/call",
                        retry,
                        capabilities={"elicitation": {}},
                        request_id=2,
                    )
                assert "result" in done, done
                pid, text = done["result"]["content"][0]["text"].split(" ", 1)
                assert text == f"confirmed file-{n}"
                asked_by.add(mine)
                crossed += int(pid) != mine
                if crossed >= 3 and n >= 10:
                    break
    assert crossed >= 1, "no retry reached the other worker: the test proved nothing"


async def test_sigterm_to_the_supervisor_lets_calls_in_flight_finish(tmp_path: Path) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args) as server, httpx.AsyncClient(timeout=20) as client:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        answers: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                params = {"name": "hold", "arguments": {"seconds": 1.0}}
                answers.append(await modern(client, server.url, "tools/call", params))

            nursery.start_soon(call)
            await server.wait_log(re.compile(r"hold started in pid (\d+)"))
            server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await server.process.wait()
    # The worker shut down gracefully: the call ran to its end, not cut off.
    assert answers[0]["result"]["content"][0]["text"] == "held", answers
    assert server.process.returncode == 0, server.log()[-3000:]
    assert server.log().count("shutting down gracefully") == 2


async def test_sigterm_to_the_supervisor_answers_calls_in_flight_in_every_worker(
    tmp_path: Path,
) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args) as server:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        answers: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def call(request_id: int) -> None:
                message = modern_call(request_id, "until_cancelled")
                async with httpx.AsyncClient(timeout=20) as fresh:  # either worker
                    answers.append(
                        await call_answer(fresh, server.url, headers_of(message), message)
                    )

            for request_id in range(4):
                nursery.start_soon(call, request_id)
            await server.wait_log(re.compile(r"until_cancelled started"), 4)
            server.process.send_signal(signal.SIGTERM)
            signalled = trio.current_time()
        with trio.fail_after(20):
            await server.process.wait()
        elapsed = trio.current_time() - signalled
    log = server.log()
    assert server.process.returncode == 0, log[-3000:]
    assert len(answers) == 4
    assert all(a["error"]["code"] == -32800 and a["error"]["data"] == SHUTDOWN for a in answers)
    assert log.count(_STOPPED_FOR_SHUTDOWN) == 4, log[-3000:]
    # The bound the supervisor states: its workers' graceful timeout, the kill
    # margin and the time to settle a killed worker's tasks.
    assert "stopping every worker gracefully (up to 7.0s)" in log
    assert elapsed < 7.0, f"exited {elapsed:.2f}s after SIGTERM"
    assert log.count("exited with status 0") == 2, log[-3000:]


async def test_a_starting_worker_killed_by_signals_is_restarted_and_the_others_keep_serving(
    tmp_path: Path,
) -> None:
    """An OOM kill (or an operator's) of a worker that is still starting is not a crash loop."""
    hold = tmp_path / "hold-start"
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args, env={"RUNNER_APP_HOLD_START": str(hold)}) as server:
        (port,) = await server.wait_log(LISTENING)
        server.port = int(port)
        await server.wait_log(SERVING, 2)
        victim, survivor = server.serving_pids()
        hold.touch()  # from now on, a new worker stays starting until the file goes
        os.kill(victim, signal.SIGKILL)
        for kills in range(1, 4):
            # The replacement starts (and holds); kill it before it serves.
            pid = int((await server.wait_log(_STARTED, 2 + kills))[-1])
            os.kill(pid, signal.SIGKILL)
            await server.wait_log(_KILLED_STARTING, kills)
            async with httpx.AsyncClient(timeout=10) as fresh:  # the survivor serves
                assert int((await whoami(fresh, server.url))[0]) == survivor
        assert "giving up" not in server.log() and server.process.returncode is None
        hold.unlink()  # the next replacement starts normally and serves
        await server.wait_log(SERVING, 3)
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await server.process.wait()
    log = server.log()
    assert server.process.returncode == 0, log[-3000:]
    assert log.count("killed by SIGKILL before serving (killed from outside") == 3, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_only_an_exit_or_a_crash_signal_counts_as_a_worker_failing_by_itself() -> None:
    assert failed_by_itself(0) and failed_by_itself(3)  # it exited: an import error, say
    for crash in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL):
        assert failed_by_itself(-crash)
    for kill in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        assert not failed_by_itself(-kill)  # the OOM killer, an operator: not a crash loop


async def test_the_supervisor_gives_up_when_workers_die_at_once(tmp_path: Path) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args, env={"RUNNER_APP_EXIT": "7"}) as server:
        with trio.fail_after(60):
            await server.process.wait()
    assert server.process.returncode == 1, server.log()[-3000:]
    log = server.log()
    assert "exited with status 7 before serving" in log and "giving up" in log, log[-3000:]


async def test_workers_shut_down_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    args = [APP, "--transport", "http", "--port", "0", "--workers", "2",
            "--allow-unshared"]  # fmt: skip
    async with run(tmp_path, *args) as server:
        await server.wait_log(SERVING, 2)
        workers = server.serving_pids()
        server.process.kill()
        await server.process.wait()
        with trio.fail_after(30):
            while not all(gone(pid) for pid in workers):
                await trio.sleep(0.05)
    assert "the supervisor is gone" in server.log()


# -- the settings the supervisor hands its workers --------------------------------------


def test_mcp_instance_id_names_the_backend_instance_and_is_checked() -> None:
    url = "redis://127.0.0.1:1/0"
    backend = backend_from_env({"MCP_REDIS_URL": url, "MCP_INSTANCE_ID": "run-0-1"})
    assert backend is not None and backend.instance_id == "run-0-1"
    for bad in ("has space", "x" * 65, "a:b", "{tag}"):
        with pytest.raises(ValueError, match="MCP_INSTANCE_ID"):
            backend_from_env({"MCP_REDIS_URL": url, "MCP_INSTANCE_ID": bad})


async def test_fail_tasks_of_fails_only_that_instances_unfinished_tasks(
    redis: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trio_mcp_cancel.backends.redis as redis_module

    monkeypatch.setattr(redis_module, "_SWEEP_BATCH", 2)  # several SCAN steps and batches
    # A prefix with glob characters, next to one its unescaped pattern would match.
    ours = RedisBackend(redis.url, prefix=f"{prefix}*")
    theirs = RedisBackend(redis.url, prefix=f"{prefix}x")
    async with running(ours, theirs):
        for task_id, instance in [("a1", "A"), ("a2", "A"), ("a3", "A"), ("a4", "A"),
                                  ("done", "A"), ("b1", "B")]:  # fmt: skip
            await ours.tasks.create(record(task_id, instance=instance))
        await ours.tasks.settle("done", "completed", result={"content": []})
        await theirs.tasks.create(record("a1", instance="A"))
        await ours.tasks.settle("a4", "input_required", input_requests={"r": {}})

        assert await ours.tasks.fail_tasks_of("A", "the worker died") == 4
        for task_id in ("a1", "a2", "a3", "a4"):
            failed = await ours.tasks.get(task_id)
            assert failed is not None and failed.status == "failed"
            assert failed.status_message == "the worker died"
            assert failed.error is not None and failed.error["code"] == -32603
            assert failed.input_requests is None
        done, other = await ours.tasks.get("done"), await ours.tasks.get("b1")
        assert done is not None and done.status == "completed"
        assert other is not None and other.status == "working"
        elsewhere = await theirs.tasks.get("a1")
        assert elsewhere is not None and elsewhere.status == "working"
        # Its liveness key is gone: anything the sweep missed reads as orphaned.
        assert await ours.tasks.orphaned(record("late", instance="A"))
        assert await ours.tasks.fail_tasks_of("A", "again") == 0
