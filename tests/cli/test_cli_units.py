"""The command line's pieces that need no process: arguments, progress, targets, paths, bounds."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trio

from trio_mcp_cancel._run.arguments import parse_arguments
from trio_mcp_cancel._run.cmd_call import ProgressPrinter
from trio_mcp_cancel._run.cmd_install import config_path
from trio_mcp_cancel._run.connect import UsageError, kind_of


def test_progress_is_a_redrawn_bar_on_a_terminal_and_plain_lines_elsewhere() -> None:
    tty, plain = io.StringIO(), io.StringIO()
    for stream, is_tty in ((tty, True), (plain, False)):
        printer = ProgressPrinter(stream, is_tty)
        printer({"progress": 5, "total": 10, "message": "half\nway"})
        printer({"progress": 7})
        printer.done()
    assert plain.getvalue() == "progress 5/10 (50%) half way\nprogress 7\n"
    drawn = tty.getvalue()
    assert drawn.count("\r") == 2 and drawn.endswith("\n") and drawn.count("\n") == 1
    assert "[###############---------------]  50% 5/10 half way" in drawn


def test_hostile_progress_values_are_ignored_or_cut_never_a_crash() -> None:
    stream = io.StringIO()
    printer = ProgressPrinter(stream, True)
    for params in ({"progress": "lots"}, {"progress": float("nan")}, {"progress": True},
                   {"progress": 1, "total": float("inf")}, {"progress": 1e308, "total": -1},
                   {"progress": 1, "message": "x" * 100_000}):  # fmt: skip
        printer(params)
    assert all(len(line) < 200 for line in stream.getvalue().split("\r"))


def test_key_value_arguments_follow_the_schema_and_fall_back_to_json_literals() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "flag": {"type": "boolean"},
            "name": {"type": "string"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "items": {"type": "array"},
        },
    }
    words = ["n=3", "x=1.5", "flag=off", "name=42", "maybe=null", "items=[1, 2]",
             'other={"a": 1}', "free=text"]  # fmt: skip
    assert parse_arguments(schema, '{"n": 1, "kept": true}', words) == {
        "n": 3, "x": 1.5, "flag": False, "name": "42", "maybe": None, "items": [1, 2],
        "other": {"a": 1}, "free": "text", "kept": True,
    }  # fmt: skip
    with pytest.raises(UsageError, match="argument x: 'inf' is not a number"):
        parse_arguments(schema, None, ["x=inf"])
    assert parse_arguments({}, None, ["v=NaN"]) == {"v": "NaN"}  # not JSON: the text itself


def test_a_hostile_input_schema_cannot_hang_or_crash_the_argument_parser() -> None:
    deep: dict[str, object] = {"type": "integer"}
    for _ in range(10_000):
        deep = {"anyOf": [deep]}
    for schema in (
        {"properties": {"v": deep}},
        {"properties": {"v": {"type": [1, None, {}]}}},
        {"properties": ["v"]},
        {"properties": {"v": "integer"}},
        "not a schema",
    ):
        assert parse_arguments(schema, None, ["v=7"])["v"] in (7, "7")


def test_a_target_is_a_module_a_url_or_a_command() -> None:
    assert kind_of("examples.slow_server:app") == "module"
    assert kind_of("https://example.com/mcp") == kind_of("ws://h/mcp") == "url"
    assert kind_of("python server.py") == kind_of("./server") == kind_of("uvx x:y z") == "command"


async def test_a_hostile_server_listing_junk_and_paging_forever_is_bounded_and_printed() -> None:
    from trio_mcp_cancel._run.cmd_list import _MAX_PAGES, _table, listing

    class Endless:
        pages = 0

        async def request(self, method: str, params: object = None) -> dict[str, object]:
            self.pages += 1
            junk = [5, "x", None, {"name": None, "inputSchema": {"properties": {"a": 7}}},
                    {"uri": ["no"], "arguments": "nope", "description": 3}]  # fmt: skip
            return {key: junk for key in ("tools", "resources", "resourceTemplates", "prompts")} | {
                "nextCursor": "again"
            }

    server = Endless()
    with trio.fail_after(10):
        found = await listing(server)  # type: ignore[arg-type]
    assert server.pages == 4 * _MAX_PAGES
    assert all(len(items) == 2 * _MAX_PAGES for items in found.values())
    assert _table(found).startswith(f"tools ({2 * _MAX_PAGES})")


def test_each_host_config_path_follows_the_os() -> None:
    env = {"HOME": "/h", "APPDATA": r"C:\Users\u\AppData\Roaming"}
    assert config_path("claude-desktop", "darwin", env) == Path(
        "/h/Library/Application Support/Claude/claude_desktop_config.json"
    )
    assert config_path("claude-desktop", "linux", env) == Path(
        "/h/.config/Claude/claude_desktop_config.json"
    )
    assert config_path("claude-desktop", "linux", {**env, "XDG_CONFIG_HOME": "/x"}) == Path(
        "/x/Claude/claude_desktop_config.json"
    )
    windows = config_path("claude-desktop", "win32", env)
    assert windows == Path(env["APPDATA"]) / "Claude" / "claude_desktop_config.json"
    assert config_path("cursor", "linux", env) == Path("/h/.cursor/mcp.json")
    assert config_path("claude-code", "darwin", env) == Path("/h/.claude.json")
