#!/usr/bin/env python3
"""One entry point for newcomers and CI: ``python3 dev.py demo|test|bench|conformance|floors``.

``test --fast`` runs only the in-memory tests (see ``FAST``), everything else the whole suite;
``test`` first installs the pinned Node tooling into ``.tools/`` when ``npm`` is there (see
``ensure_node_tools``), so the ``node`` tests run instead of being skipped.
``python3 dev.py COMMAND --help`` says what a command does, and installs and runs nothing.

Every command first makes sure ``.venv`` exists and holds this project
installed (``pip install -e .[EXTRAS]``) with the extras that command needs,
and says what it installs: ``demo`` only the library and the demo client's
``demo`` extra; ``test``, ``bench`` and ``conformance`` the ``dev`` extra
(the project's lint, type and test tools).  It reinstalls when
``pyproject.toml`` changed, so a fresh clone needs nothing else.

``floors`` is different: it builds ``.venv-floors`` with the oldest release
each ``>=`` bound of ``[project] dependencies`` allows (a constraints file
made from those bounds), then runs a fast subset of the tests there, so the
lower bounds the package claims are the ones it is tested with.
``floors --resolve-only`` only asks pip whether those releases resolve
together (``pip install --dry-run``: seconds, no venv), as ``.ci/run`` does.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
MARKER = VENV / ".installed-pyproject-sha256"

FLOORS_VENV = ROOT / ".venv-floors"
FLOORS_BIN = FLOORS_VENV / ("Scripts" if os.name == "nt" else "bin")
#: What ``floors`` adds to the floors to run tests (any recent release).
FLOORS_TOOLS = (
    "pytest>=8", "pytest-trio>=0.8", "pytest-timeout>=2.2", "hypothesis>=6.100", "httpx>=0.27",
    "httpx2>=2.16.2",  # the client's HTTP (the `client` extra), for tests/client
)  # fmt: skip
#: The fast subset ``floors`` runs (about 10 s): the registry, the server, the
#: in-memory client, WebSocket, HTTP through hypercorn (the client's tests),
#: threads and processes, the startup checks, the packaging checks.  Needs no
#: optional dependency beyond ``FLOORS_TOOLS``.
FLOORS_TESTS = (
    "tests/core/test_registry.py",
    "tests/core/test_context_and_events.py",
    "tests/protocol/test_server.py",
    "tests/transports/memory/test_memory_client.py",
    "tests/transports/websocket/test_websocket.py",
    "tests/client/test_client.py",
    "tests/project/test_hypercorn_toml.py",
    "tests/core/test_threads.py",
    "tests/core/test_process.py",
    "tests/transports/test_slow_readers_streams.py",
    "tests/transports/test_startup_checks.py",
    "tests/project/test_packaging.py",
)


def run(*args: object) -> int:
    print("+", " ".join(str(a) for a in args), flush=True)
    return subprocess.call([str(a) for a in args], cwd=ROOT)


def _project() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        project: dict[str, object] = tomllib.load(file)["project"]
    return project


def _requirements(extras: tuple[str, ...]) -> list[str]:
    """The requirements ``pip install .[extras]`` brings in, as pyproject spells them."""
    project = _project()
    found = list(project["dependencies"])  # type: ignore[call-overload]
    optional: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    for extra in extras:
        found += [r for r in optional[extra] if not r.startswith("trio-mcp-cancel[")]
    return list(dict.fromkeys(found))


def ensure_venv(extras: tuple[str, ...]) -> None:
    """Install the project with *extras* into ``.venv`` unless it already has them."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    installed: set[str] = set()
    if MARKER.exists() and PYTHON.exists():
        try:
            state = json.loads(MARKER.read_text())
            if state.get("pyproject") == digest:
                installed = set(state.get("extras", ()))
                if set(extras) <= installed:
                    return
        except ValueError:
            pass  # a marker of an older dev.py: reinstall
    if not PYTHON.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    spec = f".[{','.join(extras)}]" if extras else "."
    print(
        f"installing trio-mcp-cancel{spec[1:]} into {VENV.name} (editable):\n  "
        + "\n  ".join(_requirements(extras)),
        flush=True,
    )
    if run(PYTHON, "-m", "pip", "install", "--quiet", "-e", spec) != 0:
        sys.exit("pip install failed")
    MARKER.write_text(json.dumps({"pyproject": digest, "extras": sorted(installed | set(extras))}))


