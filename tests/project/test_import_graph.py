"""The package's shape: no import cycle, no private name imported across modules, small classes.

The graph is built with :mod:`ast` over ``trio_mcp_cancel/**/*.py`` (no
import runs): every ``import`` / ``from ... import`` counts, at module level,
inside functions and under ``if TYPE_CHECKING:`` alike, because a cycle held
by a function-level or type-only import is still two modules that cannot be
understood (or moved) one without the other.  Relative imports are resolved
against the importing module's package; ``from . import x`` counts as an
import of the submodule ``x`` when it is one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs

from _support.repo_paths import ROOT as REPO

PACKAGE = "trio_mcp_cancel"
ROOT = REPO / PACKAGE
MAX_CLASS_LINES = 400


@attrs.frozen
class Import:
    importer: str
    module: str
    names: tuple[str, ...]
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(module: str) -> bool:
    return (ROOT.parent / module.replace(".", "/") / "__init__.py").exists()


def is_module(module: str) -> bool:
    path = ROOT.parent / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def resolve(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = importer if is_package(importer) else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports() -> Iterator[Import]:
    for path in sorted(ROOT.rglob("*.py")):
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(importer, alias.name, (), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                module = resolve(importer, node)
                names = tuple(alias.name for alias in node.names)
                yield Import(importer, module, names, node.lineno)


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module_name(p): set() for p in ROOT.rglob("*.py")}
    for imp in imports():
        if not imp.module.startswith(PACKAGE):
            continue
        targets = {imp.module}
        # ``from . import surface``: the submodule is what is imported.
        targets |= {f"{imp.module}.{n}" for n in imp.names if is_module(f"{imp.module}.{n}")}
        for target in targets:
            if target != imp.importer and target in edges:
                edges[imp.importer].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_relative_submodule_and_function_level_imports() -> None:
    edges = graph()
    # relative: ``from .jsonrpc import ...`` in the dispatcher
    assert "trio_mcp_cancel._wire.jsonrpc" in edges["trio_mcp_cancel._protocol.dispatcher"]
    # a submodule through its package: ``from . import handlers, surface``
    assert "trio_mcp_cancel._protocol.surface" in edges["trio_mcp_cancel._protocol.methods"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_protocol_layer_has_no_import_cycle() -> None:
    protocol = f"{PACKAGE}._protocol"
    edges = {
        module: {t for t in targets if t.startswith(protocol)}
        for module, targets in graph().items()
        if module.startswith(protocol)
    }
    assert cycles(edges) == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def private_imports(importer_prefix: str = PACKAGE) -> list[str]:
    return [
        f"{imp.importer}:{imp.line} imports {name} from {imp.module}"
        for imp in imports()
        if imp.module.startswith(PACKAGE) and imp.importer.startswith(importer_prefix)
        for name in imp.names
        if name.startswith("_")
        and not name.startswith("__")
        # a private module is a package's own business: ``from . import _breaker``
        and not is_module(f"{imp.module}.{name}")
    ]


def test_the_protocol_layer_imports_no_private_name_from_another_module() -> None:
    assert private_imports(f"{PACKAGE}._protocol") == []


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private_imports() == []


def test_no_module_imports_at_the_bottom_of_the_file() -> None:
    late = []
    for path in sorted(ROOT.rglob("*.py")):
        body = ast.parse(path.read_text()).body
        seen_code = False
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                if seen_code:
                    late.append(f"{module_name(path)}:{node.lineno}")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                seen_code = True
    assert late == []


def classes() -> Iterator[tuple[str, int]]:
    for path in sorted(ROOT.rglob("*.py")):
        prefix = module_name(path).removeprefix(PACKAGE + ".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                yield f"{prefix}.{node.name}", node.end_lineno - node.lineno + 1


def test_no_class_is_over_400_lines() -> None:
    large = [f"{name}: {lines} lines" for name, lines in classes() if lines > MAX_CLASS_LINES]
    assert large == []


def test_the_class_sizes_are_read() -> None:
    sizes = dict(classes())
    assert 100 < sizes["_core.registry.Registry"] <= MAX_CLASS_LINES


def package_of(module: str) -> str:
    """The top-level subpackage (or module) of the library *module* belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2])


#: The one door out of the protocol layer: ``McpServer.run()`` imports the runner when
#: called (and its option names), so a server can run itself; nothing else goes up.
RUN_DOOR = (f"{PACKAGE}._protocol.server", f"{PACKAGE}._run")
#: ... and ``McpServer.mount()``/``proxy()``, which import the gateway (a client) when called.
MOUNT_DOOR = (f"{PACKAGE}._protocol.mounting", f"{PACKAGE}._gateway")


def package_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for importer, targets in graph().items():
        source = package_of(importer)
        edges.setdefault(source, set())
        for target in targets:
            if (importer, package_of(target)) in (RUN_DOOR, MOUNT_DOOR):
                continue
            if package_of(target) != source:
                edges[source].add(package_of(target))
    return edges


def test_no_two_packages_import_each_other() -> None:
    """The layers (``_core`` < ``_wire`` < ``backends``/``_protocol`` < ``_tasks`` <
    transports) form no cycle as packages either, not only as modules."""
    edges = package_graph()
    edges.pop(PACKAGE, None)  # the root's faces import everything by design
    for targets in edges.values():
        targets.discard(PACKAGE)
    assert cycles(edges) == []


def test_the_wire_vocabulary_imports_only_the_kernel() -> None:
    wire = f"{PACKAGE}._wire"
    outside = {
        target
        for module, targets in graph().items()
        if module.startswith(wire)
        for target in targets
        if not target.startswith((wire, f"{PACKAGE}._core"))
    }
    assert outside == set()


def test_the_protocol_layer_imports_no_extension_transport_or_backend_implementation() -> None:
    protocol = f"{PACKAGE}._protocol"
    banned = (f"{PACKAGE}._tasks", f"{PACKAGE}.transports", f"{PACKAGE}.backends.redis")
    found = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module.startswith(protocol)
        for target in targets
        if target.startswith(banned)
    )
    assert found == []


def test_the_protocol_layer_opens_no_nursery() -> None:
    """``_protocol`` is I/O-free: work that outlives a request (tasks) runs in an
    extension's service, which a transport starts."""
    opened = []
    for path in sorted((ROOT / "_protocol").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "open_nursery":
                opened.append(f"{path.name}:{node.lineno}")
    assert opened == []
