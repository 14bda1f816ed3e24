"""Benchmark bookkeeping: ratios computed from measured parts, Spec-Bench records consistent with rows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import random_model, random_src

from bpd.bench.rows import bench_rows, format_bench, format_breakdown
from bpd.bench.specbench import specbench_records
from bpd.bench.speedup_ci import SpeedupEstimate, paired_speedup
from bpd.bench.step_costs import StepTiming, step_costs, warm_up
from bpd.bench.timing import BenchPlan, Reporting, TimingPolicy, WarmUp, median_run, run_bench, settle
from bpd.config import BenchConfig, from_dict
from bpd.decoding import criteria
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import RunOutput


@pytest.fixture(scope="module")
def bench():
    model = random_model(24, 4, 0, head_noise=0.05, dtype=torch.float32)
    src = random_src(12, 6, 24, 0, ragged=False)
    sources = [row.tolist() for row in src]
    specs = [DecodeSpec("greedy"), DecodeSpec("naive_greedy")] + [
        DecodeSpec("blockwise", k=k, criterion=c, criterion_param=p) for k in (2, 4) for c, p in
        (("exact", None), ("topk", 2))
    ]
    rows, records = run_bench(model, sources, BenchPlan(specs, [1, 4], lambda s: 12), torch.device("cpu"),
                              TimingPolicy(repeats=2, step_repeats=10), Reporting(common={"heads_arch": "paper"}))
    return model, sources, specs, rows, records


def test_rows_ratios_from_measured_parts(bench):
    _, sources, _, rows, _ = bench
    greedy = {r["batch_size"]: r for r in rows if r["method"] == "greedy"}
    for r in rows:
        if r["method"] != "blockwise":
            continue
        assert r["ideal_speedup"] == pytest.approx(r["mean_block_size"] * r["t1_ms"] / r["tk_ms"])
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["ideal_speedup"])
        n_b = -(-len(sources) // r["batch_size"])
        greedy_ms = n_b * r["t_enc_ms"] + greedy[r["batch_size"]]["invocations"] * r["t1_ms"]
        block_ms = n_b * (r["t_enc_ms"] + r["t_start_ms"]) + (r["invocations"] - n_b) * r["tk_ms"]
        assert r["predicted_speedup"] == pytest.approx(greedy_ms / block_ms)
        assert r["efficiency_vs_predicted"] == pytest.approx(r["speedup"] / r["predicted_speedup"])
        assert r["efficiency"] == pytest.approx(r["efficiency_ceiling"] * r["efficiency_vs_predicted"])
        assert r["step_cost_ratio"] == pytest.approx(r["tk_ms"] / r["t1_ms"])
        assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"] and r["repeats"] == 2
        assert r["speedup_repeat_median"] == pytest.approx((r["speedup_min"] + r["speedup_max"]) / 2)  # 2 repeats
        assert r["tokens_per_s"] == pytest.approx(r["output_tokens"] / r["wallclock_s"])
        if r["criterion"] == "exact":
            assert r["identical_to_greedy"] == 1.0
        # The parts of a round add up to the round: decoder layers + scoring + proposal chain.
        parts = r["step_decoder_ms"] + r["step_scoring_ms"] + r["step_propose_ms"]
        assert parts == pytest.approx(r["step_total_ms"]) and r["step_decoder_ms"] > 0 and r["step_propose_ms"] > 0
    for g in greedy.values():
        assert g["step_decoder_ms"] + g["step_scoring_ms"] == pytest.approx(g["step_total_ms"])
        assert g["step_propose_ms"] is None
    n_exact = sum(r["criterion"] == "exact" for r in rows)
    assert format_breakdown(rows).count("\n") == n_exact + len(greedy) + 1
    assert {r["batch_size"] for r in rows} == {1, 4}
    assert "naive_greedy" not in {r["decoder"] for r in rows if r["batch_size"] == 4}  # batch 1 only
    assert format_bench(rows).count("\n") == len(rows) + 1


def test_naive_baseline_same_tokens_as_greedy(bench):
    _, _, _, rows, _ = bench
    naive = [r for r in rows if r["decoder"] == "naive_greedy"]
    assert naive and all(r["identical_to_greedy"] == 1.0 for r in naive)


def test_specbench_records_consistent_with_rows(bench):
    """Spec-Bench records: one list per batch size and decoder (greedy's the baseline), with the fields its
    evaluation/speed.py reads; its speedup and mean accepted tokens, computed by its documented formula from
    the records, are the rows' speedup_specbench and mean_accepted_tokens."""
    _, sources, _, rows, records = bench
    for r in rows:
        mine = records[f"bpd-b{r['batch_size']}-{r['decoder']}"]
        base = records[f"bpd-b{r['batch_size']}-greedy"]
        assert len(mine) == len(sources) and {x["category"] for x in mine} == {"bench"}
        assert len({x["answer_id"] for x in mine}) == len(mine) and [x["question_id"] for x in mine] == list(
            range(len(sources)))
        ch = [x["choices"][0] for x in mine]
        assert all(sum(c["accept_lengths"]) == c["new_tokens"][0] == len(c["token_ids"][0]) for c in ch)
        assert all(isinstance(c["turns"][0], str) for c in ch)
        assert sum(c["new_tokens"][0] for c in ch) == r["output_tokens"]
        assert sum(c["decoding_steps"][0] for c in ch) == r["iterations"]
        assert {c["wall_time_is"] for c in ch} == ({"example"} if r["batch_size"] == 1 else {"share of a batch of 4"})
        # Spec-Bench's speed.py: mean over examples of tokens / time, method over baseline.
        speeds = [c["new_tokens"][0] / c["wall_time"][0] for c in ch]
        base_speeds = [x["choices"][0]["new_tokens"][0] / x["choices"][0]["wall_time"][0] for x in base]
        assert r["speedup_specbench"] == pytest.approx(np.mean(speeds) / np.mean(base_speeds))
        lengths = [n for c in ch for n in c["accept_lengths"]]
        assert r["mean_accepted_tokens"] == pytest.approx(np.mean(lengths))
        assert r["mean_accepted_tokens"] == pytest.approx(r["output_tokens"] / r["iterations"])


def test_step_costs_measure_each_k():
    model = random_model(24, 4, 1, dtype=torch.float32)
    costs = step_costs(model, random_src(2, 5, 24, 1), [2, 4], timing=StepTiming(repeats=5))
    main = {"t1", "enc", "t2", "t4", "s2", "s4"}
    assert set(costs) == main | {f"part_{p}{k}" for p in "td" for k in (1, 2, 4)} | {"part_p2", "part_p4"}
    assert all(v > 0 for v in costs.values())


def test_warm_up_calls_fast_functions_five_times_slow_ones_twice_and_shared_ones_once():
    import time

    calls = {"fast": 0, "slow": 0}

    def fast() -> None:
        calls["fast"] += 1

    def slow() -> None:
        calls["slow"] += 1
        time.sleep(0.02)

    warm_up([fast, slow, fast], budget_s=0.01)  # slow's first call alone outlasts the budget
    assert calls == {"fast": 5, "slow": 2}


def test_bench_rows_from_synthetic_runs():
    """Hand-made runs: greedy 10 tokens in 10 rounds taking 1.0 s; blockwise 10 tokens in 4 rounds, 0.5 s."""
    g = RunOutput([[5] * 10], [10], [[1] * 10], invocations=10, wallclock_s=1.0)
    b = RunOutput([[5] * 10], [4], [[3, 3, 2, 2]], invocations=5, wallclock_s=0.5,
                  position_reached=[4, 4], position_accepted=[4, 2])
    specs = [DecodeSpec("greedy"), DecodeSpec("blockwise", k=3)]
    costs = {"t1": 2.0, "t3": 4.0, "enc": 1.0, "s3": 3.0}
    costs |= {"part_t1": 2.2, "part_t3": 4.4, "part_d1": 1.5, "part_d3": 2.5, "part_p3": 1.0}
    rows = bench_rows([{"greedy": g, specs[1].name: b}], specs, costs, {"batch_size": 1, "n_batches": 1})
    r = rows[1]
    assert r["mean_block_size"] == 2.5 and r["speedup"] == 2.0
    assert r["ideal_speedup"] == pytest.approx(2.5 * 2.0 / 4.0)
    assert r["efficiency"] == pytest.approx(2.0 / 1.25)
    # Whole run from the step costs: greedy 1 + 10 * 2 = 21 ms; blockwise 1 + 3 (start) + 4 rounds * 4 = 20 ms.
    assert r["predicted_speedup"] == pytest.approx(21 / 20)
    assert r["efficiency_vs_predicted"] == pytest.approx(2.0 / (21 / 20))
    assert r["efficiency_ceiling"] == pytest.approx((21 / 20) / 1.25)  # start call and encoder cost 16%
    assert rows[0]["predicted_speedup"] is None  # greedy is the reference
    assert r["acceptance_rate_per_position"] == [1.0, 0.5]
    # Step parts, from their own timing: the 4.4 ms round is 2.5 ms of decoder layers, 1.0 ms of
    # proposals and 0.9 ms of scoring; the 2.2 ms greedy step 1.5 ms of decoder and 0.7 ms of scoring.
    assert (r["step_total_ms"], r["step_decoder_ms"], r["step_propose_ms"]) == (4.4, 2.5, 1.0)
    assert r["step_scoring_ms"] == pytest.approx(0.9)
    assert (rows[0]["step_total_ms"], rows[0]["step_decoder_ms"], rows[0]["step_propose_ms"]) == (2.2, 1.5, None)
    assert rows[0]["step_scoring_ms"] == pytest.approx(0.7)
    line = format_breakdown(rows).splitlines()[-1].split()
    assert line[1] == "k=3" and line[-2:] == ["2.00", "1.67"]  # 4.4 / 2.2 and 2.5 / 1.5
    slow, fast = (RunOutput([[5]], [1], [[1]], wallclock_s=w) for w in (3.0, 0.1))
    assert median_run([slow, b, fast]) is b and median_run([slow, fast]) is fast  # the records' repeat
    rec = specbench_records(b, "m-blockwise", "toy", detok=lambda t: "x" * len(t))
    assert rec[0]["choices"][0]["accept_lengths"] == [3, 3, 2, 2] and rec[0]["choices"][0]["turns"] == ["x" * 10]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"batch_sizes": [0]}, "bench.batch_sizes"),
        ({"batch_sizes": []}, "bench.batch_sizes"),
        ({"ks": [0, 2]}, "bench.ks"),
        ({"dtype": "float8"}, "bench.dtype"),
        ({"archs": ["medusa", "foo"]}, "bench.archs"),
        ({"criteria": [{"name": "vibes"}]}, "unknown acceptance criterion"),
        ({"n_examples": {1: 0, 8: 64}}, "bench.n_examples"),
    ],
)
def test_bad_options_are_refused_before_any_work(kw, match):
    opts = {"batch_sizes": [1, 8], "ks": [2, 4], "dtype": "float32", "archs": ["recurrent"],
            "criteria": [{"name": "exact"}, {"name": "topk", "param": 2}]}
    from_dict(BenchConfig, opts).validate()  # the defaults pass
    with pytest.raises(ValueError, match=match):
        from_dict(BenchConfig, {**opts, **kw}).validate()


