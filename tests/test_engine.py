"""The static decode path (``decode.engine``, ``bpd.decoding.engine``): fixed shapes give the eager path's outputs,
the compiled functions give the static ones', and what the engine keeps (compiled graphs, frozen weights) follows
the model. That every exact method equals greedy on the static path is in the property test
(tests/test_decoding.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_model, random_src

from bpd.config.decode import DecodeConfig
from bpd.decoding import blockwise_decode, criteria, greedy_decode
from bpd.decoding.engine import bucket, engine_for
from bpd.decoding.spec import DecodeSpec


def test_buckets_are_powers_of_two_from_sixteen():
    assert [bucket(n) for n in (1, 16, 17, 32, 33, 100)] == [16, 16, 32, 32, 64, 128]


@pytest.mark.parametrize("arch", ["attend", "medusa"])
def test_static_rounds_are_the_eager_rounds(arch):
    """Not only the tokens: every round accepts the same block, with the same per-slot counts, for exact and top-2
    acceptance, at batch 3 with ragged sources and rows finishing at different rounds."""
    model = random_model(30, 5, seed=4, arch=arch, head_noise=0.05, heads_tied=arch == "attend")
    src = random_src(3, 7, 30, seed=5)
    for crit in (criteria.Exact(), criteria.TopK(2), criteria.Exact(min_block_size=2)):
        eager = blockwise_decode(model, src, k=4, criterion=crit, max_len=25)
        static = blockwise_decode(model, src, k=4, criterion=crit, max_len=25, engine="static")
        assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes, crit
        assert static.position_accepted == eager.position_accepted
        assert static.position_reached == eager.position_reached
        assert static.invocations == eager.invocations
    assert max(max(b) for b in eager.block_sizes) > 1  # not vacuous


@pytest.mark.parametrize("arch", ["attend", "medusa", "recurrent"])
def test_static_trees_are_the_eager_trees(arch, monkeypatch):
    """Tree verification on the static path (``bpd.decoding.static_tree``) keeps the eager round's paths: the same
    tokens, blocks, per-depth counts and calls for a fixed shape, a sparse one and a budget, under exact and top-2
    acceptance, at batch 3 (ragged sources, rows finishing at different rounds) and batch 1. Some kept paths leave
    the chain of first candidates, so their cache entries had to move (``static_tree.update``)."""
    from bpd.decoding.methods.tree import tree_decode
    from bpd.models.kv_cache import KVCache

    moved, keep_path = [], KVCache.keep_path
    monkeypatch.setattr(KVCache, "keep_path", lambda self, n, paths: moved.append(n) or keep_path(self, n, paths))
    model = random_model(30, 4, seed=4, arch=arch, head_noise=0.3, heads_tied=arch == "attend")
    for batch in (3, 1):
        src = random_src(batch, 7, 30, seed=5)
        for shape in ("3x2", "chain+1+10", "beam2"):
            for crit in (criteria.Exact(), criteria.TopK(2)):
                eager = tree_decode(model, src, shape, k=4, criterion=crit, max_len=25)
                static = tree_decode(model, src, shape, k=4, criterion=crit, max_len=25, engine="static")
                assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes, (shape, crit)
                assert static.position_accepted == eager.position_accepted
                assert static.position_reached == eager.position_reached
                assert static.invocations == eager.invocations
    assert moved and max(max(b) for b in eager.block_sizes) > 1  # not vacuous


@pytest.mark.slow
def test_compiled_trees_are_the_static_ones():
    """Tree rounds through compiled packages (a fixed shape at batch 2, a budget under top-2 at batch 1) keep the
    static path's paths, on untied attend slots (weights that are slices of one parameter: the compiled round reads
    the frozen tables' own copies)."""
    from bpd.decoding.methods.tree import tree_decode

    model = random_model(40, 4, seed=2, arch="attend", head_noise=0.05, dtype=torch.float32)
    for batch, shape, crit in ((2, "3x2", criteria.Exact()), (1, "beam2", criteria.TopK(2))):
        src = random_src(batch, 6, 40, seed=3)
        static = tree_decode(model, src, shape, k=4, criterion=crit, max_len=16, engine="static")
        compiled = tree_decode(model, src, shape, k=4, criterion=crit, max_len=16, engine="compiled")
        assert compiled.tokens == static.tokens and compiled.block_sizes == static.block_sizes, (shape, crit)
        assert max(max(b) for b in static.block_sizes) > 1
        if crit == criteria.Exact():
            assert compiled.tokens == greedy_decode(model, src, max_len=16, engine="static").tokens
    assert engine_for(model, "compiled").compile_seconds + engine_for(model, "compiled").load_seconds > 0


