"""Where the repository's files are, for tests in any folder under ``tests/``.

Test modules live in folders by behaviour (``tests/core/``, ``tests/transports/http/``,
...), so ``Path(__file__).parent`` means something different in each; they import these
instead.  ``TESTS`` is also what subprocess tests put on ``PYTHONPATH`` so a child process
finds the shared support package (``_support.runner_app``, ``_support.cancellation_tools``)
as pytest does (``pythonpath = ["tests"]`` in pyproject).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["ROOT", "SUPPORT", "TESTS", "load_dev_py"]

#: ``tests/_support/``: the shared harnesses, test servers and helpers.
SUPPORT = Path(__file__).resolve().parent
#: The ``tests/`` folder: the root ``conftest.py``, and the folder that holds ``_support``.
TESTS = SUPPORT.parent
#: The repository (``pyproject.toml``, ``examples/``, ``conformance/``, ``README.md``).
ROOT = TESTS.parent


def load_dev_py() -> ModuleType:
    """``dev.py`` (a script, not a module on the path) loaded as a module."""
    spec = importlib.util.spec_from_file_location("dev_py", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