def test_bench_entry_point_on_a_toy_model(tmp_path, capsys):
    """`make bench`'s entry point end to end on a toy corpus: it trains the missing model, then writes rows
    (one per batch size and decoder, with provenance) and Spec-Bench records, and prints both tables."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    from toy import toy_config, toy_task

    # By file, not `import bench`: the repository's bench/ folder would shadow it as a namespace package.
    experiments = Path(__file__).resolve().parents[1] / "experiments"
    sys.path.insert(0, str(experiments))  # for its `from _common import ...`
    spec = importlib.util.spec_from_file_location("bench_entry", experiments / "bench.py")
    bench_entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_entry)
    from _schemas import BenchEntry

    out = tmp_path / "bench"
    cfg = toy_config(tmp_path, name="toy")
    bench = from_dict(BenchConfig, {
        "batch_sizes": [1, 2], "ks": [2, 3, 10], "criteria": [{"name": "exact"}], "repeats": 1,
        "n_examples": {1: 3, 2: 4}, "methods": {"naive_greedy": True}, "archs": None, "arch_train_steps": 5,
        "dtype": "float32", "compile": False, "step_repeats": 3, "results_dir": str(out),
        "specbench_records": True, "engines": ["eager", "static"],
    })
    rows = bench_entry.run(cfg, BenchEntry(bench=bench))
    static = [(r["batch_size"], r["decoder"]) for r in rows if r["engine"] == "static"]
    assert static == [(1, "greedy"), (1, "blockwise_k2_exact"), (1, "blockwise_k3_exact"),
                      (2, "greedy"), (2, "blockwise_k2_exact"), (2, "blockwise_k3_exact")]  # no naive greedy there
    assert all(r["t1_floor_ms"] > 0 for r in rows)
    rows = [r for r in rows if r["engine"] == "eager"]
    assert [(r["batch_size"], r["decoder"]) for r in rows] == [
        (1, "greedy"), (1, "naive_greedy"), (1, "blockwise_k2_exact"), (1, "blockwise_k3_exact"),
        (2, "greedy"), (2, "blockwise_k2_exact"), (2, "blockwise_k3_exact"),
    ]  # k = 10 is above the trained k = 3: skipped
    assert all(r["identical_to_greedy"] == 1.0 for r in rows)
    assert {r["heads_targets"] for r in rows} == {"gold"} and {r["source_experiment"] for r in rows} == {"toy"}
    assert all(r["train_steps"] == 20 and r["n_examples"] == (3 if r["batch_size"] == 1 else 4) for r in rows)
    written = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["decoder"] for r in written if r["engine"] == "eager"] == [r["decoder"] for r in rows]
    files = sorted(f for f in (out / "specbench").glob("*/*.jsonl") if "@" not in f.name)  # the eager path's
    assert [f.stem.rsplit("-", 1)[-1] for f in files if "-b1-" in f.name] == [
        "blockwise_k2_exact", "blockwise_k3_exact", "greedy", "naive_greedy"]
    recs = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert len(recs) == sum(r["n_examples"] for r in rows)

    task = toy_task(cfg)
    assert {r["category"] for r in recs} == {"folder"}
    assert all(r["choices"][0]["turns"][0] == task.detokenize(r["choices"][0]["token_ids"][0]) for r in recs)
    printed = capsys.readouterr().out
    assert "ceil" in printed and "where a step's time goes" in printed and "against eager greedy" in printed
    assert "each step against its floor" in printed
    assert "bench.ks [10]: above the heads' k=3, skipped" in printed
    # Nothing left to time but greedy: refused before any model is looked for or trained.
    assert BenchConfig().specbench_records is False  # records only on demand: megabytes per run
    with pytest.raises(ValueError, match=r"bench.ks \[10, 20\] are all above the heads' k=3"):
        bench_entry.run(toy_config(tmp_path / "none", name="toy"),
                        BenchEntry(bench=dataclasses.replace(bench, ks=[10, 20])))
    assert not (tmp_path / "none").exists() or not any((tmp_path / "none").rglob("*.pt"))


def test_paired_speedup_interval():
    """The paired estimate and its bootstrap interval (bpd.bench.speedup_ci): exact on noise-free times, immune to
    drift that hits both sides of a pair alike, narrower with more repeats, and refusing unpaired input."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0.01, 0.05, size=(1, 50))
    exact = paired_speedup(np.repeat(base, 3, 0), np.repeat(base, 3, 0) / 2)
    assert (exact.speedup, exact.low, exact.high, exact.halfwidth) == (pytest.approx(2.0),) * 3 + (pytest.approx(0),)
    # Each repeat ran on a machine up to 2x slower, but greedy and the method of a pair shared it.
    drift = rng.uniform(1.0, 2.0, size=(5, 1))
    paired = paired_speedup(base * drift, base * drift / 1.5)
    assert paired.speedup == pytest.approx(1.5) and paired.halfwidth < 1e-9
    # The same drift, unpaired (the method's repeats in another order): the interval widens.
    assert paired_speedup(base * drift, base * drift[::-1] / 1.5).halfwidth > 0.05

    def noisy(reps: int) -> SpeedupEstimate:
        noise = lambda: 1 + 0.2 * rng.standard_normal((reps, 50))  # noqa: E731
        return paired_speedup(base * noise(), base / 1.5 * noise())

    few, many = noisy(3), noisy(30)
    assert many.halfwidth < few.halfwidth and many.low <= 1.5 <= many.high
    assert not np.isfinite(paired_speedup(base, base).halfwidth)  # one repeat: no interval to claim
    with pytest.raises(ValueError, match="same shape|one shape"):
        paired_speedup(base, np.ones((1, 49)))


