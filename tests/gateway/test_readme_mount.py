"""The README's "Mount and proxy" block runs as written: the cancel crosses the hop."""

from __future__ import annotations

import re
from typing import Any

import trio.testing

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def block(needle: str) -> str:
    found = [b for b in re.findall(r"```python\n(.*?)```", README, flags=re.S) if needle in b]
    assert len(found) == 1, f"{len(found)} python blocks contain {needle!r}"
    return found[0]


async def test_the_readme_mount_example_shows_the_cancel_crossing_the_hop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(block("gateway.mount(upstream"), "README.md", "exec"), namespace)
    await namespace["test_the_cancel_crosses_the_hop"](autojump_clock)
    assert namespace["stopped"] == ["upstream stopped: client"]