#: What ``test --fast`` leaves out (markers registered in pyproject): the in-memory
#: suite that is left runs in well under a minute.
FAST = "not slow and not redis and not subprocess and not node"


def ensure_node_tools() -> None:
    """Install the pinned Node tooling (``conformance/node_tools.py``) when ``npm`` is there.

    The ``node`` tests (the TypeScript SDK as a client and a server) skip
    without it; installing it here, once, makes ``test`` run the whole
    suite on any machine with ``npm``, as ``conformance`` does.  Without
    ``npm`` (or when the install fails) it says so and the tests skip.
    """
    sys.path.insert(0, str(ROOT / "conformance"))
    import node_tools

    if node_tools.installed():
        print(f"node tests: the pinned Node tooling is in {node_tools.TOOLS}", flush=True)
        return
    if shutil.which("npm") is None:
        print("node tests: npm not found, they will be skipped (Debian: apt-get install npm)")
        return
    print(f"node tests: installing the pinned Node tooling into {node_tools.TOOLS}", flush=True)
    try:
        node_tools.ensure()
    except node_tools.NodeToolsMissing as exc:
        print(f"node tests: {exc}; they will be skipped", file=sys.stderr, flush=True)


def test(extra: list[str]) -> int:
    """Lint, type-check, then run the whole test suite.

    ``--fast``: only the in-memory tests (no ``slow``, ``redis``, ``subprocess``
    or ``node`` marker), for the edit-run loop; CI runs everything.  Without
    ``--fast`` the Node tooling is installed first when ``npm`` is there.
    Further arguments go to pytest (a path, ``-k EXPR``, ``-x``).
    """
    fast = "--fast" in extra
    extra = [a for a in extra if a != "--fast"]
    for check in (
        (BIN / "ruff", "check", "."),
        (BIN / "mypy", "--strict", "trio_mcp_cancel"),
    ):
        if run(*check) != 0:
            return 1
    if not fast:
        ensure_node_tools()
    code = run(PYTHON, "-m", "pytest", *(["-m", FAST] if fast else []), *extra)
    if code == 5:  # pytest found no tests: that is a broken suite, not a pass
        print("pytest collected no tests", file=sys.stderr)
        return 1
    return code


def demo(extra: list[str]) -> int:
    """Start the example server on 127.0.0.1 and drive it with the demo client.

    It cancels a tool every way the protocol has (HTTP both eras, WebSocket,
    stdio, a child process, a task) and says what happened at each step;
    examples/client_demo.py describes the steps.  It takes no arguments.
    """
    return run(PYTHON, ROOT / "examples" / "client_demo.py", *extra)


def bench(extra: list[str]) -> int:
    """Run the benchmarks and rewrite benchmarks/RESULTS.md.

    ``--quick``: small sizes, for a smoke test; ``--only NAME``: one group
    (e.g. ``hostile``).  Arguments go to ``python -m benchmarks``.
    """
    return run(PYTHON, "-m", "benchmarks", *extra)


def conformance(extra: list[str]) -> int:
    """Run the official MCP conformance suite (both eras) against examples/conformance_server.py.

    Installs the pinned Node 22 and suite into .tools/ first; see conformance/run_suite.py.
    Then our cancellation scenarios (conformance/scenarios/, the suite's format) at each era.
    ``--era 2025-11-25`` (or ``2026-07-28``): one era; ``--scenario NAME``: one scenario.
    """
    return run(PYTHON, ROOT / "conformance" / "run_suite.py", *extra)


_FLOOR = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(?:,.*)?$")


