"""``trio-mcp-cancel install``: the host's config written for this environment, safely.

Run as a subprocess against a temporary HOME (and APPDATA), as a user runs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel.client import open_stdio_client

from _support.cli import cli, cli_env, make_project

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(120)]

LINUX_DESKTOP = Path(".config") / "Claude" / "claude_desktop_config.json"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return make_project(tmp_path / "project")


def _install(project: Path, home: Path, *args: str) -> tuple[int, str, str]:
    env = cli_env(HOME=str(home), APPDATA=str(home / "AppData"))
    env.pop("XDG_CONFIG_HOME", None)
    done = cli("install", *args, cwd=project, env=env)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="the Linux path of Claude Desktop's config")
def test_install_writes_a_new_claude_desktop_config_whose_entry_starts_the_server(
    project: Path, home: Path
) -> None:
    status, out, err = _install(project, home, "claude-desktop", "cli_server:server",
                                "--env", "GREETING=hi")  # fmt: skip
    assert status == 0, err
    path = home / LINUX_DESKTOP
    assert str(path) in out
    entry = json.loads(path.read_text())["mcpServers"]["cli_server"]
    assert entry["command"] == sys.executable
    assert entry["args"] == ["-m", "trio_mcp_cancel", "run", "cli_server:server"]
    assert entry["env"]["GREETING"] == "hi"
    assert str(project) in entry["env"]["PYTHONPATH"].split(":")  # importable from anywhere
    assert "type" not in entry
    assert list(path.parent.glob("*.bak")) == []  # nothing was there to back up

    async def host_starts_it() -> list[str]:
        # As the host does: the command, its args and env, from another directory.
        async with open_stdio_client(
            [entry["command"], *entry["args"]], env={**cli_env(), **entry["env"]}, cwd=str(home)
        ) as client:
            return [tool["name"] for tool in await client.list_tools()]

    assert trio.run(host_starts_it) == ["add", "echo", "fails", "refuses", "wait_for_cancel"]


def test_install_updates_an_existing_config_keeping_other_keys_and_a_backup(
    project: Path, home: Path
) -> None:
    path = home / ".claude.json"
    before = {"numStartups": 7, "projects": {"/x": {"a": 1}},
              "mcpServers": {"other": {"command": "x"}, "srv": {"command": "old"}}}  # fmt: skip
    path.write_text(json.dumps(before))
    status, out, err = _install(project, home, "claude-code", "cli_server:server", "--name", "srv")
    assert status == 0, err
    after = json.loads(path.read_text())
    assert after["numStartups"] == 7 and after["projects"] == before["projects"]
    assert after["mcpServers"]["other"] == {"command": "x"}
    assert after["mcpServers"]["srv"]["type"] == "stdio"  # Claude Code's user-scope entry
    assert after["mcpServers"]["srv"]["args"][-1] == "cli_server:server"
    (backup,) = home.glob(".claude.json.*.bak")
    assert json.loads(backup.read_text()) == before and str(backup) in out
    status, _, err = _install(project, home, "claude-code", "cli_server:server", "--name", "srv")
    assert status == 0 and len(list(home.glob(".claude.json.*.bak"))) == 2, err


def test_dry_run_prints_the_config_and_writes_nothing(project: Path, home: Path) -> None:
    status, out, err = _install(project, home, "cursor", "cli_server:server", "--dry-run")
    assert status == 0, err
    assert json.loads(out)["mcpServers"]["cli_server"]["args"][-1] == "cli_server:server"
    assert list(home.rglob("*")) == []


@pytest.mark.parametrize(
    "content", ["{not json", "[1, 2]", '{"mcpServers": []}', '{"mcpServers": "x"}']
)
def test_a_malformed_config_is_refused_untouched_with_one_line(
    project: Path, home: Path, content: str
) -> None:
    (home / ".cursor").mkdir()
    path = home / ".cursor" / "mcp.json"
    path.write_text(content)
    status, _, err = _install(project, home, "cursor", "cli_server:server")
    assert status == 2 and "nothing was written" in err and "Traceback" not in err, err
    assert path.read_text() == content and list(path.parent.glob("*.bak")) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cursor", "nosuch_module:server"], "no module named 'nosuch_module'"),
        (["cursor", "cli_server"], "expected MODULE:ATTR"),
        (["cursor", "cli_server:server", "--env", "NOEQUALS"], "--env takes K=V"),
        (["vscode", "cli_server:server"], "invalid choice: 'vscode'"),
    ],
)
def test_install_mistakes_are_one_line_errors(
    project: Path, home: Path, args: list[str], message: str
) -> None:
    status, _, err = _install(project, home, *args)
    assert status == 2 and message in err and "Traceback" not in err, err
    assert list(home.rglob("*")) == []
