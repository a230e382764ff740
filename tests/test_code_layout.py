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
