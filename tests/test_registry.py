"""The decoder registry: every method named once in the config's catalog and implemented once in the registry, in
the same order, each filling the same row columns; the exact == greedy property of tests/test_decoding.py runs
every exact method it holds."""

from __future__ import annotations

import pytest

from bpd.config import BenchConfig, CriterionConfig, DecodeConfig, RescoreConfig
from bpd.config.methods import DECODE_METHODS, Role, methods_of, role_of
from bpd.decoding.method import RoundOptions, Sweep
from bpd.decoding.registry import METHODS
from bpd.decoding.spec import COLUMNS, RECORD, DecodeSpec, bench_specs, decode_specs, specs_for

#: A sweep that asks every method for something.
EVERYTHING = Sweep((1, 2, 4), (CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)), naive_greedy=True,
                   beam_size=3, trees=("3x2", "beam2"), rescore=(RescoreConfig(2, 0.5),), draft=True)


def test_registry_implements_the_config_catalog_in_its_order():
    assert tuple(METHODS) == tuple(DECODE_METHODS)
    assert all(m.name == name for name, m in METHODS.items())
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
