"""The README's code must work as written: its testing examples run here verbatim."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
_blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def _block(needle: str) -> str:
    return next(block for block in _blocks if needle in block)


# Define the README's tests in this module, so pytest collects and runs them:
# the registry-level one, and the test-client one against the stdio
# section's server (whose ``run_stdio`` only runs as a script).
exec(compile(_block("def test_my_tool_stops_when_cancelled"), "README.md", "exec"))
exec(compile(_block("run_stdio(server"), "README.md", "exec"))
exec(compile(_block("def test_crunch_stops_when_cancelled"), "README.md", "exec"))


def test_the_readme_examples_were_loaded() -> None:
    assert "test_my_tool_stops_when_cancelled" in globals()
    assert "test_crunch_stops_when_cancelled" in globals()
