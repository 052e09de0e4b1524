"""``trio-mcp-cancel install HOST MODULE:ATTR``: add the server to a desktop host's config.

The host launches the server itself, over stdio, so the entry is the
command this environment runs it with: its Python, ``-m trio_mcp_cancel
run MODULE:ATTR`` (the console script may not be on the host's ``PATH``,
and ``-m`` works on every OS), with ``PYTHONPATH`` naming the directories
the module and this library are imported from when they are not installed
in the environment (a project directory, a checkout), since a host starts
servers from a working directory of its own.

Each host reads one JSON file with an ``mcpServers`` object:

========================  ==========================================================
``claude-desktop``        macOS ``~/Library/Application Support/Claude/claude_desktop_config.json``,
                          Windows ``%APPDATA%\\Claude\\claude_desktop_config.json``,
                          Linux ``~/.config/Claude/claude_desktop_config.json``
``cursor``                ``~/.cursor/mcp.json`` (the global file; a project's is
                          ``.cursor/mcp.json``)
``claude-code``           ``~/.claude.json``, its user-scope ``mcpServers`` (entries
                          carry ``"type": "stdio"``)
========================  ==========================================================

The entry named ``--name`` (default: the module's last component) is added
or replaced; every other key of the file is kept as it was.  An existing
file is copied to ``FILE.<timestamp>.bak`` first, and the new one is
written to a temporary file and renamed over it, so a crash never leaves
half a config.  A file that is not a JSON object (or whose ``mcpServers``
is not one) is refused, untouched: it may be the user's work in progress.
``--dry-run`` prints the file as it would be and writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import target

__all__ = ["HOSTS", "add_parser", "config_path", "main", "server_entry"]

HOSTS = ("claude-desktop", "cursor", "claude-code")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "install",
        help="add MODULE:ATTR to Claude Desktop's, Cursor's or Claude Code's config",
        description="Write or update HOST's MCP config so that it launches MODULE:ATTR over"
        " stdio with this environment's Python (a backup of the file is kept).",
    )
    parser.add_argument("host", choices=HOSTS, metavar="HOST", help=", ".join(HOSTS))
    parser.add_argument("target", metavar="MODULE:ATTR", help="the McpServer to launch")
    parser.add_argument("--name", help="the server's name in the config (default: the module's)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="an environment variable for the server (repeat for more)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resulting config and write nothing"
    )


def main(args: argparse.Namespace) -> int:
    try:
        entry = server_entry(
            args.target, _env_pairs(args.env), claude_code=args.host == "claude-code"
        )
        path = config_path(args.host, sys.platform, os.environ)
        config = _read(path)
        servers = config.setdefault("mcpServers", {})
        if not isinstance(servers, dict):
            raise target.TargetError(
                f"{path}: its 'mcpServers' is not a JSON object; fix it by hand,"
                " nothing was written"
            )
        name = args.name or args.target.partition(":")[0].rpartition(".")[2]
        servers[name] = entry
        text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
        if args.dry_run:
            print(text, end="")
            return 0
        backup = _write(path, text)
    except target.TargetError as exc:
        print(f"trio-mcp-cancel install: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"trio-mcp-cancel install: error: {exc.filename or ''}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return 1
    kept = f" (the previous file is {backup})" if backup else ""
    print(f"added {name!r} to {path}{kept}; restart {args.host} to load it")
    return 0


def config_path(host: str, platform: str, environ: Mapping[str, str]) -> Path:
    """Where *host* reads its MCP servers on *platform* (``sys.platform``)."""
    home = Path(environ.get("HOME") or Path.home()) if platform != "win32" else Path.home()
    if host == "cursor":
        return home / ".cursor" / "mcp.json"
    if host == "claude-code":
        return home / ".claude.json"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
    if platform == "win32":
        appdata = environ.get("APPDATA")
        if not appdata:
            raise target.TargetError("APPDATA is not set: cannot find Claude Desktop's config")
        return Path(appdata) / "Claude" / "claude_desktop_config.json"
    config_home = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(config_home) / "Claude" / "claude_desktop_config.json"


def server_entry(spec: str, env: Mapping[str, str], *, claude_code: bool = False) -> dict[str, Any]:
    """The ``mcpServers`` entry that launches *spec* over stdio from any directory."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise target.TargetError(f"expected MODULE:ATTR (e.g. weather:server), not {spec!r}")
    paths = [_import_root(module), _import_root("trio_mcp_cancel")]
    needed = [str(p) for p in dict.fromkeys(paths) if p is not None and not _installed(p)]
    variables = dict(env)
    if needed:
        given = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = os.pathsep.join([*needed, *([given] if given else [])])
    entry: dict[str, Any] = {"type": "stdio"} if claude_code else {}
    entry["command"] = sys.executable
    entry["args"] = ["-m", "trio_mcp_cancel", "run", spec]
    if variables:
        entry["env"] = variables
    return entry


def _import_root(module: str) -> Path | None:
    """The directory *module*'s top-level package is imported from (the working
    directory counts, as ``run`` imports from it), found without importing it."""
    top = module.partition(".")[0]
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise target.TargetError(f"no module named {top!r} here or in this environment")
    if spec.submodule_search_locations:  # a package: its directory's parent
        locations = list(spec.submodule_search_locations)
        return Path(locations[0]).resolve().parent if locations else None
    if spec.origin is None or spec.origin in ("built-in", "frozen"):
        return None
    return Path(spec.origin).resolve().parent


def _installed(directory: Path) -> bool:
    """Whether *directory* is one this Python searches anyway (site-packages, the stdlib)."""
    searched = {sysconfig.get_path(name) for name in ("purelib", "platlib", "stdlib")}
    return any(Path(p).resolve() == directory for p in searched if p)


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise target.TargetError(f"--env takes K=V, not {pair!r}")
        env[key] = value
    return env


def _read(path: Path) -> dict[str, Any]:
    """The config as it is (``{}`` when there is none yet); a malformed file is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise target.TargetError(
            f"{path} is not valid JSON ({exc}); fix it or move it away, nothing was written"
        ) from None
    if not isinstance(config, dict):
        raise target.TargetError(f"{path} is not a JSON object; nothing was written")
    return config


def _write(path: Path, text: str) -> Path | None:
    """Write *text* to *path* atomically, after a copy of what was there; the copy's path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        counter = 1
        while backup.exists():  # two installs within a second keep both copies
            backup = path.with_name(f"{path.name}.{stamp}-{counter}.bak")
            counter += 1
        shutil.copy2(path, backup)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        if backup is not None:
            shutil.copymode(backup, temporary)  # ~/.claude.json holds tokens: keep it private
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return backup
