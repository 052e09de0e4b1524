"""The HTTP response path asks which server it runs under in one place only.

The app picks its sink once (``McpHttpApp``: plain ASGI, or hypercorn's,
by ``hypercorn_fast_paths``); everything hypercorn-specific the sink does
(the socket queue's ``ioctl``, reaching through ``send.__self__``) sits in
``transports/http/hypercorn_compat.py``.  These checks read the package's
source with :mod:`ast` (no import runs) so the flag and the socket tricks
cannot spread through the transport again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _support.repo_paths import ROOT as REPO

PACKAGE = REPO / "trio_mcp_cancel"
HYPERCORN_HOME = "transports/http/hypercorn_compat.py"
#: Where the switch may be read: the app that chooses its sink, and the switch's home.
SWITCH_READERS = frozenset({"transports/http/app.py", HYPERCORN_HOME})


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _names(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every identifier, attribute and imported module in *source*."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.arg):
            found.append((node.lineno, node.arg))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in ("__self__", "fast_paths", "hypercorn_fast_paths"):
                found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_app_reads_the_hypercorn_switch_and_only_hypercorns_module_reaches_into_it(
    path: Path,
) -> None:
    here = path.relative_to(PACKAGE).as_posix()
    strays = []
    for line, name in _names(path.read_text(encoding="utf-8")):
        if "fast_paths" in name and here not in SWITCH_READERS:
            strays.append(f"{line}: {name} (the app chooses its sink once)")
        if name in ("fcntl", "ioctl", "__self__") and here != HYPERCORN_HOME:
            strays.append(f"{line}: {name} (belongs in {HYPERCORN_HOME})")
    assert not strays, f"{here}:\n" + "\n".join(strays)


def test_the_check_sees_a_stray_flag_and_a_stray_ioctl() -> None:
    source = "import fcntl\ndef f(r):\n    return r.fast_paths and fcntl.ioctl(0, 1)\n"
    names = {name for _, name in _names(source)}
    assert {"fcntl", "ioctl", "fast_paths"} <= names
