"""The corpus builders import nothing from bpd (corpora/__init__.py says why): every import of every module under
corpora/, lazy ones inside functions and ones under ``if TYPE_CHECKING:`` included, is checked with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORPORA = Path(__file__).resolve().parents[2] / "corpora"


def bpd_imports(source: str) -> list[str]:
    """The bpd modules a module's source imports, anywhere in it (a relative import cannot leave corpora)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return [m for m in out if m == "bpd" or m.startswith("bpd.")]


MODULES = sorted(CORPORA.rglob("*.py"))


def test_the_modules_are_found():
    names = {p.relative_to(CORPORA).as_posix() for p in MODULES}
    assert {"__init__.py", "debian/build.py", "debian/archive.py", "photos/build.py", "ding.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(CORPORA).as_posix())
def test_no_module_imports_bpd(path):
    found = bpd_imports(path.read_text(encoding="utf-8"))
    assert not found, f"corpora/{path.relative_to(CORPORA).as_posix()} imports {found}: corpora must not import bpd"


@pytest.mark.parametrize("source, expected", [
    ("import bpd\n", ["bpd"]),
    ("import os, bpd.data.store as s\n", ["bpd.data.store"]),
    ("from bpd import config\n", ["bpd"]),
    ("def f():\n    from bpd.data.images import SPLITS\n", ["bpd.data.images"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bpd.config import TaskConfig\n", ["bpd.config"]),
    ("import bpdx\nfrom corpora.debian import ArchiveError\nfrom . import layout\n", []),
])
def test_the_checker_finds_every_kind_of_import(source, expected):
    assert bpd_imports(source) == expected
