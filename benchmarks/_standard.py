"""uvicorn[standard]'s speed-ups (uvloop, httptools), installed for the SDK's server process only.

``pip install "uvicorn[standard]"`` is how most deployments run the MCP SDK:
it brings uvloop (the asyncio event loop on libuv) and httptools (the C
HTTP/1.1 parser), which uvicorn then picks.  The end-to-end benchmark
compares ours with that stack, so it installs the two itself, with the
version bounds the installed uvicorn's ``standard`` extra declares, into
``.tools/bench-py/`` (``pip install --target``, ignored by git) rather than
into the project's virtual environment: only the server processes of the
``sdk-uvicorn-standard*`` kinds get that folder on their ``PYTHONPATH``
(:func:`environment`), so the tests, our own servers and the plain uvicorn
rows never import uvloop or httptools by accident.  uvicorn's other
``standard`` dependencies (watchfiles, websockets, python-dotenv, PyYAML)
play no part in serving a POST and are left out.

When the install fails (no network, no wheel for this Python), the rows of
those kinds say ``not installed: <why>`` instead of a number; nothing
raises.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from pathlib import Path

import trio

__all__ = ["PACKAGES", "TOOLS", "ensure_installed", "environment", "is_standard", "versions"]

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "bench-py"
PACKAGES = ("uvloop", "httptools")
#: The install's time limit: a registry that does not answer is a "not installed" row, not a
#: hang (pip's own ``--timeout`` bounds each socket wait, this the whole install).
INSTALL_TIMEOUT = 180

#: The outcome of this process's one install attempt: None (installed) or the reason.
_outcome: list[str | None] = []


def is_standard(kind: str) -> bool:
    """Whether a server kind of :mod:`benchmarks._servers` runs on uvicorn[standard]."""
    return kind.startswith("sdk-uvicorn-standard")


def requirements() -> list[str]:
    """uvloop's and httptools' requirement strings from uvicorn's ``standard`` extra.

    The markers are dropped (they select the platforms uvloop builds on; pip
    refuses to install where it does not).  Without uvicorn: the bare names.
    """
    try:
        declared = importlib.metadata.requires("uvicorn") or []
    except importlib.metadata.PackageNotFoundError:
        declared = []
    found = {}
    for requirement in declared:
        spec, _, marker = requirement.partition(";")
        name = re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower()
        if name in PACKAGES and "standard" in marker:
            found[name] = spec.strip()
    return [found.get(name, name) for name in PACKAGES]


def versions() -> dict[str, str]:
    """The installed version of each package in :data:`TOOLS`, by name (missing ones absent)."""
    if not TOOLS.is_dir():
        return {}
    found = {}
    for dist in importlib.metadata.distributions(path=[str(TOOLS)]):
        name = (dist.metadata["Name"] or "").lower()
        if name in PACKAGES:
            found[name] = dist.version
    return found


async def ensure_installed() -> str | None:
    """Install the packages into :data:`TOOLS` unless there; ``None``, or why they are not.

    Tried once per process: a second benchmark asks again for free.
    """
    if not _outcome:
        _outcome.append(await _install())
    return _outcome[0]


async def _install() -> str | None:
    if set(versions()) == set(PACKAGES) and await _importable():
        return None
    argv = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary", ":all:", "--upgrade", "--target", str(TOOLS),
        "--timeout", "20", "--retries", "1",
        *requirements(),
    ]  # fmt: skip
    print(f"installing {' '.join(requirements())} into {TOOLS}...", file=sys.stderr, flush=True)
    try:
        with trio.fail_after(INSTALL_TIMEOUT):
            done = await trio.run_process(
                argv, capture_stdout=True, capture_stderr=True, check=False
            )
    except (OSError, trio.TooSlowError) as exc:
        return f"not installed: pip could not run ({type(exc).__name__}: {exc})"
    if done.returncode:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"not installed: pip exited {done.returncode} ({tail[0][:160]})"
    if not await _importable():
        return "not installed: pip succeeded but uvloop or httptools does not import"
    return None


async def _importable() -> bool:
    """Both import in a process with :func:`environment` (a wheel for another Python would not)."""
    code = "import uvloop, httptools"
    done = await trio.run_process(
        [sys.executable, "-c", code], env=environment(), capture_stderr=True, check=False
    )
    return done.returncode == 0


def environment() -> dict[str, str]:
    """This process's environment with :data:`TOOLS` first on ``PYTHONPATH``."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(TOOLS), path) if p)}
