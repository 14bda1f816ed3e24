"""What ruff does not check: no function in bpd/ takes more than ``MAX_PARAMS`` parameters (issue 64)."""

from __future__ import annotations

import ast
from pathlib import Path

BPD = Path(__file__).resolve().parents[1] / "bpd"
MAX_PARAMS = 8
#: (file under bpd/, qualified name): functions whose argument list is someone else's to define. transformers'
#: ``custom_generate`` calls ``generate`` by keyword with ``GenerationMixin.generate``'s names.
EXTERNAL = {("export/hf_blockwise.py", "generate")}


def parameter_counts(tree: ast.Module) -> dict[str, tuple[int, int]]:
    """Every function's (parameter count, line) by qualified name (``Class.method``, ``outer.inner``): ``*args``
    and ``**kwargs`` count one each, a method's ``self`` or ``cls`` none."""
    out: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                a = child.args
                positional = [*a.posonlyargs, *a.args]
                n = len(positional) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
                if isinstance(node, ast.ClassDef) and positional and positional[0].arg in ("self", "cls"):
                    n -= 1
                out[prefix + child.name] = (n, child.lineno)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def all_counts() -> dict[tuple[str, str], tuple[int, int]]:
    return {(path.relative_to(BPD).as_posix(), name): count
            for path in sorted(BPD.rglob("*.py"))
            for name, count in parameter_counts(ast.parse(path.read_text(encoding="utf-8"))).items()}


def test_no_function_takes_more_than_eight_parameters():
    long = [f"bpd/{path}:{line} {name} takes {n}" for (path, name), (n, line) in all_counts().items()
            if n > MAX_PARAMS and (path, name) not in EXTERNAL]
    assert not long, (
        f"functions with more than {MAX_PARAMS} parameters (self/cls not counted):\n  " + "\n  ".join(long) +
        "\nGroup the parameters that travel together into a small typed dataclass (frozen where possible) named for "
        "what it holds (as bpd.bench.timing.TimingPolicy or bpd.decoding.timed.Passes do), or pass an object the "
        "caller already has; not **kwargs or a dict. Only a signature someone else defines goes into EXTERNAL in "
        "tests/test_style.py.")


def test_the_allowed_long_lists_still_exist():
    counts = all_counts()
    for key in EXTERNAL:
        assert key in counts and counts[key][0] > MAX_PARAMS, f"{key} needs no exception now: drop it from EXTERNAL"


def test_the_count_skips_self_and_counts_star_arguments():
    tree = ast.parse("class A:\n    def f(self, a, *b, c, **d):\n        def g(x, y=1): ...\n"
                     "def h(p, /, q): ...\n")
    assert parameter_counts(tree) == {"A.f": (4, 2), "A.f.g": (2, 3), "h": (2, 4)}
