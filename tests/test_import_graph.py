"""The import graph of prmkit/, built with ``ast`` from every import statement (those inside
functions included): no cycles, and no module imports another module's private ``_name``
(ARCHITECTURE.md, "What may import what"). No exceptions are listed here."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "prmkit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """(imported module, imported names) for every import statement of one module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:  # `from package import module`
                    yield sub, []
                else:
                    yield base, [alias.name]


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """({module: modules of prmkit it imports}, private-name imports found)."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private = []
    for name, path in modules.items():
        for target, names in _imports(name, path, modules):
            if target in modules and target != name:
                edges[name].add(target)
            if target.startswith("prmkit") and target != name:
                last = target.rpartition(".")[2]
                for n in names + [last]:
                    if n.startswith("_") and not n.startswith("__"):
                        private.append(f"{name} imports {target}.{n}" if n != last
                                       else f"{name} imports the private module {target}")
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_function_level_imports():
    edges, _ = graph()
    assert "prmkit.models.pypi" in edges["prmkit.models.load"]  # imported inside a function


def test_no_import_cycles():
    edges, _ = graph()
    assert cycles(edges) == []


def test_no_module_imports_another_modules_private_names():
    _, private = graph()
    assert private == []


def test_nothing_imports_the_command_line_entry_point():
    edges, _ = graph()
    assert [m for m, targets in edges.items() if "prmkit.cli" in targets] == []
