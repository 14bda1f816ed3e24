"""The decoding methods by name, each with its role beside the others and its label: plain values that configs,
rows and the report (which imports no torch) share; rows and tables ask a method's role here instead of testing
its name.

Each method declares them itself, as literals in its ``Method`` subclass (``name``, ``role``, ``label``, ``order``)
in a module of ``bpd/decoding/methods/``. They are read here from those modules' source, never by importing them:
the method modules need torch, and this is the lowest layer. ``bpd.decoding.registry`` imports the same modules
and refuses to load if what it finds disagrees with what is read here (tests/test_registry.py checks both).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class Role(IntEnum):
    """Where a method stands beside the others (tables list methods in this order)."""

    REFERENCE = 0  # greedy: every speedup, identity and quality ratio is measured against it
    BASELINE = 1  # other decoders without proposals (naive greedy, beam search): references of their own kind
    CHAIN = 2  # the paper's blockwise decoder
    BEYOND = 3  # decoders beyond the paper, also compared with the chain at the same k and criterion


@dataclass(frozen=True)
class MethodInfo:
    role: Role
    label: str  # how tables and figures name it
    order: int  # its place among the methods: evaluations decode and tables list them by it


#: Where the method modules live (``bpd.decoding.methods``).
METHODS_DIR = Path(__file__).resolve().parents[1] / "decoding" / "methods"
#: What every ``Method`` subclass of a method module declares in its class body, as a literal.
DECLARED = ("name", "role", "label", "order")


class MethodDeclarationError(ValueError):
    """A method module whose declarations cannot be read from its source."""


def _base_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _assignments(cls: ast.ClassDef) -> dict[str, ast.expr]:
    """The class body's ``x = value`` and ``x: T = value`` statements, by name."""
    out: dict[str, ast.expr] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            out[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            out[stmt.target.id] = stmt.value
    return out


def _literal(where: str, attr: str, node: ast.expr) -> str | int | Role:
    """One declared value: a string (name, label), an int (order) or ``Role.<MEMBER>`` (role)."""
    if attr == "role":
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Role"
                and node.attr in Role.__members__):
            return Role[node.attr]
        expected = f"one of {', '.join(f'Role.{r}' for r in Role.__members__)}"
    else:
        kind = int if attr == "order" else str
        value = node.value if isinstance(node, ast.Constant) else None
        if type(value) is kind:
            return value
        expected = f"a literal {kind.__name__}"
    raise MethodDeclarationError(f"{where}: `{attr} = {ast.unparse(node)}` must be {expected}: bpd.config.methods "
                                 "reads it from the source without importing the module.")


def read_methods(folder: Path = METHODS_DIR) -> dict[str, MethodInfo]:
    """Every method declared in ``folder``'s modules, by name, in their ``order``.

    A method is a class that subclasses ``Method`` by name or declares any of ``DECLARED``; each must declare all
    of them as literals, and every module must hold at least one (helpers live in ``bpd/decoding/``)."""
    found: dict[str, tuple[MethodInfo, str]] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        classes = 0
        for cls in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            values = _assignments(cls)
            if not any(_base_name(b) == "Method" for b in cls.bases) and not set(DECLARED) & set(values):
                continue
            classes += 1
            where = f"{path}:{cls.lineno}: class {cls.name}"
            missing = [a for a in DECLARED if a not in values]
            if missing:
                raise MethodDeclarationError(
                    f"{where} declares no {', '.join(missing)}: every decoding method sets name, role, label and "
                    "order as literals in its class body (e.g. role = Role.BEYOND, order = 70), which "
                    "bpd.config.methods reads without importing it.")
            name, role, label, order = (_literal(where, a, values[a]) for a in DECLARED)
            if name in found:
                raise MethodDeclarationError(f"{where}: the method name {name!r} is also declared in {found[name][1]}.")
            clash = [n for n, (info, _) in found.items() if info.order == order]
            if clash:
                raise MethodDeclarationError(f"{where}: order = {order} is also that of {clash[0]!r}; give each "
                                             "method its own place.")
            found[name] = (MethodInfo(role, label, order), where)
        if not classes:
            raise MethodDeclarationError(f"{path} declares no decoding method (a Method subclass); modules of "
                                         f"{folder.name}/ are methods only.")
    return {name: info for name, (info, _) in sorted(found.items(), key=lambda item: item[1][0].order)}


#: In the order evaluations decode and tables list them (greedy first: every ratio's reference).
DECODE_METHODS: dict[str, MethodInfo] = read_methods()


def role_of(name: object) -> Role | None:
    """The role of a row's ``method`` (None for rows no decoding method made, e.g. upsampling baselines)."""
    info = DECODE_METHODS.get(name) if isinstance(name, str) else None
    return info.role if info is not None else None


def methods_of(*roles: Role) -> list[str]:
    """The methods of these roles, in registry order."""
    return [name for name, info in DECODE_METHODS.items() if info.role in roles]
