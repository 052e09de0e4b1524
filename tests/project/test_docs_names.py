"""Where the docs say a name lives, it lives there.

A sentence such as "`ClientRequestError`, `ClientRequestTimeout` and
`ElicitResult` are in `trio_mcp_cancel.server`" is an import a reader will
write; docs/features.md once sent them to ``lowlevel``, which has none of
them.  Every such claim in the README and docs/ is checked by importing.
"""

from __future__ import annotations

import importlib
import re

import pytest

from _support.repo_paths import ROOT

_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_CLAIM = re.compile(
    r"((?:`[A-Za-z_]\w*`(?:,\s*|\s+and\s+|\s+))+)(?:is|are)\s+in\s+`(trio_mcp_cancel(?:\.\w+)*)`"
)


def claims(text: str) -> list[tuple[str, str]]:
    """``(name, module)`` for every "`A`, `B` and `C` are in `module`" in *text*."""
    found = []
    for names, module in _CLAIM.findall(" ".join(text.split())):
        found += [(name, module) for name in re.findall(r"`(\w+)`", names)]
    return found


def _all_claims() -> list[tuple[str, str, str]]:
    return [
        (path.name, name, module)
        for path in _DOCS
        for name, module in claims(path.read_text(encoding="utf-8"))
    ]


@pytest.mark.parametrize(("doc", "name", "module"), _all_claims())
def test_a_name_the_docs_place_in_a_module_is_there(doc: str, name: str, module: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{doc}: {name} is not in {module}"


def test_the_claims_are_found_across_line_breaks() -> None:
    text = "(with its `code`;\n  `A`, `B` and\n  `C` are in `trio_mcp_cancel.server`)"
    assert claims(text) == [(n, "trio_mcp_cancel.server") for n in ("A", "B", "C")]
    assert ("ClientRequestError", "trio_mcp_cancel.server") in [(n, m) for _, n, m in _all_claims()]
