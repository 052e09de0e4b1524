"""``dev.py``: ``COMMAND --help`` only helps; ``test`` brings the Node tooling when it can.

In process, with ``dev.py``'s ``run`` (every command it starts), its venv
installer and the Node installer replaced by recorders, so nothing is
installed or started: what is checked is what ``dev.py`` would do.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import ModuleType

import pytest

from _support.repo_paths import load_dev_py


@pytest.fixture
def dev(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[str]]:
    """dev.py with its side effects recorded, in order, instead of done."""
    module = load_dev_py()
    done: list[str] = []

    def run(*args: object) -> int:
        done.append(" ".join(Path(str(a)).name for a in args[:3]))
        return 0

    monkeypatch.setattr(module, "run", run)
    monkeypatch.setattr(module, "ensure_venv", lambda extras: done.append(f"venv {extras}"))
    node_tools = types.SimpleNamespace(
        TOOLS=Path("/nowhere/.tools"),
        NodeToolsMissing=RuntimeError,
        installed=lambda: False,
        ensure=lambda: done.append("npm ci"),
    )
    monkeypatch.setitem(sys.modules, "node_tools", node_tools)
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/usr/bin/{name}")
    return module, done


def test_demo_help_prints_help_and_installs_and_runs_nothing(
    dev: tuple[ModuleType, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, done = dev
    monkeypatch.setattr(sys, "argv", ["dev.py", "demo", "--help"])
    assert module.main() == 0
    assert done == []
    assert "python3 dev.py demo" in capsys.readouterr().out


def test_dev_py_help_lists_every_command(
    dev: tuple[ModuleType, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, done = dev
    monkeypatch.setattr(sys, "argv", ["dev.py", "--help"])
    assert module.main() == 0
    out = capsys.readouterr().out
    assert done == [] and all(f"  {name} " in out for name in module.COMMANDS)


def test_the_full_test_run_installs_the_node_tooling_before_pytest_when_npm_is_there(
    dev: tuple[ModuleType, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    module, done = dev
    assert module.test([]) == 0
    assert done == ["ruff check ", "mypy --strict trio_mcp_cancel", "npm ci", "python -m pytest"]
    assert "installing the pinned Node tooling" in capsys.readouterr().out


def test_the_fast_run_and_a_machine_without_npm_install_no_node_tooling(
    dev: tuple[ModuleType, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, done = dev
    assert module.test(["--fast"]) == 0
    assert "npm ci" not in done
    done.clear()
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    assert module.test([]) == 0
    assert "npm ci" not in done and done[-1] == "python -m pytest"
    assert "npm not found" in capsys.readouterr().out
