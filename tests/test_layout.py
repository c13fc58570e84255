"""The architecture as code: each concept in its folder, imports only downwards, no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "mtcore"

# Lowest first. A module may import its own layer (sideways, within a folder or layer) or a lower one.
LAYERS = {
    "errors": 1, "console": 1, "checks": 1, "config": 1, "runs": 1, "data": 1, "hardware": 1,
    "nmt": 2, "tracking": 2,
    "cleaning": 3, "embedding": 3, "alignment": 3, "distributed": 3,
    "backtranslation": 4,
    "translate": 5, "evaluate": 5, "ui": 5, "report": 5, "export": 5, "__init__": 5,  # `python -m mtcore.X` shims
    "cli": 6,  # the console script and the entry points' code: argument parsing and printing
}


def concept(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    base = PKG.parent / dotted.replace(".", "/")
    return base.with_suffix(".py").exists() or base.is_dir()


def imports(path: Path) -> set[str]:
    """mtcore modules imported anywhere in the file (function-level imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mtcore"):
            subs = {f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")}
            found |= subs if len(subs) == len(node.names) else subs | {node.module}  # `from pkg import submodule`
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mtcore")}
    return {m for m in found if m != "mtcore"}


MODULES = {module_name(p): imports(p) for p in sorted(PKG.rglob("*.py"))}


def test_every_concept_has_a_layer():
    assert {concept(m) for m in MODULES} <= set(LAYERS), {concept(m) for m in MODULES} - set(LAYERS)


def test_flat_package_is_gone():
    """Only the layer-1 modules and the `python -m mtcore.X` shims stand at the top; the rest lives in folders."""
    top = {p.stem for p in PKG.glob("*.py")}
    assert top <= {"__init__", "errors", "console", "checks", "config", "runs", "hardware", "translate", "evaluate", "ui", "report",
                   "export"}, top


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    mine = LAYERS[concept(module)]
    up = [m for m in MODULES[module] if LAYERS.get(concept(m), 0) > mine]
    assert not up, f"{module} (layer {mine}) imports a higher layer: {up}"


def test_no_import_cycles():
    graph = {m: {d for d in deps if d in MODULES and d != m} for m, deps in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if not state.get(nxt):
                visit(nxt)
        stack.pop()
        state[node] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m)


def third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return found


def test_only_the_tracking_package_talks_to_mlflow():
    """Every stage tracks through `mtcore.tracking.run.tracked_run`/`open_run`: one place opens, tags and
    ends runs (FAILED on error), so no module outside `mtcore/tracking/` imports mlflow."""
    outside = sorted(module_name(p) for p in PKG.rglob("*.py")
                     if "mlflow" in third_party_imports(p) and concept(module_name(p)) != "tracking")
    assert outside == []
    assert "mlflow" in third_party_imports(PKG / "tracking" / "run.py")  # the check sees imports at all
