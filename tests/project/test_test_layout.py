"""The tests follow their rooms: shared code in ``tests/_support``, tests import only that.

A harness, test server or helper that two test modules share lives in the
``_support`` package (imported as ``_support.<module>``); anything else under
``tests/`` is a test module (``test_*.py``) or a ``conftest.py``.  A test
module imports no other test module (nor ``conftest``): so one can move to
another folder, or go away, without breaking another, and pytest never
collects a test twice under two names.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _support.repo_paths import SUPPORT, TESTS


def outside_support() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if SUPPORT not in p.parents)


def stray_modules(paths: list[Path], root: Path = TESTS) -> list[str]:
    """Those of *paths* that are neither a test module nor a conftest (relative to *root*)."""
    return [
        str(p.relative_to(root))
        for p in paths
        if not (p.name.startswith("test_") or p.name == "conftest.py")
    ]


def imported_test_modules(source: str, test_names: set[str]) -> list[str]:
    """The test modules (or conftests) that *source* imports, however it spells them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                found.append("." * node.level + (node.module or ""))
                continue
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "tests" or test_names & set(parts):
                found.append(module)
    return found


def test_every_shared_harness_and_helper_lives_in_support() -> None:
    assert not [p for p in TESTS.rglob("*_harness.py") if SUPPORT not in p.parents]
    assert stray_modules(outside_support()) == []
    assert (SUPPORT / "__init__.py").read_text().startswith('"""')


def test_no_test_module_imports_another() -> None:
    paths = outside_support()
    names = {p.stem for p in paths}
    imports = {
        str(p.relative_to(TESTS)): found
        for p in paths
        if (found := imported_test_modules(p.read_text(), names))
    }
    assert imports == {}


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    names = {"test_http", "test_tasks", "conftest", "test_hostile_sockets"}
    source = (
        "from test_tasks import serving\n"
        "import test_http as h\n"
        "from hostile.test_hostile_sockets import setup\n"
        "from tests.asgi_harness import served\n"
        "from . import conftest\n"
        "def f():\n"
        "    from conftest import ROOT\n"
        "from _support.asgi import served\n"
        "import trio\n"
    )
    assert sorted(imported_test_modules(source, names)) == sorted(
        [
            "test_tasks",
            "test_http",
            "hostile.test_hostile_sockets",
            "tests.asgi_harness",
            ".",
            "conftest",
        ]
    )
    for name in ("asgi_harness.py", "helpers.py", "test_x.py", "conftest.py"):
        (tmp_path / name).touch()
    found = stray_modules(sorted(tmp_path.iterdir()), root=tmp_path)
    assert found == ["asgi_harness.py", "helpers.py"]
