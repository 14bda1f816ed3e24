"""The decoder registry: every method found once in bpd/decoding/methods/, the torch-free view of them that
bpd.config.methods reads from their source agreeing with what the registry imports (names, roles, labels, order),
each filling the same row columns; the exact == greedy property of tests/test_decoding.py runs every exact method
it holds."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from bpd.config import BenchConfig, CriterionConfig, DecodeConfig, RescoreConfig
from bpd.config.methods import (
    DECODE_METHODS,
    MethodDeclarationError,
    MethodInfo,
    Role,
    methods_of,
    read_methods,
    role_of,
)
from bpd.decoding.method import RoundOptions, Sweep
from bpd.decoding.methods.greedy import Greedy
from bpd.decoding.registry import METHODS, checked, discover
from bpd.decoding.spec import COLUMNS, RECORD, DecodeSpec, bench_specs, decode_specs, specs_for

#: A sweep that asks every method for something.
EVERYTHING = Sweep((1, 2, 4), (CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)), naive_greedy=True,
                   beam_size=3, trees=("3x2", "beam2"), rescore=(RescoreConfig(2, 0.5),), draft=True)


def test_registry_implements_the_config_catalog_in_its_order():
    assert tuple(METHODS) == tuple(DECODE_METHODS)
    assert all(m.name == name for name, m in METHODS.items())
    assert [(m.name, m.role, m.label, m.order) for m in METHODS.values()] == [
        (name, info.role, info.label, info.order) for name, info in DECODE_METHODS.items()]
    orders = [m.order for m in METHODS.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    roles = [m.role for m in METHODS.values()]
    assert roles == sorted(roles), "tables list methods by role: keep the catalog in role order"
    assert methods_of(Role.REFERENCE) == ["greedy"]  # one reference: every ratio's denominator
    assert role_of("reference") is None and role_of(None) is None  # rows no decoding method made


def test_every_method_fills_the_same_row_columns():
    specs = specs_for(EVERYTHING)
    assert {s.method for s in specs} == set(METHODS), "every method's sweep must answer a sweep asking for it"
    assert len({s.name for s in specs}) == len(specs), "decoder names must be unique"
    common = set(RoundOptions().columns())
    for s in specs:
        assert list(s.columns()) == ["decoder", "method", *COLUMNS], s.name
        assert list(s.record()) == ["method", *RECORD], s.name
        own = set(s.options.columns()) - common
        assert own == set(s.entry.own_columns), s.name
        assert s.rounds == (s.columns()["criterion"] is not None) and s.columns()["k"] == s.k


def test_evaluation_and_bench_sweeps():
    """The evaluation decodes every minimum block size and k = 1 only as plain exact; the bench times l = 1 at
    every k and no beam; both start with greedy."""
    crits = [CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)]
    ev = decode_specs(DecodeConfig(ks=[1, 2], beam_size=2, criteria=crits), 4)
    assert [s.name for s in ev] == ["greedy", "beam2_a0.6", "blockwise_k1_exact", "blockwise_k2_exact",
                                    "blockwise_k2_exact_l2", "blockwise_k2_topk2"]
    bench = bench_specs(BenchConfig(criteria=crits, naive_greedy=True), [1, 2])
    assert [s.name for s in bench] == ["greedy", "naive_greedy", "blockwise_k1_exact", "blockwise_k2_exact",
                                       "blockwise_k1_topk2", "blockwise_k2_topk2"]
    assert bench_specs(BenchConfig(criteria=crits[:1]), [2], draft=True)[-1].name == "draft_k2_exact"


def test_bad_specs_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="unknown decoding method 'nope'"):
        DecodeSpec("nope")
    with pytest.raises(ValueError, match="'greedy' takes the options none"):
        DecodeSpec("greedy", k=2)
    with pytest.raises(ValueError, match="4 deep"):
        DecodeSpec("tree", k=4, tree="2x2x2x2")
    with pytest.raises(ValueError, match="unknown acceptance criterion"):
        DecodeSpec("draft", k=2, criterion="vibes")
    with pytest.raises(ValueError, match="rescore_beam >= 1"):
        DecodeSpec("rescored", k=2)
    with pytest.raises(ValueError, match="either a BeamOptions or its option values"):
        DecodeSpec("beam", RoundOptions())


def test_the_catalog_is_read_without_torch():
    """The report and configs see every method without importing torch (bpd.config is the lowest layer)."""
    code = ("import sys; from bpd.config.methods import DECODE_METHODS; "
            "assert 'torch' not in sys.modules and 'bpd.decoding' not in sys.modules; print(list(DECODE_METHODS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == repr(list(DECODE_METHODS))


METHOD = """
    from bpd.decoding.method import Method, Role


    class Helper:
        size = 3  # not a method: neither a Method subclass nor a declaration


    class Mine(Method):
        name = "mine"
        role = Role.BEYOND
        label = "my method"
        order: int = 70
