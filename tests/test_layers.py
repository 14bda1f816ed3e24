"""Layers that only point down (docs/architecture.md): every import inside bpd/ goes to its own layer or a lower
one, and the top-level packages and modules of bpd/ import each other without cycles.

Imports inside functions count too (a lazy import is still a dependency); only those under
``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BPD = Path(__file__).resolve().parents[1] / "bpd"

#: Each top-level package or module of bpd/ (``bpd.<unit>``) and its layer; lower rank = lower layer. An import may
#: point to the same layer or a lower one; two layers of the same rank (decoding, training) stay apart.
LAYERS: dict[str, tuple[int, tuple[str, ...]]] = {
    # Plain values and helpers that import nothing of bpd: the configs, metrics, machine load, progress bars, the
    # integrity checks and atomic writes every layer's artifacts use.
    "base": (0, ("config", "metrics", "machine_load", "progress", "integrity")),
    "data": (1, ("data",)),
    "models": (2, ("models",)),
    "decoding": (3, ("decoding",)),
    "training": (3, ("training",)),
    # Where and how a process runs (devices, ranks, locks) and where its rows go: they know distributed training.
    "runtime": (4, ("runtime", "locks", "tracking")),
    "tasks": (5, ("tasks",)),
    # What runs a task: stages and their products, evaluation, the benchmarks (bench/, its paired speedup
    # statistics included: evaluation rows use them too), export, translating your own text.
    "stages": (6, ("stages", "targets", "shipped", "evaluate", "bench", "export", "translator")),
}

#: Imports that break the rule and are fine, each with why: (importing module, imported module). Keep it short.
ALLOWED: set[tuple[str, str]] = {
    # Jobs sharing a compiled-step store build each package once: the stages' lock file (its FileLock needs none of
    # the distributed helpers the rest of bpd.locks uses).
    ("bpd.decoding.step_store", "bpd.locks"),
}

LAYER_OF = {unit: name for name, (_, units) in LAYERS.items() for unit in units}


def module_name(path: Path) -> str:
    parts = path.relative_to(BPD.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """``bpd.decoding.spec`` -> ``decoding``; ``bpd`` itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, module: str, is_package: bool) -> list[str]:
    """The bpd modules a module imports, anywhere in it except under ``if TYPE_CHECKING:``."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                pkg = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*pkg, *([base] if base else [])])
            # ``from bpd import machine_load`` imports the module bpd.machine_load.
            out.extend(f"{base}.{a.name}" if base == "bpd" else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return [m for m in out if m == "bpd" or m.startswith("bpd.")]


def import_graph() -> dict[str, set[str]]:
    """Module -> the bpd modules it imports, for every module under bpd/."""
    graph = {}
    for path in sorted(BPD.rglob("*.py")):
        name = module_name(path)
        graph[name] = set(imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py"))
    return graph


GRAPH = import_graph()


def test_every_unit_has_a_layer():
    units = {unit(m) for m in GRAPH} - {""}
    assert not units - set(LAYER_OF), f"add {sorted(units - set(LAYER_OF))} to LAYERS in tests/test_layers.py"


def upward_imports() -> list[str]:
    bad = []
    for module, targets in sorted(GRAPH.items()):
        src = unit(module)
        for target in sorted(targets):
            dst = unit(target)
            if not src or not dst or src == dst or (module, target) in ALLOWED:
                continue
            (a, ra), (b, rb) = (LAYER_OF[src], LAYERS[LAYER_OF[src]][0]), (LAYER_OF[dst], LAYERS[LAYER_OF[dst]][0])
            if rb > ra or (rb == ra and a != b):
                bad.append(f"{module} ({a}) imports {target} ({b})")
    return bad


def test_imports_point_down():
    assert upward_imports() == []


def unit_cycles() -> list[str]:
    """Cycles among the top-level units (``config -> training -> config``), one per back edge found."""
    edges: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            if unit(module) and unit(target) and unit(module) != unit(target) and (module, target) not in ALLOWED:
                edges.setdefault(unit(module), set()).add(unit(target))
    cycles: list[str] = []
    state: dict[str, str] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join([*path[path.index(nxt):], nxt]))
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            walk(node, [node])
    return cycles


def test_no_cycles_between_top_level_units():
    assert unit_cycles() == []


@pytest.mark.parametrize("source, expected", [
    ("from bpd.training.checkpoint import state_file\n", ["bpd.training.checkpoint"]),
    ("def f():\n    import bpd.tracking\n", ["bpd.tracking"]),
    ("from bpd import machine_load\n", ["bpd.machine_load"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bpd.stages import x\nelse:\n    import bpd.tasks\n",
     ["bpd.tasks"]),
    ("from .spec import DecodeSpec\n", ["bpd.decoding.spec"]),
])
def test_imports_are_found(source, expected):
    """The checker sees lazy and relative imports and skips type-checking-only ones."""
    assert imported(ast.parse(source), "bpd.decoding.timed", False) == expected
