"""``trio-mcp-cancel list`` and ``call``: every kind of target, both eras, Ctrl-C, clear errors."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel import __version__

from _support.cli import cli, cli_env, make_project, read, serving, start_cli, wait_for_text

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(120)]

TOOLS = ["add", "echo", "fails", "refuses", "wait_for_cancel"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def _stdio_command() -> str:
    return f"{sys.executable} cli_server.py"


# -- list ------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["auto", "legacy"])
def test_list_prints_tools_resources_templates_and_prompts_of_a_module_and_a_command(
    project: Path, era: str
) -> None:
    for spec in ("cli_server:server", _stdio_command()):
        done = cli("list", spec, "--era", era, cwd=project)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert "tools (5)" in out and "resources (1)" in out, out
        assert "resource templates (1)" in out and "prompts (1)" in out, out
        assert re.search(r"add\s+\(a: integer, b: integer\)\s+Add two integers\.", out), out
        assert "docs://readme" in out and "db://users/{user_id}" in out and "review" in out


async def test_list_json_is_one_object_with_each_list_under_its_mcp_key_over_http_and_websocket(
    project: Path,
) -> None:
    env = cli_env()
    async with serving(project, "--transport", "http", env=env) as http:
        async with serving(project, "--transport", "websocket", env=env) as ws:
            for url in (http.url, ws.url):
                for era in ("auto", "legacy"):
                    done = await trio.to_thread.run_sync(
                        lambda url=url, era=era: cli(
                            "list", url, "--json", "--era", era, cwd=project
                        )
                    )
                    assert done.returncode == 0, done.stderr
                    found = json.loads(done.stdout)
                    assert [t["name"] for t in found["tools"]] == TOOLS
                    assert [r["uri"] for r in found["resources"]] == ["docs://readme"]
                    assert found["resourceTemplates"][0]["uriTemplate"] == "db://users/{user_id}"
                    assert [p["name"] for p in found["prompts"]] == ["review"]


def test_what_the_module_prints_on_import_does_not_spoil_the_json(project: Path) -> None:
    source = (project / "cli_server.py").read_text()
    (project / "cli_server.py").write_text(source + '\nprint("hello from import")\n')
    done = cli("list", "cli_server:server", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tools"]
    assert "hello from import" in done.stderr


def test_a_target_that_does_not_compile_is_one_line_naming_the_file_and_line(
    project: Path,
) -> None:
    (project / "cli_server.py").write_text("def broken(:\n")
    done = cli("call", "cli_server:server", "add", cwd=project)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "cli_server.py:1: invalid syntax" in done.stderr, done.stderr


# -- call ------------------------------------------------------------------------------


def test_call_prints_the_text_and_types_key_value_arguments_by_the_input_schema(
    project: Path,
) -> None:
    done = cli("call", "cli_server:server", "add", "a=2", "b=40", cwd=project)
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr
    done = cli("call", _stdio_command(), "echo", "text=007", "loud=yes", "times=2.5",
               "--era", "legacy", cwd=project)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "007 x2.5\n"), done.stderr  # "007" stays a string
    done = cli("call", "cli_server:server", "add", "--args", '{"a": 1, "b": 1}', "b=5",
               "--json", cwd=project)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["content"] == [{"type": "text", "text": "6"}] and not result.get("isError")


def test_a_result_with_is_error_is_printed_and_exits_1(project: Path) -> None:
    done = cli("call", "cli_server:server", "fails", cwd=project)
    assert (done.returncode, done.stdout) == (1, "it failed on purpose\n")


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["call", "cli_server:server", "nope"], 2, "unknown tool 'nope' (its tools: add, echo"),
        (
            ["call", "cli_server:server", "add", "a=x", "b=1"],
            2,
            "argument a: 'x' is not an integer",
        ),
        (["call", "cli_server:server", "add", "--args", "{bad"], 2, "--args is not valid JSON"),
        (["call", "cli_server:server", "add", "--args", "[1]"], 2, "--args must be a JSON object"),
        (["call", "cli_server:server", "add", "a"], 2, "expected key=value, not 'a'"),
        (["list", "no_such_module:server"], 2, "no module named 'no_such_module'"),
        (["list", "cli_server:missing"], 2, "has no attribute 'missing'"),
        (["list", "no-such-command --flag"], 2, "'no-such-command' is not a command found"),
        (["call", "cli_server:server", "refuses"], 1, "answered an error (-32001): refused on"),
        (["list", "http://127.0.0.1:1/mcp"], 1, "cannot reach http://127.0.0.1:1/mcp"),
        (["list", f"{sys.executable} -c pass"], 1, "the server closed the connection"),
    ],
)
def test_mistakes_are_one_line_errors_with_exit_2_for_what_was_typed_and_1_for_the_server(
    project: Path, args: list[str], status: int, message: str
) -> None:
    done = cli(*args, cwd=project)
    assert done.returncode == status, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# -- Ctrl-C ----------------------------------------------------------------------------


async def _interrupt_call(project: Path, spec: str, era: str, marker: Path) -> tuple[int, str]:
    """Call ``wait_for_cancel``, send SIGINT once it reported progress; (status, stderr)."""
    env = cli_env(CLI_MARKER=str(marker))
    err = project / "call.err"
    process = await start_cli("call", spec, "wait_for_cancel", "--era", era, cwd=project,
                              env=env, stdout=project / "call.out", stderr=err)  # fmt: skip
    try:
        await wait_for_text(err, "progress 1/10", process)
        process.send_signal(signal.SIGINT)
        with trio.fail_after(20):
            status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return status, err.read_text()


async def _marked(marker: Path) -> str:
    with trio.fail_after(10):
        while not read(marker):
            await trio.sleep(0.05)
    return read(marker)


@pytest.mark.parametrize("era", ["modern", "legacy"])
@pytest.mark.parametrize("kind", ["module", "command"])
async def test_ctrl_c_sends_notifications_cancelled_says_cancelled_and_exits_130(
    project: Path, kind: str, era: str
) -> None:
    marker = project / "marker"
    spec = "cli_server:server" if kind == "module" else _stdio_command()
    status, err = await _interrupt_call(project, spec, era, marker)
    assert status == 130, err
    assert "cancelled" in err.splitlines() and "Traceback" not in err, err
    # A client cancel (notifications/cancelled), not the connection closing under it.
    assert await _marked(marker) == "client caller cancelled"


@pytest.mark.parametrize(
    ("transport", "era", "how"),
    [
        ("http", "auto", "disconnect"),  # modern HTTP: the request's stream is closed
        ("http", "legacy", "client caller cancelled"),  # notifications/cancelled
        ("websocket", "auto", "client caller cancelled"),
    ],
)
async def test_ctrl_c_cancels_a_call_over_the_network_the_way_its_era_needs(
    project: Path, transport: str, era: str, how: str
) -> None:
    marker = project / "marker"
    async with serving(project, "--transport", transport, env=cli_env(CLI_MARKER=str(marker))) as s:
        status, err = await _interrupt_call(project, s.url, era, marker)
        assert status == 130 and "cancelled" in err.splitlines(), err
        assert (await _marked(marker)).startswith(how)


# -- --help and --version ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "list", "call", "install", "dev"])
def test_every_command_has_help(tmp_path: Path, command: str) -> None:
    done = cli(command, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: trio-mcp-cancel {command}"), done.stdout


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    done = cli("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"trio-mcp-cancel {__version__}\n")
    assert "list" in cli("--help", cwd=tmp_path).stdout