"""


def write_methods(tmp_path, **modules: str):
    folder = tmp_path / "methods"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""Methods."""\n')
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder


def test_declarations_are_read_from_the_source(tmp_path):
    other = METHOD.replace('"mine"', '"first"').replace("BEYOND", "CHAIN").replace("70", "5")
    assert read_methods(write_methods(tmp_path, mine=METHOD, other=other)) == {
        "first": MethodInfo(Role.CHAIN, "my method", 5), "mine": MethodInfo(Role.BEYOND, "my method", 70)}


@pytest.mark.parametrize("edit, message", [
    (('        label = "my method"\n', ""), r"mine.py:\d+: class Mine declares no label: every decoding method sets"),
    (('"my method"', "LABEL"), r"class Mine: `label = LABEL` must be a literal str"),
    (("Role.BEYOND", '"beyond"'), r"`role = 'beyond'` must be one of Role.REFERENCE, .*Role.BEYOND"),
    (("Role.BEYOND", "Role.FAVOURITE"), r"must be one of Role"),
    (("order: int = 70", "order = 7.5"), r"`order = 7.5` must be a literal int"),
    (("class Mine(Method)", "class Mine(Base)"), None),  # declares name: still a method, read the same
])
def test_a_method_without_literal_declarations_is_refused_with_the_fix(tmp_path, edit, message):
    folder = write_methods(tmp_path, mine=METHOD.replace(*edit))
    if message is None:
        assert list(read_methods(folder)) == ["mine"]
        return
    with pytest.raises(MethodDeclarationError, match=message):
        read_methods(folder)


def test_method_modules_declare_distinct_methods(tmp_path):
    with pytest.raises(MethodDeclarationError, match="helpers.py declares no decoding method"):
        read_methods(write_methods(tmp_path / "a", mine=METHOD, helpers="def helper():\n    return 1\n"))
    with pytest.raises(MethodDeclarationError, match="the method name 'mine' is also declared in"):
        read_methods(write_methods(tmp_path / "b", mine=METHOD, copy=METHOD.replace("70", "80")))
    with pytest.raises(MethodDeclarationError, match="mine.py:.*order = 70 is also that of 'copy'"):
        read_methods(write_methods(tmp_path / "c", mine=METHOD, copy=METHOD.replace('"mine"', '"copy"')))


def test_the_registry_refuses_methods_that_disagree_with_their_source():
    """What the registry imports must be what bpd.config.methods read: e.g. a method subclassing another one
    without declaring its own values is caught at import."""
    found = discover()
    assert [type(m) for m in checked(found).values()] == [type(m) for m in METHODS.values()]

    class Relabelled(Greedy):
        label = "greedy, relabelled"

    with pytest.raises(RuntimeError, match="disagree with those bpd.config.methods reads from their source"):
        checked([Relabelled(), *found[1:]])
    with pytest.raises(RuntimeError, match="every name once"):
        checked([*found, Relabelled()])
