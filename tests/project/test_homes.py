"""One home per concept: what the client imports, what the kernel holds, what both ends share.

Read from the source's import statements (no import side effects): a
module imported only under ``TYPE_CHECKING`` does not count, and the
package root (which every submodule's import loads anyway) is not followed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trio_mcp_cancel
from trio_mcp_cancel._wire import names as wire

PACKAGE = Path(trio_mcp_cancel.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The package modules *name* imports at run time."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for node in ast.walk(block)
    }
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        target = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            full = f"{target}.{alias.name}"
            found.add(full if full in MODULES else target)
    return {module for module in found if module in MODULES and module != name}


def closure(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for module in imports_of(todo.pop()) - seen - {"trio_mcp_cancel"}:
            seen.add(module)
            todo.append(module)
    return seen


#: The client makes spans of its own and passes their context on: these telemetry
#: modules (the shared names, the switch, the provider probe), never the server's.
CLIENT_TELEMETRY = (
    "trio_mcp_cancel._telemetry.client",
    "trio_mcp_cancel._telemetry.config",
    "trio_mcp_cancel._telemetry.names",
    "trio_mcp_cancel._telemetry.otel",
    "trio_mcp_cancel._telemetry.otel_compat",
    "trio_mcp_cancel._telemetry.propagation",
)
CLIENT_MODULES = [m for m in sorted(MODULES) if m.startswith("trio_mcp_cancel._client.")]


@pytest.mark.parametrize("client_module", [*CLIENT_MODULES, "trio_mcp_cancel.client"])
def test_the_client_imports_no_server_module(client_module: str) -> None:
    reached = closure(client_module)
    allowed = ("trio_mcp_cancel._client.", "trio_mcp_cancel._core.", "trio_mcp_cancel._work.")
    server = {
        m
        for m in reached
        if not m.startswith(allowed)
        and m
        not in (
            "trio_mcp_cancel._wire.names",
            "trio_mcp_cancel._public",
            "trio_mcp_cancel._compat",  # the release check and off switch both ends share
            *CLIENT_TELEMETRY,
        )
    }
    assert not server, f"{client_module} reaches server modules {sorted(server)}"


def test_the_wire_module_depends_on_nothing_but_the_kernel() -> None:
    assert all(
        m.startswith("trio_mcp_cancel._core.") for m in closure("trio_mcp_cancel._wire.names")
    )


def test_core_holds_the_kernel_only() -> None:
    core = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith("trio_mcp_cancel._core.")}
    kernel = {"context", "errors", "events", "namespace", "ratelog", "registry", "request"}
    kernel |= {"table", "validation"}
    assert core == kernel


def test_backend_protocols_depend_on_no_implementation() -> None:
    reached = closure("trio_mcp_cancel.backends.base")
    assert not reached & {"trio_mcp_cancel.backends.memory", "trio_mcp_cancel.backends.redis"}
    assert not any(m.startswith("trio_mcp_cancel.transports") for m in reached)


@pytest.mark.parametrize(
    "value",
    ["plain", "two words", "caf\u00e9", " padded ", "tab\there", "\u6771\u4eac/\u5730\u56f3", ""],
)
def test_a_header_value_the_client_encodes_is_what_the_server_decodes(value: str) -> None:
    encoded = wire.encode_header_value(value)
    assert encoded.isascii() and encoded.isprintable()
    assert wire.decode_header_value(encoded) == value


def test_the_modern_era_errors_are_the_versions_codes() -> None:
    from trio_mcp_cancel._wire import versions

    assert wire.MODERN_ERRORS == {
        versions.HEADER_MISMATCH,
        versions.MISSING_CLIENT_CAPABILITY,
        versions.UNSUPPORTED_PROTOCOL_VERSION,
    }
