"""The README's code must work as written: its testing example runs here verbatim."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
_blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
_example = next(block for block in _blocks if "def test_my_tool_stops_when_cancelled" in block)

# Define the README's test in this module, so pytest collects and runs it.
exec(compile(_example, "README.md", "exec"))


def test_the_readme_example_was_loaded() -> None:
    assert "test_my_tool_stops_when_cancelled" in globals()