@pytest.mark.parametrize("target, reps", [(10.0, 2), (1e-12, 4)])
def test_bench_repeats_until_the_interval_is_narrow(target, reps):
    """A loose target stops at the minimum repeats; an unreachable one runs to the cap, and says so."""
    model = random_model(24, 4, 0, head_noise=0.05, dtype=torch.float32)
    sources = [row.tolist() for row in random_src(4, 6, 24, 0, ragged=False)]
    specs = [DecodeSpec("greedy"), DecodeSpec("blockwise", k=2)]
    plan = BenchPlan(specs, [1], lambda s: 12)
    rows, _ = run_bench(model, sources, plan, torch.device("cpu"),
                        TimingPolicy(repeats=2, max_repeats=4, ci_target=target, step_repeats=2))
    assert {r["repeats"] for r in rows} == {reps}
    assert rows[1]["ci_target_met"] is (target == 10.0) and rows[1]["warmup_passes"] >= 2
    # Batch sizes outside ci_batch_sizes take the minimum passes and claim no target.
    rows, _ = run_bench(model, sources, dataclasses.replace(plan, batch_sizes=[1, 2]), torch.device("cpu"),
                        TimingPolicy(repeats=2, max_repeats=4, ci_target=target, step_repeats=2, ci_batch_sizes=[1]))
    by_bs = {(r["batch_size"], r["decoder"]): r for r in rows}
    assert by_bs[(1, "blockwise_k2_exact")]["repeats"] == reps and by_bs[(2, "blockwise_k2_exact")]["repeats"] == 2
    assert by_bs[(2, "blockwise_k2_exact")]["ci_target_met"] is None and by_bs[(2, "greedy")]["ci_target"] is None


