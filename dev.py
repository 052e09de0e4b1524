#!/usr/bin/env python3
"""One entry point for newcomers and CI: ``python3 dev.py demo`` / ``test`` / ``conformance``.

Both commands first make sure ``.venv`` exists and holds this project
installed with its test extras (``pip install -e .[test]``), reinstalling
when ``pyproject.toml`` changed, so a fresh clone needs nothing else.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
MARKER = VENV / ".installed-pyproject-sha256"


def run(*args: object) -> int:
    print("+", " ".join(str(a) for a in args), flush=True)
    return subprocess.call([str(a) for a in args], cwd=ROOT)


def ensure_venv() -> None:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if MARKER.exists() and MARKER.read_text() == digest and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    if run(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[test]") != 0:
        sys.exit("pip install failed")
    MARKER.write_text(digest)


def test(extra: list[str]) -> int:
    """Lint, type-check, then run the whole test suite."""
    for check in (
        (BIN / "ruff", "check", "."),
        (BIN / "mypy", "--strict", "trio_mcp_cancel"),
    ):
        if run(*check) != 0:
            return 1
    code = run(PYTHON, "-m", "pytest", *extra)
    if code == 5:  # pytest found no tests: that is a broken suite, not a pass
        print("pytest collected no tests", file=sys.stderr)
        return 1
    return code


def demo(extra: list[str]) -> int:
    """Start the example server on 127.0.0.1 and drive it with the demo client."""
    return run(PYTHON, ROOT / "examples" / "client_demo.py", *extra)


def bench(extra: list[str]) -> int:
    """Run the benchmarks and rewrite benchmarks/RESULTS.md."""
    return run(PYTHON, "-m", "benchmarks", *extra)


def conformance(extra: list[str]) -> int:
    """Run the official MCP conformance suite (both eras) against examples/conformance_server.py.

    Installs the pinned Node 22 and suite into .tools/ first; see conformance/run_suite.py.
    """
    return run(PYTHON, ROOT / "conformance" / "run_suite.py", *extra)


COMMANDS = {"test": test, "demo": demo, "bench": bench, "conformance": conformance}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python3 dev.py {{{'|'.join(COMMANDS)}}} [args...]", file=sys.stderr)
        return 2
    ensure_venv()
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
