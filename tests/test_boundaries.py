"""Package boundaries: the trainer uses the SDK's chat layer, never the model server; no import
cycles among the packages' modules, counting every import (inside functions and under
``TYPE_CHECKING`` too: a cycle is a design bug even when it is lazy or for types only)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The packages whose modules must not import one another in a circle: the SDK, the trainer and
#: every task package in envs/.
PACKAGES = [ROOT / "agentrl_envs", ROOT / "agentrl_trainer"] + sorted(
    p for p in ROOT.glob("envs/*/agentrl_env_*") if p.is_dir() and (p / "__init__.py").is_file()
)


def imports(path: Path) -> list[tuple[str, int]]:
    """``(module, level)`` of every import in a file (``level`` > 0: relative)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level))
    return found


def modules(packages: list[Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``packages`` (a package is its ``__init__``)."""
    out = {}
    for package in packages:
        for f in package.rglob("*.py"):
            parts = [package.name, *f.relative_to(package).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def import_graph(packages: list[Path]) -> dict[str, set[str]]:
    """Each module -> the modules of ``packages`` it imports anywhere in its text. ``from P import
    n`` names the module ``P.n`` when there is one, else ``P``; an import of a module outside the
    packages is left out."""
    known = modules(packages)
    graph: dict[str, set[str]] = {}
    for name, f in known.items():
        here = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        targets = []
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]) if node.level else node.module or ""
                base = base.rstrip(".")
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        deps = set()
        for target in targets:
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()  # a name inside a module: the module
            if parts and ".".join(parts) != name:
                deps.add(".".join(parts))
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_counts_imports_inside_functions_and_for_types(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = import_graph([pkg])
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.a"}
    assert cycles(graph) == [{"pkg.a", "pkg.b", "pkg.sub.c"}]


def test_no_import_cycle() -> None:
    """None at all, TYPE_CHECKING imports included (the chat layer's decode batches name their
    engine through the DecodeEngine protocol, not by importing it)."""
    graph = import_graph(PACKAGES)
    assert len(graph) > 150  # every module was read: the SDK, the trainer, the tasks
    found = [sorted(c) for c in cycles(graph)]
    assert not found, f"import cycles (move the shared names down a floor): {found}"


def test_the_trainer_imports_the_chat_layer_not_the_model_server() -> None:
    files = sorted((ROOT / "agentrl_trainer").rglob("*.py"))
    assert files
    used = {m for f in files for m, level in imports(f) if level == 0 and m.startswith("agentrl_envs")}
    assert any(m.startswith("agentrl_envs.chat") for m in used)
    assert not [m for m in used if m.startswith("agentrl_envs.models")], used


def test_the_chat_layer_does_not_import_the_server_and_launch_does_not_import_server() -> None:
    for f in sorted((ROOT / "agentrl_envs" / "chat").glob("*.py")):
        for module, level in imports(f):
            assert "models" not in module.split("."), f"{f.name} imports {module} (level {level})"
    # server.py uses launch's flags; launch starts the server as a process: one direction only
    graph = import_graph([ROOT / "agentrl_envs"])
    assert "agentrl_envs.models.server" not in graph["agentrl_envs.models.launch"]
