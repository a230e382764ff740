"""One of each: the size parser, the SIGTERM handler, the progress display, the size
formatter, the shared table helpers and the plotting code each live in one obvious place. Checked on the
source's syntax trees, so a second copy fails here."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "smartio"


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text(), str(p)) for p in sorted(SRC.rglob("*.py"))}


def _defs(name_has: str) -> list[str]:
    return [f"{mod}:{node.name}" for mod, tree in _modules().items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and name_has in node.name.lower()]


def _calls(attr: str) -> list[str]:
    """Modules calling X.attr(...) or attr(...)."""
    out = []
    for mod, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name == attr and mod not in out:
                    out.append(mod)
    return out


def test_sizes_are_parsed_in_one_place():
    assert _defs("parse_size") == ["units.py:parse_size"]


def test_sizes_in_mib_are_formatted_in_one_place():
    assert _defs("mib") == ["units.py:mib"]


def test_signal_handlers_are_installed_in_one_place():
    # signal.signal() installs handlers; only smartio.signals does (sigterm_as_interrupt).
    assert _calls("signal") == ["signals.py"]


def test_progress_is_shown_by_one_mechanism():
    assert _defs("progress") == ["progress.py:Progress"] and _defs("tick") == []


def test_no_private_helpers_imported_across_modules():
    private = [f"{mod}: {alias.name} from {node.module}" for mod, tree in _modules().items()
               for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module != "__future__"
               for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert private == []


def test_figures_are_drawn_and_saved_by_one_module():
    # Every figure is drawn with report/plots.py's helpers and saved by its save().
    pyplot = [mod for mod, tree in _modules().items() for node in ast.walk(tree)
              if isinstance(node, (ast.Import, ast.ImportFrom))
              and (any("pyplot" in (a.name or "") for a in node.names)
                   or "pyplot" in (getattr(node, "module", "") or ""))]
    assert pyplot == ["report/plots.py"]
    assert _calls("savefig") == ["report/plots.py"]


# ---------------------------------------------------------------------------------------------------------------
# Imports: no loops between modules, and packages import only downwards in LAYERS.

# The packages of src/smartio from the top: each may import its own layer's and the layers below it. The experiments
# sit below the CLI and the registry that lists them: launch uses sqlite's filesystem set-up and storebench's
# statistics and targets; sqlite and qasio use storebench's statistics; all of them use compare's plan, guest and
# host runner. iosched (the module's contract and the policy twin) sits beside flashdev (flashdev's model imports
# iosched's policy). The root package (smartio/__init__.py: the version) counts as the bottom.
LAYERS: list[tuple[str, ...]] = [
    ("cli", "__main__"),
    ("registry",),
    ("fleet",),
    ("launch",),
    ("sqlite", "qasio"),
    ("storebench",),
    ("compare",),
    ("testbed",),
    ("trace",),
    ("flashdev", "iosched"),
    ("results", "report"),
    ("engine", "blockdev"),
    ("units", "outputs", "progress", "signals", "errors", "cache"),
]
# Upward imports allowed: none. (The model check, which reads trace/'s events and asks iosched/'s policy twin, lives
# in trace/ for that reason.)
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the smartio modules it imports, at module level or inside a function (`import smartio.x`,
    `from smartio.x import y`, `from smartio import x`, relative imports): a name imported from a package that is a
    submodule of it counts as that submodule."""
    paths = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}

    def known(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(known(a.name) for a in node.names if a.name.split(".")[0] == "smartio")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != "smartio":
                    continue
                out.update(f"{source}.{a.name}" if f"{source}.{a.name}" in paths else known(source)
                           for a in node.names)
        graph[mod] = out - {mod, ""}
    return graph


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_loops_between_modules():
    assert _loops(_import_graph()) == []


def test_import_graph_sees_every_form_of_import():
    graph = _import_graph()
    assert "smartio.launch.measure" in graph["smartio.launch.commands"]        # from smartio.x import y
    assert "smartio.launch.replay" in graph["smartio.launch.commands"]
    assert "smartio.launch.background" in graph["smartio.launch.measure"]     # from smartio.launch import background


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_has_a_layer():
    packages = {_package(m) for m in _import_graph()} - {""}
    assert packages <= {p for layer in LAYERS for p in layer}


def test_imports_run_down_the_layers():
    rank = {p: i for i, layer in enumerate(LAYERS) for p in layer}
    upward = sorted((mod, dep) for mod, deps in _import_graph().items() for dep in deps
                    if _package(dep) and rank.get(_package(dep), 0) < rank.get(_package(mod), 0))
    assert [x for x in upward if x not in ALLOWED_UPWARD] == []