def test_static_draft_rounds_are_the_eager_ones():
    """Draft-model decoding on the static path (``bpd.decoding.static_draft``: both models' caches fixed-shape)
    proposes and keeps what the eager rounds do, with an unrelated draft and with the model drafting for itself
    (every block full; the draft's buffers are not the base's), under exact, top-2 and minimum-block-size
    acceptance, at batch 3 and batch 1."""
    from bpd.decoding.methods.draft import draft_decode

    model = random_model(30, 4, seed=4, arch="attend", head_noise=0.05, heads_tied=True)
    for draft in (random_model(30, 1, 11, head_noise=0.0), model):
        for batch in (3, 1):
            src = random_src(batch, 7, 30, seed=5)
            for k, crit in ((4, criteria.Exact()), (2, criteria.TopK(2)), (4, criteria.Exact(min_block_size=2))):
                eager = draft_decode(model, draft, src, k=k, criterion=crit, max_len=25)
                static = draft_decode(model, draft, src, k=k, criterion=crit, max_len=25, engine="static")
                assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes, (k, crit)
                assert static.position_accepted == eager.position_accepted
                assert static.position_reached == eager.position_reached
                assert static.invocations == eager.invocations
    assert all(b == 4 for row in static.block_sizes for b in row[:-1])  # the model as its own draft


@pytest.mark.slow
def test_compiled_draft_rounds_are_the_static_ones():
    """Draft rounds through compiled packages (the draft's weights inside the package, beside the base's) keep the
    static path's blocks, at batch 2 and batch 1; exact acceptance gives greedy's tokens."""
    from bpd.decoding.methods.draft import draft_decode

    model = random_model(40, 4, seed=2, arch="attend", head_noise=0.05, heads_tied=True, dtype=torch.float32)
    draft = random_model(40, 1, 3, head_noise=0.0, dtype=torch.float32)
    for batch, crit in ((2, criteria.Exact()), (1, criteria.TopK(2))):
        src = random_src(batch, 6, 40, seed=3)
        static = draft_decode(model, draft, src, k=3, criterion=crit, max_len=16, engine="static")
        compiled = draft_decode(model, draft, src, k=3, criterion=crit, max_len=16, engine="compiled")
        assert compiled.tokens == static.tokens and compiled.block_sizes == static.block_sizes, crit
        if crit == criteria.Exact():
            assert compiled.tokens == greedy_decode(model, src, max_len=16, engine="static").tokens


@pytest.mark.parametrize("arch", ["attend", "medusa"])
def test_static_rescored_rounds_are_the_eager_ones(arch):
    """The rescored chain on the static path (``bpd.decoding.static_rescore``) chooses and keeps the eager rescorer's
    blocks, under exact, top-2 and minimum-block-size acceptance, at batch 3 and batch 1."""
    from bpd.decoding.methods.rescore import NgramLM, Rescorer
    from bpd.decoding.static_rescore import rescored_decode_static

    model = random_model(30, 4, seed=4, arch=arch, head_noise=0.05, heads_tied=arch == "attend")
    lm = NgramLM.fit(greedy_decode(model, random_src(2, 7, 30, seed=5), max_len=25).tokens, 30, model.bos_id)
    for batch in (3, 1):
        src = random_src(batch, 7, 30, seed=5)
        for k, crit in ((4, criteria.Exact()), (2, criteria.TopK(2)), (4, criteria.Exact(min_block_size=2))):
            eager = blockwise_decode(model, src, k=k, criterion=crit, max_len=25, proposer=Rescorer(lm, 2, 1.0))
            static = rescored_decode_static(engine_for(model, "static"), src, k, crit, lm, 2, 1.0, 25)
            assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes, (k, crit)
            assert static.position_accepted == eager.position_accepted
            assert static.position_reached == eager.position_reached
            assert static.invocations == eager.invocations
    assert max(max(b) for b in eager.block_sizes) > 1


