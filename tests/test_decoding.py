"""Decoding correctness: every registered exact decoder == greedy as a property, plus the contract's edge cases.

Random untrained models produce many near-ties between logits; a different but mathematically
equivalent evaluation order (a k-token verify pass vs a 1-token greedy step) can flip an argmax at a
tie in float32. The property therefore runs in float64, where that does not happen in practice; the
float32 guarantee is checked separately as "equal except where the greedy logit margin is tiny".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from conftest import random_model, random_src
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpd.config import BeamOptions, CriterionConfig, MethodsConfig, RescoreOptions, parse_tree_shape
from bpd.decoding import (
    DecodeResult,
    beam_decode,
    blockwise_decode,
    criteria,
    greedy_decode,
    naive_greedy_decode,
)
from bpd.decoding.method import Plan, Prepared
from bpd.decoding.methods.blockwise import propose
from bpd.decoding.methods.draft import draft_decode
from bpd.decoding.methods.rescore import NgramLM, Rescorer
from bpd.decoding.methods.tree import TreeShape, build_tree, tree_decode
from bpd.decoding.registry import METHODS
from bpd.decoding.spec import DecodeSpec, specs_for
from bpd.models import HEADS
from bpd.models.kv_cache import KVCache

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def check_contract(res: DecodeResult, batch: int, max_len: int, eos: int) -> None:
    assert len(res.tokens) == len(res.iterations) == len(res.block_sizes) == batch
    for toks, its, blocks in zip(res.tokens, res.iterations, res.block_sizes):
        assert len(toks) <= max_len
        if eos in toks:
            assert toks.index(eos) == len(toks) - 1, "nothing may follow EOS"
        else:
            assert len(toks) == max_len, "a row without EOS must run to max_len"
        assert sum(blocks) == len(toks)
        assert its == len(blocks)
        assert all(b >= 1 for b in blocks)


def check_argmax_chain(model, src: torch.Tensor, tokens: list[list[int]]) -> None:
    """Each output is p_1's argmax chain, recomputed without a cache from BOS + the output itself: nothing
    is prepended (no BOS in the output), dropped or reordered, and every token is the argmax after its prefix."""
    with torch.inference_mode():
        for r, toks in enumerate(tokens):
            if not toks:
                continue
            prefix = torch.tensor([[model.bos_id, *toks[:-1]]])
            h = model.decode(prefix, model.encode(src[r : r + 1]))
            assert model.heads.base_logits(h)[0].argmax(-1).tolist() == toks


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    vocab=st.integers(4, 40),
    k=st.integers(1, 10),
    batch=st.integers(1, 5),
    src_len=st.integers(1, 9),
    max_len=st.integers(1, 30),
    arch=st.sampled_from(list(HEADS)),
    head_noise=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    identity_p1=st.booleans(),
    tree=st.sampled_from(["2", "3x2", "2x1x3", "beam1", "beam2", "beam4", "sparse", "leaf0", "chain+1+21"]),
    tied=st.booleans(),
    first_entries=st.sampled_from([1, 3, 64]),
    precision=st.sampled_from(["float32", "int8"]),
    engine=st.sampled_from(["eager", "static"]),
)
def test_exact_decoders_equal_greedy(seed, vocab, k, batch, src_len, max_len, arch, head_noise, identity_p1, tree,
                                     tied, first_entries, precision, engine):
    """Every registered exact method, with exact acceptance, returns greedy's tokens (``EXACT_OPTIONS`` says how
    each one runs; a new exact method without an entry fails here), on the eager path and on the static path
    (``decode.engine``: methods without one decode eagerly there). Caches that start small grow during a decode
    (``KVCache.first_entries``), and proposal chains may multiply by int8 weights (``proposal_precision``);
    greedy's tokens are checked against uncached argmaxes. The compiled engine runs these same functions through
    AOTInductor (``bpd.decoding.step_store``): ``test_compiled_engine_decodes_as_the_static_one`` checks it on a few
    cases."""
    default_entries, KVCache.first_entries = KVCache.first_entries, first_entries
    try:
        check_exact_decoders(seed, vocab, k, batch, src_len, max_len, arch, head_noise, identity_p1, tree, tied,
                             precision, engine)
    finally:
        KVCache.first_entries = default_entries


def check_exact_decoders(seed, vocab, k, batch, src_len, max_len, arch, head_noise, identity_p1, tree, tied,
                         precision="float32", engine="eager"):
    model = random_model(vocab, k, seed, arch=arch, head_noise=head_noise, identity_p1=identity_p1,
                         heads_tied=tied and HEADS[arch].can_tie)
    model.heads.set_proposal_precision(precision)
    src = random_src(batch, src_len, vocab, seed)
    g = greedy_decode(model, src, max_len=max_len)
    if engine != "eager":  # float64: the static path's padded shapes change no argmax
        assert greedy_decode(model, src, max_len=max_len, engine=engine).tokens == g.tokens
    prepared = Prepared(built={name: build(model, g.tokens, seed) for name, build in AUXILIARY.items()})
    dk = 1 + seed % k  # a decode-time k below the trained k, too
    for kk in {k, dk}:
        for name, method in METHODS.items():
            if not method.exact:
                continue
            assert name in EXACT_OPTIONS, f"the exact method {name!r} needs its entry in EXACT_OPTIONS"
            assert name in AUXILIARY or not method.info.auxiliary, f"{name!r} needs its entry in AUXILIARY"
            options = EXACT_OPTIONS[name](Case(kk, tree))
            if options is None:
                continue
            spec = DecodeSpec(name, engine=engine, **options)
            res = method.decode(model, src, max_len, spec.options, prepared)
            assert res.tokens == g.tokens, spec.name
            check_contract(res, batch, max_len, model.eos_id)
            check_rounds(res, spec)
    check_contract(g, batch, max_len, model.eos_id)
    check_argmax_chain(model, src, g.tokens)


@dataclass
class Case:
    k: int  # decode-time k
    tree: str  # a tree kind of ``tree_shape``


#: Each exact method's options in the property above, at decode-time k, or None where it does not run at that k.
EXACT_OPTIONS: dict[str, Callable[[Case], dict | None]] = {
    "greedy": lambda c: {},
    "naive_greedy": lambda c: {},
    "blockwise": lambda c: {"k": c.k},
    # Tree verification, with a shape no deeper than the k - 1 proposal slots.
    "tree": lambda c: {"k": c.k, "tree": tree_shape(c.tree, c.k - 1)} if c.k > 1 else None,
    "rescored": lambda c: {"k": c.k, "rescored": {"beam": 2, "weight": 1.0}} if c.k > 1 else None,
    "draft": lambda c: {"k": c.k} if c.k > 1 else None,
}


#: What each method with a model of its own is handed in the property above (its ``prepare`` builds it from a task),
#: from the model, greedy's tokens and the seed: an unrelated random draft; a bigram model of half of greedy's
#: outputs (a model of the data, not of these sentences).
AUXILIARY: dict[str, Callable[[Any, list[list[int]], int], Any]] = {
    "draft": lambda model, greedy, seed: random_model(model.cfg.vocab_size, 1, seed + 7, head_noise=0.0),
    "rescored": lambda model, greedy, seed: NgramLM.fit(greedy[: max(1, len(greedy) // 2)], model.cfg.vocab_size,
                                                        model.bos_id),
}


def check_rounds(res: DecodeResult, spec: DecodeSpec) -> None:
    """Rounds and per-position acceptance: blocks of at most k, one decoder call per round (plus the start call
    of methods with rounds), and slot j's proposal accepted exactly in the rounds that kept more than j tokens (a
    block cut at EOS or the length limit counts only what it kept)."""
    assert all(bs <= spec.k for row in res.block_sizes for bs in row)
    assert res.invocations == max(res.iterations) + (1 if spec.rounds else 0)
    blocks = [bs for row in res.block_sizes for bs in row]
    assert res.position_accepted == [sum(bs > j for bs in blocks) for j in range(1, len(res.position_accepted) + 1)]
    assert all(a <= r for a, r in zip(res.position_accepted, res.position_reached))
    assert all(r <= a for r, a in zip(res.position_reached[1:], res.position_accepted[:-1]))
    assert not res.position_reached or res.position_reached[0] <= sum(res.iterations)


def tree_shape(name: str, depth: int) -> TreeShape:
    """A tree of the named kind cut to ``depth``: widths per depth, a budget, or a sparse Medusa-like set."""
    if name.startswith("beam"):
        return TreeShape.budget(int(name[4:]), depth)
    if name.startswith("chain+"):  # the chain plus rank paths, those no deeper than the tree
        return TreeShape.chain_plus([p for p in parse_tree_shape(name)[2] if len(p) <= depth], depth, name)
    if name == "leaf0":  # slot 1's best guess is a leaf: a path through the second moves onto its slots
        return TreeShape(paths=tuple((1,) + (0,) * i for i in range(depth)) + ((0,),))
    if name == "sparse":
        paths = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)]
        return TreeShape(paths=tuple(p for p in paths if len(p) <= depth))
    return TreeShape.widths([int(w) for w in name.split("x")][:depth])


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_each_registered_method_decodes_a_request_in_one_call(engine):
    """A decoding request is one call, ``Method.decode(model, src, max_len, options, prepared)``, for every registered
    method with options as a config asks for them (a plan and ``decode.methods`` asking each method for something),
    on the decode path ``engine`` where the method has it: exact methods with exact acceptance return greedy's
    tokens, and every output keeps the contract."""
    model = random_model(24, 4, seed=5, head_noise=0.05)
    src, max_len = random_src(3, 6, 24, seed=5), 12
    greedy = greedy_decode(model, src, max_len=max_len).tokens
    plan = Plan((1, 2, 4), (CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)),
                models=frozenset({"draft"}))
    asked = MethodsConfig(naive_greedy=True, beam=BeamOptions(3), tree=["3x2", "beam2"],
                          rescored=[RescoreOptions(2, 0.5)])
    prepared = Prepared(built={"draft": random_model(24, 1, seed=6, head_noise=0.0),
                               "rescored": NgramLM.fit(greedy, 24, model.bos_id)})
    specs = specs_for(plan, asked, engine)
    assert {s.method for s in specs} == set(METHODS), "every registered method is asked for something"
    for spec in specs:
        res = METHODS[spec.method].decode(model, src, max_len, spec.options, prepared)
        check_contract(res, 3, max_len, model.eos_id)
        if METHODS[spec.method].exact and getattr(spec.options, "exact", True):
            assert res.tokens == greedy, spec.key


def test_property_exercises_long_blocks_eos_and_max_len():
    """Guard against a vacuous property: the generator must hit multi-token blocks, EOS inside a block
    and max_len reached mid-block."""
    long_block = eos_in_block = cut_by_max_len = False
    for seed in range(60):
        vocab = 4 + seed % 3
        model = random_model(vocab, 6, seed, head_noise=[0.05, 0.3, 1.0][seed % 3])
        src = random_src(3, 5, vocab, seed)
        max_len = 7 + seed % 5
        b = blockwise_decode(model, src, k=6, max_len=max_len)
        assert b.tokens == greedy_decode(model, src, max_len=max_len).tokens
        for toks, blocks in zip(b.tokens, b.block_sizes):
            long_block |= max(blocks) > 1
            eos_in_block |= bool(toks) and toks[-1] == model.eos_id and blocks[-1] > 1
            cut_by_max_len |= len(toks) == max_len and model.eos_id not in toks and blocks[-1] > 1
    assert long_block and eos_in_block and cut_by_max_len


@pytest.mark.parametrize("seed", range(5))
def test_k1_is_greedy_one_token_per_iteration(seed):
    model = random_model(30, 1, seed, identity_p1=True)
    src = random_src(3, 6, 30, seed)
    g = greedy_decode(model, src, max_len=15)
    b = blockwise_decode(model, src, k=1, max_len=15)
    assert b.tokens == g.tokens
    assert b.iterations == [len(t) for t in g.tokens] == g.iterations
    assert all(bs == 1 for row in b.block_sizes for bs in row)


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_invocations_equal_iterations_plus_one_at_batch_1(k):
    for seed in range(5):
        model = random_model(12, k, seed, head_noise=0.05)
        src = random_src(1, 5, 12, seed)
        b = blockwise_decode(model, src, k=k, max_len=25)
        assert b.invocations == b.iterations[0] + 1
        assert b.total_tokens / b.iterations[0] == pytest.approx(b.mean_block_size)


@pytest.mark.parametrize("arch", list(HEADS))
def test_cache_rollback_matches_recompute(arch):
    """Logits after verify-then-rollback-then-continue equal a from-scratch teacher-forced pass."""
    torch.manual_seed(0)
    model = random_model(20, 4, 3, arch=arch)
    src = random_src(3, 6, 20, 3)
    enc = model.encode(src)
    cache = model.new_cache(3, 32)
    true = torch.randint(3, 20, (3, 5))
    with torch.no_grad():
        model.decode(torch.tensor([[model.bos_id, 5]] * 3), enc, cache)  # BOS + 1 token
        junk = torch.randint(3, 20, (3, 4))
        model.decode(junk, enc, cache)  # a verify pass whose proposals get rejected...
        cache.rollback(4, [0, 1, 2])  # ...differently per row: row r keeps r of the junk tokens
        assert cache.lengths.tolist() == cache.host_lengths == [2, 3, 4]
        h_inc = model.decode(true, enc, cache)  # each row continues from its own length
        for r in range(3):
            full = torch.cat([torch.tensor([model.bos_id, 5]), junk[r, :r], true[r]])[None]
            h_ref = model.decode(full, model.encode(src[r : r + 1]))[0, 2 + r :]  # causal recompute
            torch.testing.assert_close(h_inc[r], h_ref, rtol=1e-10, atol=1e-10)
            source = model.head_source(model.encode(src[r : r + 1]))  # heads that attend to the input read it
            inc, ref = (model.heads(x[None], source=source) for x in (h_inc[r], h_ref))
            torch.testing.assert_close(inc, ref, rtol=1e-10, atol=1e-10)


def test_teacher_forced_forward_matches_incremental():
    model = random_model(25, 3, 7)
    src = random_src(2, 5, 25, 7)
    tgt = torch.randint(3, 25, (2, 8))
    tgt[:, 0] = model.bos_id
    with torch.no_grad():
        full = model(src, tgt)
        assert full.shape == (2, 8, 3, 25)
        enc, cache = model.encode(src), model.new_cache(2, 16)
        steps = [model.heads(model.decode(tgt[:, t : t + 1], enc, cache))[:, 0] for t in range(8)]
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=1e-10, atol=1e-10)


def test_topk_vocab_accepts_full_blocks():
    vocab, k = 15, 5
    for seed in range(5):
        model = random_model(vocab, k, seed, head_noise=1.0)
        src = random_src(2, 6, vocab, seed)
        b = blockwise_decode(model, src, k=k, criterion=criteria.TopK(vocab), max_len=23)
        for blocks in b.block_sizes:
            # Every block is full except the last one (cut by EOS or max_len).
            assert all(bs == k for bs in blocks[:-1])


@pytest.mark.parametrize("l", [2, 3])
@pytest.mark.parametrize("crit", [criteria.Exact(), criteria.TopK(2)])
def test_min_block_size_always_accepts_at_least_l(l, crit):
    for seed in range(5):
        model = random_model(20, 4, seed, head_noise=2.0)
        src = random_src(2, 6, 20, seed)
        b = blockwise_decode(model, src, k=4, criterion=crit, min_block_size=l, max_len=20)
        for blocks in b.block_sizes:
            assert all(bs >= l for bs in blocks[:-1])
        # The criterion can carry the minimum block size itself, with the same effect.
        carried = type(crit)(**{**crit.__dict__, "min_block_size": l})
        assert blockwise_decode(model, src, k=4, criterion=carried, max_len=20).tokens == b.tokens


def test_distance_zero_equals_exact_on_ordinal_vocab():
    for seed in range(8):
        model = random_model(30, 4, seed, head_noise=0.05)
        src = random_src(2, 6, 30, seed)
        e = blockwise_decode(model, src, k=4, criterion=criteria.Exact(), max_len=20)
        d = blockwise_decode(model, src, k=4, criterion=criteria.Distance(eps=0), max_len=20)
        assert d.tokens == e.tokens and d.block_sizes == e.block_sizes


def test_distance_criterion_on_pixel_vocabulary():
    logits = torch.full((1, 4, 258), -10.0)
    logits[0, :, 100] = 0.0  # argmax intensity 100 everywhere
    props = torch.tensor([[100, 102, 103, 257]])
    acc = criteria.Distance(eps=2).accept(logits, props).tolist()[0]
    assert acc == [True, True, False, False]  # 257 is not an intensity: never "close"
    assert criteria.Distance(eps=3).accept(logits, props).tolist()[0][:3] == [True, True, True]


@pytest.mark.parametrize("crit", [criteria.Exact(), criteria.Distance(eps=0), criteria.Distance(eps=2),
                                  criteria.Distance(eps=3.5, offset=4, n_values=20)])
def test_host_verdicts_equal_device_verdicts(crit):
    """An argmax criterion judges on the host (``accept_ids``): it must agree with its device test on every pair
    of ids, in and out of the ordinal range, and decode to the same tokens and blocks as the device path
    (``Criterion.judge``, which every other criterion uses)."""
    ids = torch.arange(-2, 30)
    best, props = torch.meshgrid(ids, ids, indexing="ij")
    logits = torch.zeros(*best.shape, 40)  # unused when the argmax is given
    device = crit.accept(logits, props, best)
    host = torch.tensor([[crit.accept_ids(int(b), int(q)) for b, q in zip(br, qr)] for br, qr in zip(best, props)])
    assert isinstance(crit, criteria.ArgmaxCriterion) and torch.equal(device, host)

    on_device = type("OnDevice", (type(crit),), {"judge": criteria.Criterion.judge})(**crit.__dict__)
    for seed in range(6):
        model = random_model(30, 5, seed, head_noise=0.05 if seed % 2 else 0.5)
        src = random_src(3, 6, 30, seed)
        for l in (1, 2):
            a = blockwise_decode(model, src, k=5, criterion=crit, min_block_size=l, max_len=20)
            b = blockwise_decode(model, src, k=5, criterion=on_device, min_block_size=l, max_len=20)
            assert a.tokens == b.tokens and a.block_sizes == b.block_sizes


def test_topk_criterion():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0]])
    assert criteria.TopK(1).accept(logits, torch.tensor([1])).tolist() == [True]
    assert criteria.TopK(2).accept(logits, torch.tensor([2])).tolist() == [True]
    assert criteria.TopK(2).accept(logits, torch.tensor([3])).tolist() == [False]
    assert criteria.TopK(3).accept(logits, torch.tensor([3])).tolist() == [True]


@pytest.mark.parametrize("seed", range(6))
def test_beam_size_one_is_greedy(seed):
    model = random_model(20, 1, seed, identity_p1=True)
    src = random_src(3, 6, 20, seed)
    g = greedy_decode(model, src, max_len=18)
    assert beam_decode(model, src, beam_size=1, alpha=0.6, max_len=18).tokens == g.tokens


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_beam_rows_decode_as_they_would_alone(seed, monkeypatch):
    """Rows that finish leave the batch mid-decode (their cache, encoder state and beams): every other row must
    still get what it gets decoded alone, whichever rows finish first (with caches that grow as they fill)."""
    monkeypatch.setattr(KVCache, "first_entries", 2)
    model = random_model(16, 1, seed, identity_p1=True)
    base_logits = model.heads.base_logits

    def eos_rising(h):  # EOS likelier at every step, more so on some rows: rows finish at different steps
        out = base_logits(h).clone()
        out[..., model.eos_id] += 0.5 * eos_rising.calls + 4.0 * h[..., 0]
        eos_rising.calls += 1
        return out

    model.heads.base_logits = eos_rising
    src = random_src(7, 6, 16, seed)

    def decode(s, drop_finished=True):
        eos_rising.calls = 0
        return beam_decode(model, s, beam_size=3, alpha=0.6, max_len=14, drop_finished=drop_finished).tokens

    together = decode(src)
    assert len({len(t) for t in together}) > 1  # rows really finish at different steps
    assert decode(src, drop_finished=False) == together  # bench/beam_decode.py's reference side
    for r in range(src.shape[0]):
        assert decode(src[r : r + 1, : int((src[r] != model.pad_id).sum())]) == [together[r]]


def test_beam_finds_higher_scores_than_greedy():
    """Beam search (alpha=0) never returns a lower model log-probability than greedy on average."""
    tot_g = tot_b = 0.0
    for seed in range(6):
        model = random_model(12, 1, seed, identity_p1=True)
        src = random_src(2, 5, 12, seed)
        g = greedy_decode(model, src, max_len=10).tokens
        b = beam_decode(model, src, beam_size=4, alpha=0.0, max_len=10).tokens
        tot_g += seq_logprob(model, src, g)
        tot_b += seq_logprob(model, src, b)
    assert tot_b >= tot_g - 1e-9


def seq_logprob(model, src, seqs) -> float:
    total = 0.0
    for r, toks in enumerate(seqs):
        tgt = torch.tensor([[model.bos_id] + toks])
        with torch.no_grad():
            logp = torch.log_softmax(model.heads.base_logits(model.decode(tgt, model.encode(src[r : r + 1]))), -1)
        total += sum(float(logp[0, t, tok]) for t, tok in enumerate(toks))
    return total


def test_keep_path_moves_the_kept_entries_at_any_batch_size():
    """``KVCache.keep_path``: batch 1 moves runs of slots as slices (cloning a run that overlaps its target),
    larger batches gather and scatter; both leave each row's path entries right after its prefix."""
    paths = [[0, 2, 3, 4], [0, 1, 3], [0, 4, 5], [0, 1, 2]]
    gen = torch.Generator().manual_seed(4)
    full = KVCache(2, len(paths), 2, 16, 3, torch.float64, "cpu")
    for t in (*full.k, *full.v):
        t.copy_(torch.randn(t.shape, dtype=t.dtype, generator=gen))
    full.advance(4 + 6)  # a 4-token prefix, then a 6-node tree
    before = [t.clone() for t in (*full.k, *full.v)]
    singles = []
    for b, path in enumerate(paths):
        one = KVCache(2, 1, 2, 16, 3, torch.float64, "cpu")
        for t, src in zip((*one.k, *one.v), before):
            t.copy_(src[b : b + 1])
        one.advance(10)
        one.keep_path(6, [path])
        singles.append(one)
    full.keep_path(6, paths)
    for b, path in enumerate(paths):
        assert full.host_lengths[b] == singles[b].host_lengths[0] == 4 + len(path)
        for t, one, src in zip((*full.k, *full.v), (*singles[b].k, *singles[b].v), before):
            want = torch.cat([src[b, :, :4], src[b, :, [4 + i for i in path]]], dim=1)
            torch.testing.assert_close(t[b, :, : 4 + len(path)], want)
            torch.testing.assert_close(one[0, :, : 4 + len(path)], want)


