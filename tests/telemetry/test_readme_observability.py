"""The README's Observability example runs as written (its test function, under a mock clock)."""

from __future__ import annotations

import re

import trio
import trio.testing

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_observability_example_passes() -> None:
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README, flags=re.S)
        if 'McpServer("observed"' in b
    ]
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    clock = trio.testing.MockClock(autojump_threshold=0)
    test = namespace["test_a_cancelled_call_shows_on_its_span"]
    trio.run(test, clock, clock=clock)  # type: ignore[arg-type]