@pytest.mark.slow
def test_compiled_rescored_rounds_are_the_static_ones():
    """Rescored rounds through compiled packages (the n-gram tables inside the package) keep the static path's
    blocks, at batch 2 and batch 1; exact acceptance gives greedy's tokens."""
    from bpd.decoding.methods.rescore import NgramLM
    from bpd.decoding.static_rescore import rescored_decode_static

    model = random_model(40, 4, seed=2, arch="attend", head_noise=0.05, heads_tied=True, dtype=torch.float32)
    lm = NgramLM.fit(greedy_decode(model, random_src(2, 6, 40, seed=4), max_len=16).tokens, 40, model.bos_id)
    for batch, crit in ((2, criteria.Exact()), (1, criteria.TopK(2))):
        src = random_src(batch, 6, 40, seed=3)
        static = rescored_decode_static(engine_for(model, "static"), src, 3, crit, lm, 2, 0.5, 16)
        compiled = rescored_decode_static(engine_for(model, "compiled"), src, 3, crit, lm, 2, 0.5, 16)
        assert compiled.tokens == static.tokens and compiled.block_sizes == static.block_sizes, crit
        if crit == criteria.Exact():
            assert compiled.tokens == greedy_decode(model, src, max_len=16, engine="static").tokens


def test_precompiling_grows_the_position_table_once_before_any_shape():
    """A longer shape grows the sinusoidal position table, which voids the guards of graphs traced before it (in
    `make bench`, a sentence of a shorter bucket then raised at its first timed call). ``precompile`` grows the
    table to the largest capacity first, so every shape is traced with the final table, and the engine checks
    a shape's guards in full again whenever the table has changed since it was compiled."""
    from bpd.decoding.engine import StaticEngine
    from bpd.decoding.timed import precompile
    from bpd.models.transformer import sinusoidal_table

    model = random_model(30, 5, seed=4, arch="attend")
    model.pos_table = sinusoidal_table(32, model.pos_table.shape[1])
    short, long = random_src(1, 5, 30, seed=5), random_src(1, 40, 30, seed=6)
    seen, call = [], StaticEngine.call

    def recording(self, key, make, *args):
        seen.append(model.pos_table.shape[0])
        return call(self, key, make, *args)

    specs = [DecodeSpec("greedy", engine="static"), DecodeSpec("blockwise", k=3, engine="static")]
    StaticEngine.call = recording
    try:
        precompile(model, [short, long, short], specs, lambda src: 20)
    finally:
        StaticEngine.call = call
    assert seen and set(seen) == {model.pos_table.shape[0]} and seen[0] > 64
    engine = engine_for(model, "static")
    engine.shapes.add(("probe",))
    model.pos_table = sinusoidal_table(2 * model.pos_table.shape[0], model.pos_table.shape[1])
    greedy_decode(model, short, max_len=20, engine="static")
    assert ("probe",) not in engine.shapes  # the table changed: no shape is trusted any more