def test_settle_compares_heads_long_enough_to_time(monkeypatch):
    """Warm-up compares passes over enough sentences to take min_s (a few short batch-1 sentences are noise):
    the head grows first, then two agreeing passes end it; a time that never settles runs to the cap."""
    seen: list[int] = []

    def fake(model, sources, specs, max_len, **kw):
        seen.append(len(sources))
        t = 0.05 * len(sources) * {2: 1.3, 3: 1.1}.get(len(seen), 1.0)  # slower first passes, then steady
        return {"greedy": RunOutput([], [], [], wallclock_s=t)}

    monkeypatch.setattr("bpd.bench.timing.decode_and_time", fake)
    passes = settle(None, [[5]] * 200, [], None, 1, torch.device("cpu"), until=WarmUp(min_s=1.0))
    assert seen == [4, 24, 24, 24, 24] and passes == 5
    seen.clear()

    def alternating(model, sources, specs, max_len, **kw):
        seen.append(len(sources))
        return {"greedy": RunOutput([], [], [], wallclock_s=2.0 + len(seen) % 2)}

    monkeypatch.setattr("bpd.bench.timing.decode_and_time", alternating)
    assert settle(None, [[5]] * 200, [], None, 1, torch.device("cpu"), until=WarmUp(max_passes=6)) == 6


