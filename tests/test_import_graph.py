"""The house has no import circles and no import from a lower layer up to a higher one.

The graph is read from the source with the standard library's :mod:`ast` (nothing is imported):
every ``import`` / ``from ... import`` anywhere in a module counts, at module level, inside a
function, under ``TYPE_CHECKING`` or in a ``try``, so an import moved into a function to hide a
circle is still an arrow. ``from package import name`` is an arrow to ``package.name`` when that
is a module of the tree, else to ``package`` itself.

The layers follow ``shared/docs/layout.md`` (each layer uses only the layers below it) and the
floors that ``farm-studio look`` draws, from the bottom up.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = "polysql_ray"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: The layers of the house, from the bottom up, as ``farm-studio look`` draws its floors. A module
#: may import modules of its own layer and of the layers below it; an import into a higher layer
#: is an arrow back up. Each entry names a top-level module or sub-package of ``polysql_ray``.
#: ``config`` (the composed configuration and its checks) sits below ``pipeline``, which reads
#: and validates it; ``__main__`` composes it and starts the pipeline. ``suites`` (distilled
#: database suites) uses datasets, replication, engines and comparison; config validates
#: ``suite.*`` with it, and the pipeline will run suite EX with it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "lazy", "faults", "extras", "redaction", "resolvers", "engines", "quickstart"),
    ("errors", "datasets"),
    ("replication", "jobs_cli"),
    ("generation",),
    ("comparison", "store"),
    ("suites",),
    ("statistics", "config"),
    ("reporting",),
    ("pipeline",),
    ("__main__",),
)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (anywhere in its body)."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix
                           for a in node.names]
            for target in targets:
                while target and target not in mods:  # import a.b.c of a module a.b
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def room(module: str) -> str:
    """The top-level module or sub-package of ``polysql_ray`` that holds ``module``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> int:
    name = room(module)
    for i, names in enumerate(LAYERS):
        if name in names:
            return i
    raise AssertionError(f"{module}: its room {name!r} is in no layer of LAYERS; add it there")


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from a module to a module of a higher layer."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


@functools.lru_cache(maxsize=1)
def house() -> dict[str, set[str]]:
    """The import graph of ``polysql_ray/`` (read once per session)."""
    return import_graph()


def test_the_graph_is_read():
    """The reader sees the imports the code makes (a reader that saw none would pass anything)."""
    graph = house()
    assert len(graph) > 100
    assert f"{PACKAGE}.pipeline.scheduler" in graph[f"{PACKAGE}.pipeline.driver"]
    # a function-level import is an arrow too (driver._run_locked imports the generation stage)
    assert f"{PACKAGE}.pipeline.generate" in graph[f"{PACKAGE}.pipeline.driver"]
    assert f"{PACKAGE}.engines.base" in graph[f"{PACKAGE}.engines.sqlite"]


def test_the_checks_catch_a_circle_and_an_arrow_up(tmp_path):
    """On a made-up tree, a circle closed by a function-level import and an upward import are found."""
    pkg = tmp_path / PACKAGE
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("")
    (pkg / "engines" / "a.py").write_text("from polysql_ray.engines import b\n")
    (pkg / "engines" / "b.py").write_text("def f():\n    from . import a\n    from polysql_ray import config\n")
    (pkg / "config.py").write_text("")
    graph = import_graph(pkg)
    assert cycles(graph) == [[f"{PACKAGE}.engines.a", f"{PACKAGE}.engines.b"]]
    assert upward(graph) == [(f"{PACKAGE}.engines.b", f"{PACKAGE}.config")]


def test_no_import_circles():
    found = cycles(house())
    print(f"import circles: {len(found)}")
    assert not found, "import circles (move the shared names down, not into a function): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_no_imports_back_up():
    graph = house()
    for mod in graph:
        layer_of(mod)  # every room is placed in a layer
    found = upward(graph)
    print(f"imports back up: {len(found)}")
    assert not found, "imports from a lower layer up: " + "; ".join(f"{a} -> {b}" for a, b in found)