def floor_constraints() -> list[str]:
    """``name==version`` for every ``>=`` bound of ``[project] dependencies``.

    A dependency without a ``>=`` bound has no floor to test and is left
    out; that is an error, so a new dependency cannot slip in untested.
    """
    pins = []
    for requirement in _project()["dependencies"]:  # type: ignore[attr-defined]
        match = _FLOOR.match(requirement.split(";")[0].strip())
        if match is None:
            sys.exit(f"dev.py floors: {requirement!r} has no '>=' lower bound to test")
        pins.append(f"{match[1]}=={match[2]}")
    return pins


def _name(project: str) -> str:
    """A project name as PEP 503 compares it: ``typing_extensions`` is ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", project).lower()


def _release(version: str) -> tuple[int, ...] | str:
    """``0.25`` and ``0.25.0`` alike (a version that is not plain numbers is compared as text)."""
    try:
        parts = [int(part) for part in version.split(".")]
    except ValueError:
        return version
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def floors(extra: list[str]) -> int:
    """Install the oldest allowed releases in .venv-floors and run a fast test subset there.

    ``--resolve-only``: only check with ``pip install --dry-run`` that they resolve together.
    """
    pins = floor_constraints()
    constraints = ROOT / "build" / "floors-constraints.txt"
    constraints.parent.mkdir(exist_ok=True)
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    print("floors (from pyproject's '>=' bounds):\n  " + "\n  ".join(pins), flush=True)
    if "--resolve-only" in extra:
        # The project itself with every dependency held to its floor: a floor that
        # conflicts with another (or does not exist) fails to resolve.
        pip = PYTHON if PYTHON.exists() else Path(sys.executable)
        return run(
            pip, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "-c", constraints, "-e", ".",
        )  # fmt: skip
    python = FLOORS_BIN / "python"
    if not python.exists():
        shutil.rmtree(FLOORS_VENV, ignore_errors=True)
        print(f"creating {FLOORS_VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(FLOORS_VENV)
    if run(python, "-m", "pip", "install", "--quiet", "-c", constraints, "-e", ".", *FLOORS_TOOLS):
        return 1
    # What is installed must be the floors themselves, not something newer.
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    # Names compared normalised (PEP 503): pip lists typing_extensions for typing-extensions.
    installed = {_name(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    wrong = [
        f"{pin} (installed: {installed.get(_name(pin.split('==')[0]))})"
        for pin in pins
        if _release(installed.get(_name(pin.split("==")[0]), "")) != _release(pin.split("==")[1])
    ]
    if wrong:
        print("dev.py floors: not at their floors: " + ", ".join(wrong), file=sys.stderr)
        return 1
    args = [a for a in extra if a != "--resolve-only"]
    return run(python, "-m", "pytest", "-q", "-p", "no:randomly", *FLOORS_TESTS, *args)


#: The extras each command's venv needs.
COMMANDS = {
    "test": (test, ("dev",)),
    "demo": (demo, ("demo",)),
    "bench": (bench, ("dev",)),
    "conformance": (conformance, ("dev",)),
    "floors": (floors, None),
}


_HELP = ("-h", "--help")


def usage() -> str:
    """Every command with the first line of what it does."""
    lines = [f"usage: python3 dev.py {{{'|'.join(COMMANDS)}}} [args...]", ""]
    for name, (command, _) in COMMANDS.items():
        lines.append(f"  {name:<12} {(command.__doc__ or '').strip().splitlines()[0]}")
    lines.append("\npython3 dev.py COMMAND --help: more about one command")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in _HELP:
        print(usage())
        return 0
    if not args or args[0] not in COMMANDS:
        print(usage(), file=sys.stderr)
        return 2
    command, extras = COMMANDS[args[0]]
    if any(arg in _HELP for arg in args[1:]):
        # Help, not a run: nothing is installed or started (the demo would run its servers).
        print(f"python3 dev.py {args[0]} [args...]\n\n{inspect.cleandoc(command.__doc__ or '')}")
        return 0
    if extras is not None:
        ensure_venv(extras)
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