def test_tree_rows_beside_the_chain():
    """Tree verification in the bench: its own rows, timed rounds (t_k of the tree), greedy's outputs."""
    from bpd.config import CriterionConfig, MethodsConfig
    from bpd.decoding.method import Plan
    from bpd.decoding.spec import specs_for

    model = random_model(24, 4, 0, head_noise=0.3, dtype=torch.float32)
    sources = [row.tolist() for row in random_src(4, 6, 24, 0, ragged=False)]
    specs = [DecodeSpec("greedy"), DecodeSpec("blockwise", k=4)]
    plan = Plan((2, 4), (CriterionConfig("exact"),))
    specs += [s for s in specs_for(plan, MethodsConfig(tree=["3x2", "beam2"])) if s.method == "tree"]
    assert [s.name for s in specs[2:]] == ["tree_3x2x1_k4_exact", "tree_beam2_k2_exact", "tree_beam2_k4_exact"]
    rows, _ = run_bench(model, sources, BenchPlan(specs, [1, 2], lambda s: 12), torch.device("cpu"),
                        TimingPolicy(repeats=1, step_repeats=2))
    trees = [r for r in rows if r["method"] == "tree"]
    assert len(trees) == 6 and all(r["identical_to_greedy"] == 1.0 and r["tk_ms"] > 0 for r in trees)
    assert {(r["tree"], r["tree_nodes"]) for r in trees} == {("3x2x1", 16), ("beam2", 3), ("beam2", 7)}
    assert all(r["ideal_speedup"] == pytest.approx(r["mean_block_size"] * r["t1_ms"] / r["tk_ms"]) for r in trees)
    # Against the chain, paired in the same repeats: only where a chain of that k was timed (k = 4, not 2); with
    # one repeat it is the two speedups' ratio over greedy exactly.
    chain = {r["batch_size"]: r for r in rows if r["method"] == "blockwise"}
    for r in trees:
        if r["k"] == 4:
            assert r["speedup_vs_chain"] == pytest.approx(r["speedup"] / chain[r["batch_size"]]["speedup"])
        else:
            assert r["speedup_vs_chain"] is None
    assert all(r["speedup_vs_chain"] is None for r in rows if r["method"] != "tree")
    assert "against the chain at the same k" in format_bench(rows)