def test_a_weight_read_by_several_products_is_packed_once():
    """Inductor packs a frozen weight for each product that reads it; under the engine's compile options the
    products share one packed copy (a proposal chain projects every slot onto the same vocabulary matrix, and
    tied slots share all their weights): one constant instead of one per product, and the same outputs."""
    import re

    import torch._inductor.config as inductor
    from torch._inductor.utils import run_and_get_code

    from bpd.decoding.compiling import compile_options

    class TwoProducts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.randn(64, 96, generator=torch.Generator().manual_seed(0)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ((x @ self.w)[:, :64].relu() + x) @ self.w

    model, x = TwoProducts().eval(), torch.randn(1, 64, generator=torch.Generator().manual_seed(1))
    plain = inductor.patch(freezing=True, cpp_wrapper=True, max_autotune=True, max_autotune_gemm_backends="CPP",
                           autotune_num_choices_displayed=0)
    packed = {}
    for name, options in (("engine", compile_options(gpu=False)), ("plain", plain)):
        torch._dynamo.reset()
        with torch.inference_mode(), options:
            out, code = run_and_get_code(torch.compile(model.forward, fullgraph=True), x)
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
        # the weight argument of each product: `(const float*)(constantN.data_ptr())`, second after the input
        packed[name] = set(re.findall(r"\(const float\*\)\(\w+\.data_ptr\(\)\), \(const float\*\)\((constant\w*)",
                                      "\n".join(code)))
    torch._dynamo.reset()
    assert len(packed["engine"]) == 1 and len(packed["plain"]) == 2, packed


def test_compiled_engine_decodes_as_the_static_one(monkeypatch):
    """The compiled functions (inductor, frozen weights) in float32 on the demo's head design: greedy, exact and
    top-2 give the static path's tokens and blocks, and a second k reuses the engine without mixing its graphs
    up. Windows of 4 cache entries: one package per function serves every window. Compile time is counted apart."""
    seen = spy_windows(monkeypatch, 4)
    model = random_model(40, 4, seed=2, arch="attend", head_noise=0.05, heads_tied=True, dtype=torch.float32)
    src = random_src(2, 6, 40, seed=3)
    g = greedy_decode(model, src, max_len=16, engine="static")
    seen.clear()
    assert greedy_decode(model, src, max_len=16, engine="compiled").tokens == g.tokens
    assert len(engine_for(model, "compiled").packages[("greedy",)]) == 1 and len(set(seen)) >= 4
    for k, crit in ((4, criteria.Exact()), (2, criteria.Exact()), (4, criteria.TopK(2)), (4, criteria.Exact())):
        static = blockwise_decode(model, src, k=k, criterion=crit, max_len=16, engine="static")
        compiled = blockwise_decode(model, src, k=k, criterion=crit, max_len=16, engine="compiled")
        assert compiled.tokens == static.tokens and compiled.block_sizes == static.block_sizes, (k, crit)
        if crit == criteria.Exact():
            assert compiled.tokens == g.tokens
    assert engine_for(model, "compiled").compile_seconds > 0


# (untied slots' int8 chains in make test-all: make test keeps the tied case, and the property test runs both on
# the static path, whose functions these are)
@pytest.mark.parametrize("tied", [pytest.param(False, marks=pytest.mark.slow), True])
def test_compiled_int8_chains_are_traced_and_decode_exactly(tied):
    """int8 proposal chains compile with the rest of the round (weight-only int8 products in the graph): exact
    decoding gives greedy's tokens, and the blocks are the static path's (the same int8 tables, run uncompiled)."""
    model = random_model(40, 4, seed=2, arch="attend", head_noise=0.3, heads_tied=tied, dtype=torch.float32)
    model.heads.set_proposal_precision("int8")
    src = random_src(2, 6, 40, seed=3)
    g = greedy_decode(model, src, max_len=16, engine="static")
    static = blockwise_decode(model, src, k=4, criterion=criteria.Exact(), max_len=16, engine="static")
    compiled = blockwise_decode(model, src, k=4, criterion=criteria.Exact(), max_len=16, engine="compiled")
    assert compiled.tokens == static.tokens == g.tokens
    assert compiled.block_sizes == static.block_sizes and max(max(b) for b in static.block_sizes) > 1
    assert engine_for(model, "compiled").compile_seconds > 0


def spy_windows(monkeypatch, step: int) -> list[int]:
    """Windows of ``step`` cache entries (``engine.WINDOW_STEP``); the list fills with every window a call used."""
    from bpd.decoding import engine

    monkeypatch.setattr(engine, "WINDOW_STEP", step)
    seen: list[int] = []
    window = engine.StaticEngine.window
    monkeypatch.setattr(engine.StaticEngine, "window", lambda self, b, n: seen.append(window(self, b, n)) or seen[-1])
    return seen


def test_calls_attend_over_a_window_that_grows_with_the_longest_row(monkeypatch):
    """The static path attends over the cache up to a window past the longest live row (``StaticEngine.window``),
    not its whole capacity: with windows of 4 entries a decode crosses many of them, and every row (ragged
    sources, rows finishing at different rounds, blocks of several tokens) still decodes as on the eager path.
    (The compiled path under the same windows: the next test.)"""
    seen = spy_windows(monkeypatch, 4)
    model = random_model(30, 4, seed=4, arch="attend", head_noise=0.05, heads_tied=True)
    src = random_src(3, 7, 30, seed=5)
    assert greedy_decode(model, src, max_len=25, engine="static").tokens == greedy_decode(model, src, max_len=25).tokens
    for crit in (criteria.Exact(), criteria.TopK(2)):
        eager = blockwise_decode(model, src, k=4, criterion=crit, max_len=25)
        static = blockwise_decode(model, src, k=4, criterion=crit, max_len=25, engine="static")
        assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes, crit
    assert max(max(b) for b in eager.block_sizes) > 1
    assert len(set(seen)) >= 5 and max(seen) < engine_for(model, "static").capacity(25, 16)


@pytest.mark.parametrize("arch", ["attend", "recurrent", "paper", "blockdiag", "medusa"])
def test_compiled_proposals_are_the_static_ones(arch):
    """The proposals themselves, not only the accepted tokens: a compiled slot that multiplies by another slot's
    weights still decodes exactly (verification catches every wrong guess) and only accepts shorter blocks.
    Slots whose weights are slices of one parameter (untied attend slots, the paper's layer) are the case
    that needs it: inductor's CPU GEMM template prepacks a frozen slice from its storage's start. The block
    proposal is compiled alone, as the engine compiles its functions (a round's compile costs a minute)."""
    from bpd.decoding.static_steps import decoding_tables, propose_block

    model = random_model(40, 4, seed=6, arch=arch, head_noise=0.5, dtype=torch.float32)
    e = engine_for(model, "compiled")
    b = e.begin(random_src(3, 6, 40, seed=7), 12)
    tables = decoding_tables(model)
    g = torch.Generator().manual_seed(8)
    h = torch.randn(3, model.heads.d_model, generator=g) * 3
    first = torch.randint(0, 40, (3, 1), generator=g)

    def propose(h, first, source):
        return propose_block(model, h, first, 4, source, tables)

    with torch.inference_mode():
        want = propose(h, first, b.source)
        got = e.call(("propose", arch), lambda: propose, h, first, b.source)
    assert torch.equal(got, want), (arch, want.tolist(), got.tolist())
    assert len({tuple(r) for r in want[:, 1:].tolist()}) > 1  # proposals that depend on the state


def test_compiled_rounds_propose_as_the_static_ones(monkeypatch):
    """The same through whole compiled rounds, where untied attend slots showed it (slot 2's query read with slot
    1's projection; compiling the proposal alone, above, does not reproduce that case)."""
    from bpd.decoding.engine import StaticEngine

    model = random_model(40, 4, seed=6, arch="attend", head_noise=0.5, dtype=torch.float32)
    src = random_src(3, 6, 40, seed=7)
    seen: dict[bool, list] = {False: [], True: []}
    round_ = StaticEngine.round

    def spy(self, b, k, criterion, floor, props):
        seen[self.compiled].append(props.clone())
        return round_(self, b, k, criterion, floor, props)

    monkeypatch.setattr(StaticEngine, "round", spy)
    for engine in ("static", "compiled"):
        blockwise_decode(model, src, k=4, criterion=criteria.Exact(), max_len=12, engine=engine)
    assert len(seen[True]) == len(seen[False]) > 1
    for i, (a, b) in enumerate(zip(seen[False], seen[True], strict=True)):
        assert torch.equal(a, b), (i, a.tolist(), b.tolist())


def test_compiled_engine_takes_products_the_gemm_template_does_not():
    """A product of integers is not one inductor's CPU GEMM template takes: the function compiles again with
    ATen's kernels beside the template (``StaticEngine.call``) instead of failing."""
    model = random_model(30, 2, seed=8, arch="attend")
    e = engine_for(model, "compiled")
    a, b = torch.randint(0, 5, (4, 64)), torch.randint(0, 5, (64, 32))
    out = e.call(("int mm",), lambda: lambda x, y: x @ y, a, b)
    assert torch.equal(out, a @ b)
    assert e.compile_seconds > 0


@pytest.mark.parametrize("dynamic", [True, False])
def test_compiled_graphs_per_source_bucket(dynamic):
    """On a CPU one compiled greedy graph serves every source bucket (evaluations), or one graph per bucket
    inside ``graph_per_bucket`` (the benchmarks); the tokens are the static path's either way."""
    import contextlib

    from bpd.decoding import compiling

    model = random_model(30, 2, seed=6, arch="attend").eval()
    with contextlib.nullcontext() if dynamic else compiling.graph_per_bucket():
        for width in (7, 20, 40):  # buckets 16, 32, 64
            src = random_src(1, width, 30, seed=width)
            assert (greedy_decode(model, src, max_len=12, engine="compiled").tokens
                    == greedy_decode(model, src, max_len=12, engine="static").tokens)
    assert len(engine_for(model, "compiled").packages[("greedy",)]) == (1 if dynamic else 3)
    assert compiling.DYNAMIC_BUCKETS  # the evaluations' setting again


def test_the_positions_cover_a_shape_before_its_first_step():
    """A step compiled while the sinusoidal table was shorter than its cache rebuilt the whole table at every call
    (a 512-token source bucket's greedy step: ~9 ms against ~1): the engine grows the table before a shape's
    first step, eagerly, so a traced step only looks it up."""
    model = random_model(30, 3, seed=2)
    model.cover_positions(1)
    model.pos_table = model.pos_table[:20].clone()  # as short as a fresh small model's
    engine = engine_for(model, "static")
    src = random_src(1, 40, 30, seed=3)
    b = engine.begin(src, 30)
    capacity = b.cache.k[0].shape[2]
    assert capacity >= 80 and model.pos_table.shape[0] >= capacity
    grown = model.pos_table
    step = engine.greedy(src, 30)  # decoding the same shape leaves the table as it is
    assert model.pos_table is grown and step.tokens == greedy_decode(model, src, max_len=30).tokens


def test_new_weights_make_a_new_engine():
    """The compiled graphs hold the weights as constants: after an in-place change the next decode builds them
    anew instead of decoding with the old weights."""
    model = random_model(20, 3, seed=1, arch="recurrent", head_noise=0.05)
    src = random_src(1, 5, 20, seed=1)
    first = engine_for(model, "static")
    assert engine_for(model, "static") is first
    with torch.no_grad():
        model.tgt_embed.weight.mul_(-1.0)
    assert engine_for(model, "static") is not first
    assert greedy_decode(model, src, max_len=10, engine="static").tokens == greedy_decode(model, src, 10).tokens


def test_methods_without_a_static_path_decode_eagerly():
    model = random_model(20, 3, seed=1, arch="recurrent", head_noise=0.05)
    src = random_src(2, 5, 20, seed=1)
    beam = DecodeSpec("beam", beam={"size": 2})
    assert beam.entry.engine_of("compiled") == "eager"
    assert DecodeSpec("blockwise", k=3).entry.engine_of("compiled") == "compiled"
    eager = beam.entry.decode(model, src, 8, beam.options)
    assert beam.entry.decode(model, src, 8, beam.on("static").options).tokens == eager.tokens


def test_bad_engines_are_refused_with_the_fix():
    model = random_model(12, 2, seed=0, arch="medusa")
    src = random_src(1, 3, 12, seed=0)
    with pytest.raises(ValueError, match="use one of eager, static, compiled"):
        greedy_decode(model, src, 5, engine="fast")
    with pytest.raises(ValueError, match="decode.engine 'jit'"):
        DecodeConfig(engine="jit").validate()
    with pytest.raises(ValueError, match="custom proposer decodes on the eager path"):
        blockwise_decode(model, src, k=2, max_len=5, engine="static", proposer=lambda *a: None)


def test_bench_times_both_paths_in_the_same_passes():
    """``bench.engines``: each path's rows take greedy on that path as reference; the static path's rows also carry
    their paired speedup over eager greedy, and every row its floor (weight bytes over the bandwidth)."""
    from bpd.bench.floor import step_bytes
    from bpd.bench.rows import format_bench, format_floors
    from bpd.bench.timing import BenchPlan, Reporting, TimingPolicy, run_bench

    model = random_model(24, 4, 0, arch="attend", head_noise=0.05, heads_tied=True, dtype=torch.float32)
    sources = [row.tolist() for row in random_src(6, 6, 24, 0, ragged=False)]
    specs = [DecodeSpec("greedy"), DecodeSpec("naive_greedy"), DecodeSpec("blockwise", k=3)]
    rows, _ = run_bench(model, sources, BenchPlan(specs, [1], lambda s: 12, engines=["eager", "static"]),
                        torch.device("cpu"), TimingPolicy(repeats=2, step_repeats=5),
                        Reporting(common={"heads_arch": "attend"}, bandwidth=1e10, llc=2**20))
    by = {(r["engine"], r["decoder"]): r for r in rows}
    assert set(by) == {("eager", "greedy"), ("eager", "naive_greedy"), ("eager", "blockwise_k3_exact"),
                       ("static", "greedy"), ("static", "blockwise_k3_exact")}  # no static path, no static row
    assert by["static", "blockwise_k3_exact"]["identical_to_greedy"] == 1.0
    assert by["static", "blockwise_k3_exact"]["mean_block_size"] == by["eager", "blockwise_k3_exact"]["mean_block_size"]
    assert by["static", "greedy"]["speedup"] == 1.0 and by["static", "greedy"]["speedup_vs_base_greedy"] > 0
    assert by["eager", "greedy"].get("speedup_vs_base_greedy") is None
    nbytes = step_bytes(model, [3])
    r = by["static", "blockwise_k3_exact"]
    assert r["tk_floor_ms"] == pytest.approx(nbytes["t3"] / 1e10 * 1e3) and r["tk_vs_floor"] > 0
    assert "static" in format_bench(rows) and "t_3" in format_floors(rows)
    assert r["llc_mb"] == 1.0 and "last-level cache 1 MiB" in format_floors(rows)
    fits = r["tk_bytes"] <= 2**20
    assert [line.split()[-1] for line in format_floors(rows).splitlines() if " t_3 " in line] == \
        ["yes" if fits else "no"] * 2  # one line per path


def test_last_level_cache_is_the_highest_data_cache_sysfs_lists(tmp_path):
    from bpd.bench.floor import last_level_cache

    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert last_level_cache(tmp_path) == 32 * 2**20
    assert last_level_cache(tmp_path / "absent") is None


def test_step_bytes_count_what_a_step_reads():
    from bpd.bench.floor import chain_bytes, decoder_bytes

    model = random_model(24, 5, 0, arch="attend", head_noise=0.05, dtype=torch.float32)
    tied = random_model(24, 5, 0, arch="attend", head_noise=0.05, dtype=torch.float32, heads_tied=True)
    layer = model.dec_layers[0]
    per_layer = sum(p.numel() for p in layer.parameters()) - sum(p.numel() for p in layer.cross_attn.kv.parameters())
    d, v = model.cfg.d_model, model.cfg.vocab_size
    assert decoder_bytes(model) == 4 * (model.n_dec_layers * per_layer + 2 * d + v * d)
    assert chain_bytes(model, 1) == 0
    assert chain_bytes(model, 4) > chain_bytes(tied, 4) > 0  # three weight sets against one
    assert chain_bytes(model, 4) - chain_bytes(model, 3) > chain_bytes(tied, 4) - chain_bytes(tied, 3)


def test_image_models_decode_on_the_static_path_unpadded():
    """An image model's source has one fixed length whose positions are grid cells: never padded to a bucket."""
    from conftest import IMAGE_MICRO

    from bpd.decoding.criteria import Distance
    from bpd.models.image_transformer import build_image_model

    model = build_image_model(3, IMAGE_MICRO, lr_size=2, hr_size=4, seed=0).eval()
    src = torch.randint(3, 200, (2, 2 * 2 * 3), generator=torch.Generator().manual_seed(0))
    n = 4 * 4 * 3
    assert engine_for(model, "static").padded(src).shape == src.shape
    assert greedy_decode(model, src, n, engine="static").tokens == greedy_decode(model, src, n).tokens
    crit = Distance(eps=2.0, offset=0)
    eager = blockwise_decode(model, src, k=3, criterion=crit, max_len=n)
    static = blockwise_decode(model, src, k=3, criterion=crit, max_len=n, engine="static")
    assert static.tokens == eager.tokens and static.block_sizes == eager.block_sizes


@pytest.mark.slow
def test_image_models_decode_on_the_compiled_path():
    """make demo-sr's path: an image model (fixed-length source, slots that read ahead) through compiled packages
    gives the static path's pixels and blocks under the distance criterion."""
    from test_superres import ahead_model

    from bpd.decoding.criteria import Distance

    model = ahead_model(seed=3).float()
    src = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(4))
    want = greedy_decode(model, src, 48, engine="static").tokens
    assert greedy_decode(model, src, 48, engine="compiled").tokens == want
    crit = Distance(eps=2.0, offset=0)
    static = blockwise_decode(model, src, k=3, criterion=crit, max_len=48, engine="static")
    compiled = blockwise_decode(model, src, k=3, criterion=crit, max_len=48, engine="compiled")
    assert compiled.tokens == static.tokens and compiled.block_sizes == static.block_sizes