def test_naive_greedy_matches_cached_greedy():
    for seed in range(4):
        model = random_model(20, 2, seed)
        src = random_src(3, 6, 20, seed)
        g = greedy_decode(model, src, max_len=15)
        n = naive_greedy_decode(model, src, max_len=15)
        assert n.tokens == g.tokens and n.invocations == g.invocations


def test_fp32_agreement_except_near_ties():
    """In float32, exact blockwise may differ from greedy only after a step whose top-2 greedy logits
    are within float32 noise of each other. Document the guarantee: check it over many models, with the
    gap the evaluation rows report (``greedy_mismatch_max_gap``)."""
    from bpd.decoding.agreement import mismatch_gaps

    mismatches = 0
    for seed in range(30):
        model = random_model(40, 6, seed, head_noise=0.05, dtype=torch.float32)
        src = random_src(3, 7, 40, seed)
        g = greedy_decode(model, src, max_len=20)
        b = blockwise_decode(model, src, k=6, max_len=20)
        gaps = mismatch_gaps(model, src.tolist(), g.tokens, b.tokens)
        mismatches += len(gaps)
        assert all(abs(gap) < 1e-4 for gap in gaps), f"fp32 divergence without a near-tie: {gaps}"
    assert mismatches <= 3


def test_bad_k_and_criterion_errors():
    model = random_model(10, 3, 0)
    src = random_src(1, 4, 10, 0)
    with pytest.raises(ValueError, match="trained k=3"):
        blockwise_decode(model, src, k=4)
    with pytest.raises(ValueError, match="between 1"):
        blockwise_decode(model, src, k=0)
    with pytest.raises(ValueError, match="unknown acceptance criterion"):
        criteria.make_criterion("fuzzy")
    with pytest.raises(ValueError, match="min_block_size"):
        criteria.Exact(min_block_size=0)
    # A minimum block size above k is refused, not clamped to k without a word.
    with pytest.raises(ValueError, match=r"between 1 and k=3 \(got 9\)"):
        blockwise_decode(model, src, k=3, min_block_size=9)
    with pytest.raises(ValueError, match=r"between 1 and k=2 \(got 3\)"):
        blockwise_decode(model, src, k=2, criterion=criteria.TopK(n=2, min_block_size=3))
    from bpd.config import BeamOptions, CriterionConfig, DecodeConfig, MethodsConfig
    from bpd.decoding.spec import decode_specs

    specs = decode_specs(DecodeConfig(ks=[2, 4], methods=MethodsConfig(beam=BeamOptions(0)),
                                      criteria=[CriterionConfig("exact", None, [1, 3])]), 4)
    assert [(s.k, s.min_block_size, s.columns()["criterion_label"]) for s in specs[1:]] == [
        (2, 1, "exact"), (4, 1, "exact"), (4, 3, "exact, min block 3 (approximate)")]  # no l=3 at k=2
    from bpd.models import build_translation_model

    with pytest.raises(ValueError, match="k must be >= 1"):
        build_translation_model(10, 0, "micro")