@pytest.mark.parametrize("arch", ["medusa", "paper", "recurrent"])
def test_combined_round_proposes_what_the_chain_proposes(arch):
    """The paper's all-positions round (bpd/bench/cost_model.py) and today's chain round + propose give the same next
    block and leave the cache alike: the two designs the cost model compares do the same work."""
    from bpd.bench.cost_model import combined_round
    from bpd.decoding.methods.blockwise import propose, run_round, start

    model = random_model(24, 4, 1, arch=arch, head_noise=0.05, identity_p1=True)
    src = random_src(3, 6, 24, 1)
    with torch.inference_mode():
        enc = model.encode(src)
        c1, c2 = model.new_cache(3, 30), model.new_cache(3, 30)
        bos = torch.full((3, 1), model.bos_id, dtype=torch.long)
        props = start(model, bos, enc, c1, 4)
        start(model, bos, enc, c2, 4)
        for _ in range(3):
            r = run_round(model, props, enc, c1, criteria.Exact(), 4, 1)
            chain_next = propose(model, r.h_last, r.first, 4)
            comb_next = combined_round(model, props, enc, c2, 4)
            assert torch.equal(chain_next, comb_next) and c1.host_lengths == c2.host_lengths
            props = chain_next


def test_bench_scale_figure_from_every_run_on_the_device(tmp_path):
    """Runs append to one rows file; the figure shows the newest row of each configuration measured on the
    newest run's device, float32 and bfloat16 panels alike."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_scale

    def row(dtype, k, speedup, time, device="cpu:a", design="chain"):
        return {"preset": "tiny", "batch_size": 1, "dtype": dtype, "heads_arch": "medusa", "proposal_vocab": None,
                "k": k, "design": design, "predicted_speedup": speedup, "time": time, "device": device}

    rows = [row("float32", 4, 1.0, "1"), row("float32", 4, 2.0, "3"), row("bfloat16", 4, 3.0, "2"),
            row("float32", 4, 9.0, "0", device="cpu:b"), row("float32", 4, 1.5, "2", design="combined")]
    kept = bench_scale.latest(rows)
    assert sorted((r["dtype"], r["design"], r["predicted_speedup"]) for r in kept) == [
        ("bfloat16", "chain", 3.0), ("float32", "chain", 2.0), ("float32", "combined", 1.5)]
    bench_scale.plot(kept, tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 1000


def test_gpu_script_dry_run_on_a_cpu(tmp_path):
    """bench/gpu.sh end to end on a CPU (``DEVICE=cpu QUICK=1``), on a toy task and model given as overrides
    after the script's own: every bench.py call it makes runs and writes rows, on both decode paths where the
    script asks for them, so that a GPU lease is never spent on the script's plumbing. (The static path stands in
    for the compiled one: the same functions, without minutes of compilation.)"""
    import json
    import os
    import subprocess
    from pathlib import Path

    from toy import make_corpus

    repo = Path(__file__).resolve().parents[1]
    corpus = make_corpus(tmp_path / "corpus")
    toy = (f"task=folder task.data_dir={corpus} task.vocab_size=60 task.max_len=16 model=micro train.max_steps=6 "
           "train.warmup_steps=2 train.eval_every=3 train.ckpt_every=3 train.score_every=0 train.best_on=loss "
           "heads_train.max_steps=3 heads.k=4 decode.ks=[2,4] heads.proposal_vocab=null decode.proposal_vocab=null "
           f"distill.max_sources=null paths.cache_dir={tmp_path / 'cache'} paths.shipped_dir={tmp_path / 'none'} "
           "threads=1 bench.batch_sizes=[1] bench.engines=[eager,static]")
    env = {**os.environ, "DEVICE": "cpu", "QUICK": "1", "SCALE": "0", "RESULTS": str(tmp_path / "res"),
           "RECIPE": "", "BENCH_EXTRA": toy, "OUT": str(tmp_path / "out"), "WANDB_MODE": "disabled"}
    (tmp_path / "out").mkdir()
    done = subprocess.run(["bash", str(repo / "bench" / "gpu.sh")], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "res" / "rows.jsonl").read_text().splitlines()]
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    assert {r["engine"] for r in rows if r["dtype"] == "float32" and not r.get("tree")} == {"eager", "static"}
    assert any(r.get("tree") for r in rows) and all(r["identical_to_greedy"] == 1.0 for r in rows
                                                    if r["dtype"] == "float32" and r["criterion"] in (None, "exact"))
    assert (tmp_path / "out" / "rows.jsonl").is_file() and (tmp_path / "out" / "specbench.tar.gz").is_file()
    assert "+ bench.py bench.dtype=bfloat16" in done.stdout and "bench_scale" not in done.stdout
