"""The command line's documentation: every flag of every command in docs/reference.md, and the
README's "Command line" block made of commands the parser accepts."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from trio_mcp_cancel._run import cli

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
SECTION = REFERENCE.split("## The command line: trio-mcp-cancel run", 1)[1].split("\n## ", 1)[0]


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


@pytest.mark.parametrize("command", ["list", "call", "install", "dev", "run"])
def test_the_reference_names_every_flag_of_every_command(command: str) -> None:
    flags = {
        flag
        for action in _commands()[command]._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    assert sorted(f for f in flags if f"`{f}`" not in SECTION) == []
    assert f"trio-mcp-cancel {command}" in SECTION


def test_every_host_of_install_has_its_config_path_in_the_reference() -> None:
    from trio_mcp_cancel._run.cmd_install import HOSTS

    assert [h for h in HOSTS if f"| `{h}` |" not in SECTION] == []


def test_the_readme_command_line_block_is_made_of_commands_the_parser_accepts() -> None:
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    lines = [line.split("  #")[0] for line in block.splitlines() if line.strip()]
    assert len(lines) >= 6
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "trio-mcp-cancel"
        args, extra = cli._parser().parse_known_args(words[1:])
        assert extra == [] or (args.command == "call" and all("=" in e for e in extra)), line
