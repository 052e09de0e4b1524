"""Transports only move bytes: what they may not do, checked over their source.

The protocol layer (``_protocol/``) builds every JSON-RPC message, decides
about cancels and runs admission; a transport frames bytes, describes the
caller, and hands messages over.  So no module under ``transports/`` builds
a JSON-RPC error or asks the cancellation registry about a request, and
every transport admits a call through ``Dispatcher.admit`` (once) and runs
it with ``answer(..., admitted=True)``.

``transports/http/rules.py`` is the one exception for errors: the HTTP
binding's own checks (a header that contradicts the body, say) raise
``JsonRpcError`` with the binding's codes from ``wire.py``; they are pure
functions, tested on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TRANSPORTS = Path(__file__).resolve().parents[2] / "trio_mcp_cancel" / "transports"
#: Builds HTTP-binding errors itself (see the module docstring).
RULES = TRANSPORTS / "http" / "rules.py"
#: What a transport may not ask the registry (cancelling is the protocol layer's).
REGISTRY_QUERIES = frozenset(
    {"in_flight", "notify_cancelled", "client_cancelled", "client_reason", "track", "tracked"}
)


def modules() -> list[Path]:
    return sorted(TRANSPORTS.rglob("*.py"))


def calls(path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` of every call in *path*: ``f(...)`` and ``x.f(...)`` alike."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            found.append((node.lineno, name))
    return found


def jsonrpc_literals(path: Path) -> list[int]:
    """Lines of dict literals with a ``"jsonrpc"`` key: a message built by hand."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "jsonrpc" for k in node.keys)
    ]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(TRANSPORTS)))
def test_a_transport_builds_no_json_rpc_error(path: Path) -> None:
    built = [
        f"{line}: {name}"
        for line, name in calls(path)
        if name == "error_message" or (name == "JsonRpcError" and path != RULES)
    ]
    assert built == [], "build it in _protocol/ (jsonrpc.py, admission.py) instead"
    assert jsonrpc_literals(path) == []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(TRANSPORTS)))
def test_a_transport_asks_the_registry_nothing_about_requests(path: Path) -> None:
    asked = [f"{line}: {name}" for line, name in calls(path) if name in REGISTRY_QUERIES]
    assert asked == [], "let the dispatcher decide (Dispatcher.notify, Exchange.cancel)"


def test_every_transport_admits_once_and_runs_the_admitted_call() -> None:
    admitting = {
        str(path.relative_to(TRANSPORTS))
        for path in modules()
        if any(name == "admit" for _, name in calls(path))
    }
    assert admitting == {"_connection.py", "http/answer.py"}
    for relative in admitting:
        source = (TRANSPORTS / relative).read_text()
        assert "admitted=True" in source
        assert "refusal(" not in source


def test_the_checks_see_a_violation() -> None:
    bad = TRANSPORTS.parent.parent / "tests" / "project" / "_boundary_probe.py"
    bad.write_text(
        "def f(r, x):\n"
        "    r.in_flight(1, 'ns')\n"
        "    error_message(None, -32600, 'no')\n"
        "    return {'jsonrpc': '2.0'}\n"
    )
    try:
        names = [name for _, name in calls(bad)]
        assert "in_flight" in names and "error_message" in names
        assert jsonrpc_literals(bad) == [4]
    finally:
        bad.unlink()
