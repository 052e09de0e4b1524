"""Other libraries' internals stay in their one module each, so they cannot spread again.

Three libraries are reached into, each from one module with a version
check and an off switch: hypercorn (``transports/http/hypercorn_compat.py``, with the idle
timer it installs, ``hypercorn_idle.py``),
httpcore2 (``_client/httpcore2_compat.py``: the HTTP/2 stream reset) and
OpenTelemetry (``_telemetry/otel_compat.py``: the provider probe).  This
check reads every module of the package with :mod:`ast` (no import runs)
and finds, outside those homes: an import of a private module of httpcore2,
httpx2, h2 or OpenTelemetry; a read of OpenTelemetry's provider globals (as
an attribute or a ``getattr`` string); an assignment to ``__class__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _support.repo_paths import ROOT as REPO

PACKAGE = REPO / "trio_mcp_cancel"
HTTPCORE2_HOME = "_client/httpcore2_compat.py"
OTEL_HOME = "_telemetry/otel_compat.py"
#: Libraries whose underscore modules are internals (``httpcore2._async``, ...).
WATCHED = {
    "httpcore2": HTTPCORE2_HOME,
    "httpx2": HTTPCORE2_HOME,
    "h2": HTTPCORE2_HOME,
    "opentelemetry": OTEL_HOME,
}
#: OpenTelemetry's private names the provider probe reads.
OTEL_PRIVATE = frozenset(
    {
        "_TRACER_PROVIDER",
        "_METER_PROVIDER",
        "_PROXY_TRACER_PROVIDER",
        "_PROXY_METER_PROVIDER",
        "_ProxyMeterProvider",
        "_TRACER_PROVIDER_SET_ONCE",
        "_METER_PROVIDER_SET_ONCE",
    }
)


def findings(source: str) -> list[tuple[int, str, str]]:
    """``(line, what, home)`` of every outside-internals use in *source*."""
    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            top, *rest = module.split(".")
            if top in WATCHED and any(part.startswith("_") for part in rest):
                found.append((node.lineno, f"import {module}", WATCHED[top]))
        if isinstance(node, ast.Attribute) and node.attr in OTEL_PRIVATE:
            found.append((node.lineno, f".{node.attr}", OTEL_HOME))
        if isinstance(node, ast.Constant) and node.value in OTEL_PRIVATE:
            found.append((node.lineno, repr(node.value), OTEL_HOME))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "__class__":
                    found.append((node.lineno, "__class__ =", HTTPCORE2_HOME))
    return sorted(found)


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reaches_into_another_librarys_internals_outside_its_home(path: Path) -> None:
    here = path.relative_to(PACKAGE).as_posix()
    strays = [
        f"{line}: {what} (belongs in {home})"
        for line, what, home in findings(path.read_text(encoding="utf-8"))
        if home != here
    ]
    assert strays == []


def test_each_home_is_where_its_library_is_reached_into() -> None:
    homes = {
        home
        for path in modules()
        for _, _, home in findings(path.read_text(encoding="utf-8"))
        if home == path.relative_to(PACKAGE).as_posix()
    }
    assert homes == {HTTPCORE2_HOME, OTEL_HOME}


def test_the_check_would_notice_each_kind_of_reach() -> None:
    source = "\n".join(
        [
            "from httpcore2._async.http2 import AsyncHTTP2Connection",
            "import opentelemetry.metrics._internal",
            "from opentelemetry.metrics import _internal",
            "from opentelemetry import trace",
            "x = trace._TRACER_PROVIDER",
            "y = getattr(m, '_METER_PROVIDER', None)",
            "pool.__class__ = Mine",
            "from httpcore2 import AsyncConnectionPool",
        ]
    )
    assert [(line, what) for line, what, _ in findings(source)] == [
        (1, "import httpcore2._async.http2.AsyncHTTP2Connection"),
        (2, "import opentelemetry.metrics._internal"),
        (3, "import opentelemetry.metrics._internal"),
        (5, "._TRACER_PROVIDER"),
        (6, "'_METER_PROVIDER'"),
        (7, "__class__ ="),
    ]