def test_finished_rows_stop_costing():
    """At batch > 1, a row that finishes early is dropped from later decoder calls."""
    model = random_model(8, 2, 0, head_noise=0.3)  # one row ends after 5 rounds, the others after 18
    src = random_src(4, 6, 8, 0)
    calls: list[int] = []
    orig = model.decode

    def spy(tgt, enc, cache=None):
        calls.append(tgt.shape[0])
        return orig(tgt, enc, cache)

    model.decode = spy  # type: ignore[method-assign]
    b = blockwise_decode(model, src, k=2, max_len=25)
    its = sorted(b.iterations)
    assert its[0] < its[-1], "the inputs must make rows finish at different rounds"
    # After the shortest row has finished, later calls carry fewer rows: one start call of 4 rows, then each
    # round carries only the rows still decoding.
    assert calls[0] == 4 and min(calls) < 4
    assert sum(calls) == 4 + sum(b.iterations)


@pytest.mark.parametrize("arch", list(HEADS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_proposal_vocab_keeps_exactness_and_limits_proposals(arch, seed):
    """A restricted proposal vocabulary changes what is proposed, never what exact decoding returns."""
    model = random_model(30, 5, seed, arch=arch, head_noise=0.05, identity_p1=True)
    src = random_src(3, 6, 30, seed)
    ids = torch.tensor([model.eos_id, 3, 5, 7, 11, 13, 17])
    ref = greedy_decode(model, src, max_len=20)
    h = torch.randn(4, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    source = model.head_source(model.encode(random_src(4, 6, 30, seed + 1)))
    with torch.inference_mode():
        free = model.heads.propose(h, torch.full((4, 1), 3), 5, source)
    model.heads.set_proposal_vocab(ids)
    res = blockwise_decode(model, src, k=5, max_len=20)
    assert res.tokens == ref.tokens
    with torch.inference_mode():
        props = model.heads.propose(h, torch.full((4, 1), 3), 5, source)
    assert props.shape == (4, 4) and torch.isin(props, ids).all()
    model.heads.set_proposal_vocab(None)
    with torch.inference_mode():
        assert torch.equal(model.heads.propose(h, torch.full((4, 1), 3), 5, source), free), "None lifts the restriction"


def test_proposal_coverage_caps_exact_acceptance():
    """``proposal_coverage``: the share of greedy's tokens a restricted proposal vocabulary can propose. A token
    outside it is never accepted from a slot, so exact acceptance of a model whose heads would be perfect
    still stops there."""
    from bpd.evaluate import proposal_coverage

    assert proposal_coverage([[3, 4, 2], [5, 2]], torch.tensor([2, 3, 5])) == pytest.approx(0.8)
    assert proposal_coverage([[3, 4, 2]], None) is None and proposal_coverage([], torch.tensor([2])) is None
    model = random_model(30, 4, 0, arch="recurrent", identity_p1=True, head_noise=0.0)
    src = random_src(4, 6, 30, 0)
    greedy = greedy_decode(model, src, max_len=12).tokens
    free = blockwise_decode(model, src, k=4, max_len=12)  # its slots propose greedy's tokens: blocks above 1
    assert sum(free.iterations) < sum(len(t) for t in greedy)
    emitted = {t for out in greedy for t in out}
    ids = torch.tensor([t for t in range(30) if t not in emitted])  # none of them proposable
    model.heads.set_proposal_vocab(ids)
    res = blockwise_decode(model, src, k=4, max_len=12)
    assert res.tokens == greedy and proposal_coverage(greedy, ids) == 0.0
    assert all(b == 1 for blocks in res.block_sizes for b in blocks)


def test_frequent_targets():
    from bpd.data.store import ListPairs
    from bpd.tasks import ImageTask, Task, TranslationTask

    train = ListPairs([([4], [5, 5, 6, 2]), ([4], [5, 7, 7, 2])])
    task = TranslationTask.__new__(TranslationTask)  # the splits alone, no corpus to read
    Task.__init__(task, "toy", "key", 10, {"train": train, "dev": [], "test": []}, 0, 1, 2)
    assert task.proposal_vocab(3).tolist() == [2, 5, 7]  # EOS first, then by count, ties by id
    assert task.proposal_vocab(None) is None
    with pytest.raises(ValueError, match="proposal_vocab"):
        ImageTask.__new__(ImageTask).proposal_vocab(3)


def test_bad_library_inputs_get_one_sentence():
    """What a library user can get wrong, each refused with the fix instead of a raw torch error."""
    model = random_model(10, 3, 0)
    src = random_src(2, 4, 10, 0)
    cases = [
        (src.float(), "integer tensor of token ids"),
        (src[0], r"\(batch, length\) integer tensor"),
        (src[:, :0], "has no tokens"),
        (torch.full((1, 3), 10), "token id 10, outside the model's vocabulary of 10"),
        (torch.full((1, 3), model.pad_id), r"row\(s\) \[0\] are all padding"),
    ]
    for decode in (greedy_decode, blockwise_decode, lambda m, s, **kw: beam_decode(m, s, 2, 0.6, **kw)):
        for bad, match in cases:
            with pytest.raises(ValueError, match=match):
                decode(model, bad)
        with pytest.raises(ValueError, match="max_len must be a whole number >= 0"):
            decode(model, src, max_len=-1)
    for wrong, hint in (("exact", r"make_criterion\('exact'\)"), (criteria.Exact, r"criteria.Exact\(\)")):
        with pytest.raises(TypeError, match=hint):
            blockwise_decode(model, src, criterion=wrong)


@pytest.mark.parametrize("arch", list(HEADS))
def test_a_width_one_tree_is_the_chain(arch):
    """A tree with one candidate per depth verifies exactly the chain's block: same rounds, same blocks."""
    for seed in range(3):
        model = random_model(24, 5, seed, arch=arch, head_noise=0.1)
        src = random_src(3, 6, 24, seed)
        chain = blockwise_decode(model, src, k=5, max_len=20)
        tree = tree_decode(model, src, "1x1x1x1", k=5, max_len=20)
        assert (tree.tokens, tree.block_sizes, tree.invocations) == (chain.tokens, chain.block_sizes, chain.invocations)
        assert (tree.position_reached, tree.position_accepted) == (chain.position_reached, chain.position_accepted)


@pytest.mark.parametrize("arch", list(HEADS))
def test_wider_trees_accept_more_and_stay_greedy(arch):
    """With noisy heads the best guess is often second or third: a wider tree keeps longer blocks (here, over
    several models) and, with a restricted proposal vocabulary too, the same tokens as greedy."""
    chain_rounds = tree_rounds = 0
    for seed in range(4):
        model = random_model(24, 5, seed, arch=arch, head_noise=0.3)
        src = random_src(4, 6, 24, seed)
        g = greedy_decode(model, src, max_len=20)
        chain_rounds += sum(blockwise_decode(model, src, k=5, max_len=20).iterations)
        tree = tree_decode(model, src, "4x3x2x1", k=5, max_len=20)
        tree_rounds += sum(tree.iterations)
        assert tree.tokens == g.tokens
        model.heads.set_proposal_vocab(torch.arange(3, 15))
        assert tree_decode(model, src, "beam3", k=5, max_len=20).tokens == g.tokens
        model.heads.set_proposal_vocab(None)
    assert tree_rounds < chain_rounds


@pytest.mark.parametrize("vocab", [None, [2, 3, 5, 7, 11, 13, 17]])
@pytest.mark.parametrize("arch", ["recurrent", "attend"])
@pytest.mark.parametrize("tied", [False, True])
def test_recurrent_tree_step_fast_path_equals_the_plain_step(vocab, arch, tied):
    """A tree frontier's recurrent step (``step_logits``) through the decoding tables gives the plain step's
    states and proposal logits; a proposal vocabulary set under inference mode (an inference tensor, with no
    version counter for the table cache to key on) works too."""
    model = random_model(30, 5, 0, arch=arch, head_noise=0.3, heads_tied=tied)
    heads = model.heads
    s = torch.randn(2, 3, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tok = torch.tensor([[4, 9, 2], [7, 7, 1]])
    source = model.head_source(model.encode(random_src(2, 6, 30, 1)))
    with torch.inference_mode():
        heads.set_proposal_vocab(None if vocab is None else torch.tensor(vocab))
        for i in (1, 3):
            fast_s, fast_logits = heads.step_logits(s, tok, i, source)
            plain_s = heads.step(s, tok, i, source)
            torch.testing.assert_close(fast_s, plain_s)
            torch.testing.assert_close(fast_logits, heads.proposal_logits(plain_s))
            assert fast_logits.shape == (2, 3, 30 if vocab is None else len(vocab))
    heads.set_proposal_vocab(None)


@pytest.mark.parametrize("vocab", [None, [2, 3, 5, 7, 11, 13, 17]])
@pytest.mark.parametrize("arch", ["recurrent", "attend"])
@pytest.mark.parametrize("tied", [False, True])
def test_recurrent_fixed_tree_fast_build_equals_the_plain_build(vocab, arch, tied):
    """Fixed-shape trees built through the recurrent heads' decoding tables (``fastpath.recurrent_tree``: only
    nodes with children stepped, views for nodes in grid order) hold the same tokens as the plain build."""
    model = random_model(30, 5, 0, arch=arch, head_noise=0.3, heads_tied=tied)
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(3, model.cfg.d_model, dtype=torch.float64, generator=gen)
    first = torch.tensor([[4], [9], [2]])
    enc = model.encode(random_src(3, 6, 30, 2))
    shapes = ["1x1x1x1", "2x1", "3x2", "2x2x2", "chain+1", "chain+1+21+200", "chain+3+30"]
    with torch.inference_mode():
        model.heads.set_proposal_vocab(None if vocab is None else torch.tensor(vocab))
    for name in shapes:
        shape = TreeShape.parse(name, 5)
        with torch.no_grad():
            plain = build_tree(model, h, first, shape, enc)
        with torch.inference_mode():
            fast = build_tree(model, h, first, shape, enc)
        assert torch.equal(fast.tokens, plain.tokens), name
        assert torch.equal(fast.parent, plain.parent) and torch.equal(fast.ancestors, plain.ancestors)
    model.heads.set_proposal_vocab(None)


@pytest.mark.parametrize("arch", [a for a in HEADS if not HEADS[a].path_dependent])
def test_shared_candidate_trees_hold_each_slots_ranked_candidates(arch):
    """Heads whose candidates do not depend on the path: node (r_1, ..., r_d) of a fixed tree holds slot d's
    r_d-th best token (one top-n over every slot at once must index the grid right)."""
    model = random_model(30, 5, 0, arch=arch, head_noise=0.3)
    h = torch.randn(2, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ranked = model.heads.proposal_logits(model.heads.states(h, 5, start=1)).argsort(dim=-1, descending=True)
        for name in ["2x1", "3x2", "chain+1+21+200"]:
            shape = TreeShape.parse(name, 5)
            tree = build_tree(model, h, torch.tensor([[4], [9]]), shape)
            # Fixed trees list their nodes depth-first (lexicographic rank paths: the chain of first candidates first).
            want = torch.stack([ranked[:, len(p) - 1, p[-1]] for p in sorted(shape.paths)], dim=1)
            assert torch.equal(tree.tokens[:, 1:], want), name


@pytest.mark.parametrize("arch", ["recurrent", "medusa"])
def test_fixed_trees_put_the_chain_first(arch):
    """Fixed trees list their nodes depth-first: nodes 0..k-1 are the chain's own proposals, so a round that keeps
    a prefix of the chain finds its cache entries in place (no ``keep_path`` move); every node follows its parent."""
    model = random_model(30, 5, 0, arch=arch, head_noise=0.3)
    h = torch.randn(2, model.cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    first = torch.tensor([[4], [9]])
    with torch.inference_mode():
        chain = propose(model, h, first, 5)
        for name in ["2x1", "3x2", "chain+1+21"]:
            tree = build_tree(model, h, first, TreeShape.parse(name, 5))
            par, dep = tree.parent[0].tolist(), tree.depth[0].tolist()
            assert dep[:5] == [0, 1, 2, 3, 4] and par[:5] == [0, 0, 1, 2, 3], name
            assert all(par[i] < i for i in range(1, len(par))) and torch.equal(tree.tokens[:, :5], chain), name


def test_tree_shapes_and_their_errors():
    assert TreeShape.parse("3x2", 5).level_sizes == [1, 3, 6, 6, 6] and TreeShape.parse("3x2", 5).name == "3x2x1x1"
    assert TreeShape.parse("beam4", 4).level_sizes == [1, 4, 4, 4] and TreeShape.parse("beam4", 4).n_nodes == 13
    sparse = TreeShape(paths=((1,), (0,), (0, 0)))
    assert sparse.paths == ((0,), (1,), (0, 0)) and sparse.level_sizes == [1, 2, 1] and sparse.name == "sparse4"
    # One grammar for config strings (bpd.config.parse_tree_shape): the config check, the bench's specs and
    # tree_decode refuse the same strings.
    for bad, match in [("wide", "unknown tree shape"), ("2x2x2x2", "4 deep"), ("0x2", "unknown tree shape"),
                       ("beam0", "unknown tree shape"), ("3x", "unknown tree shape")]:
        with pytest.raises(ValueError, match=match):
            TreeShape.parse(bad, 4)
    with pytest.raises(ValueError, match="counts >= 1"):
        TreeShape.widths([0, 2])
    with pytest.raises(ValueError, match="beam >= 1"):
        TreeShape.budget(0, 3)
    with pytest.raises(ValueError, match="prefix-closed"):
        TreeShape(paths=((0, 0),))
    model = random_model(24, 4, 0)
    src = random_src(1, 5, 24, 0)
    with pytest.raises(ValueError, match="min_block_size=1"):
        tree_decode(model, src, "2x2", criterion=criteria.Exact(min_block_size=2))
    with pytest.raises(ValueError, match="k between 2"):
        tree_decode(model, src, "2", k=1)
    with pytest.raises(ValueError, match="needs k >= 4"):
        tree_decode(model, src, TreeShape.widths([2, 2, 2]), k=3)


def test_a_perfect_draft_fills_every_block():
    """The base model as its own draft guesses every token right: every block is k long but the last, and
    the draft's cache stays in step with the output (the same outputs at batch 1 and in a batch)."""
    perfect_rounds = weak_rounds = 0
    for seed in range(6):
        model = random_model(24, 1, seed, head_noise=0.0)
        src = random_src(4, 6, 24, seed)
        g = greedy_decode(model, src, max_len=20)
        res = draft_decode(model, model, src, k=4, max_len=20)
        assert res.tokens == g.tokens
        assert all(all(b == 4 for b in blocks[:-1]) for blocks in res.block_sizes)
        one = [draft_decode(model, model, src[i : i + 1], k=4, max_len=20).tokens[0] for i in range(4)]
        assert one == res.tokens
        weak = draft_decode(model, random_model(24, 1, seed + 100), src, k=4, max_len=20)
        assert weak.tokens == g.tokens
        perfect_rounds, weak_rounds = perfect_rounds + sum(res.iterations), weak_rounds + sum(weak.iterations)
    assert weak_rounds > perfect_rounds


def test_draft_errors():
    model, src = random_model(24, 1, 0), random_src(1, 5, 24, 0)
    with pytest.raises(ValueError, match="vocabulary"):
        draft_decode(model, random_model(30, 1, 0), src, k=4)
    with pytest.raises(ValueError, match="k >= 2"):
        draft_decode(model, model, src, k=1)


def test_bigram_model_is_a_distribution():
    """NgramLM: p(. | v) sums to one for seen and unseen contexts, and seen pairs score above unseen ones."""
    lm = NgramLM.fit([[3, 4, 5, 3, 4], [3, 4, 6], [7]], vocab=9, bos=1, discount=0.75)
    nxt = torch.arange(9)
    for v in range(9):
        assert torch.logsumexp(lm.logp(torch.full((9,), v), nxt), 0).item() == pytest.approx(0.0, abs=1e-5)
    assert lm.logp(torch.tensor(3), torch.tensor(4)) > lm.logp(torch.tensor(3), torch.tensor(5))
    assert lm.logp(torch.tensor(1), torch.tensor(3)) > lm.logp(torch.tensor(1), torch.tensor(8))  # after BOS


def test_rescoring_picks_the_block_the_bigram_model_prefers():
    """With a large weight, the rescored block follows the bigram model among the heads' candidates."""
    model = random_model(24, 4, 0, head_noise=1.0)
    src = random_src(1, 6, 24, 0)
    g = greedy_decode(model, src, max_len=20)
    lm = NgramLM.fit(g.tokens * 10, 24, model.bos_id)  # knows exactly what greedy says
    plain = blockwise_decode(model, src, k=4, max_len=20)
    ranked = blockwise_decode(model, src, k=4, max_len=20, proposer=Rescorer(lm, beam=4, weight=10.0))
    assert ranked.tokens == g.tokens and sum(ranked.iterations) <= sum(plain.iterations)


def test_mismatch_gaps_measure_how_close_the_parting_token_was():
    """bpd.decoding.agreement: equal outputs give no gap; an output that takes p_1's runner-up at step t
    (on greedy's prefix) parts at the logit gap between the two; a mere prefix of greedy's output gets inf."""
    from bpd.decoding.agreement import mismatch_gaps

    model = random_model(vocab=23, k=2, seed=5).eval()
    src = random_src(1, 6, 23, seed=5)
    g = greedy_decode(model, src, max_len=8).tokens[0]
    assert len(g) >= 3
    s = src[0].tolist()
    assert mismatch_gaps(model, [s], [g], [list(g)]) == []
    t = 2
    with torch.no_grad():
        h = model.decode(torch.tensor([[model.bos_id, *g[:t]]]), model.encode(src))
        logits = model.heads.base_logits(h[:, t])[0]
    second = logits.topk(2).indices[1].item()
    other = [*g[:t], second, *g[t + 1:]]
    (gap,) = mismatch_gaps(model, [s], [g], [other])
    assert gap == pytest.approx((logits[g[t]] - logits[second]).item()) and gap > 0
    assert mismatch_gaps(model, [s], [g], [g[:t]]) == [float("inf")]
