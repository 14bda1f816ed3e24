"""Wall-clock benchmark of greedy vs blockwise decoding, measured side by side in one process.

For each batch size the configurations are decoded on the same inputs, batch by batch, back to back in an
order that rotates from batch to batch (``bpd.decoding.timed.decode_and_time``), after a warm-up that
lasts until greedy's time settles, and the whole pass is repeated until every speedup's 95% bootstrap
interval is within +-``ci_target`` (or ``max_repeats``; at the batch sizes of ``ci_batch_sizes``, batch 1
by default, others take ``repeats`` passes): the speedup is the paired estimate of
``bpd.speedup_ci`` (greedy's total over the method's, per-batch medians over repeats), with its interval.
Separately, the cost of one decoding step is timed in isolation (``bpd.step_costs``): t_1 for a greedy
step and t_k for a blockwise round, so that

    ideal speedup = k_hat * t_1 / t_k        efficiency = measured speedup / ideal speedup

shows how much of what the step costs allow the full decoder actually delivers. The ideal ignores what
every batch pays once: the encoder (t_enc, the same for both) and blockwise's propose-only start call
(t_start,k: decode BOS, p_1, propose). With those timed too, the step costs predict the whole run,

    predicted speedup = (n_b * t_enc + calls_greedy * t_1) / (n_b * (t_enc + t_start,k) + rounds * t_k)

(n_b batches, rounds = blockwise calls - n_b), and speedup / predicted is the share of that prediction
the decoding loop delivers: what is left is bookkeeping between calls and rows finishing inside a batch.
predicted / ideal is the efficiency ceiling those once-per-batch costs leave, so that
efficiency = ceiling * (speedup / predicted). The parts of each step (``step_parts``) say where t_k / t_1
comes from (``format_breakdown``).
"""

from __future__ import annotations

import math
import resource
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bpd.config.methods import Role, role_of
from bpd.data.batches import pad_rows
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import RunOutput, decode_and_time
from bpd.decoding.tree import TreeOptions
from bpd.specbench import specbench_records, specbench_speed
from bpd.speedup_ci import SpeedupEstimate, paired_speedup
from bpd.step_costs import step_costs, step_parts


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a ``bench.dtype`` name (one of ``bpd.config.DTYPES``, checked by ``BenchConfig``)."""
    return getattr(torch, name)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def bench_rows(
    runs: list[dict[str, RunOutput]],
    specs: list[DecodeSpec],
    costs: dict[str, float],
    common: dict[str, Any],
    estimates: dict[str, SpeedupEstimate] | None = None,
    vs_chain: dict[str, SpeedupEstimate] | None = None,
) -> list[dict[str, Any]]:
    """Aggregate repeated runs of one batch size into rows (the speedup, its interval, ideal, efficiency).

    ``speedup`` is the paired estimate of ``estimates`` (``bpd.speedup_ci``) where given, else (hand-made
    runs without per-batch times) the median over repeats of total greedy time / total time, which rows
    also keep as ``speedup_repeat_median``. ``vs_chain`` (``chain_estimates``) gives the decoders beyond
    the paper their paired speedup over the chain."""
    rows = []
    g_runs = [r["greedy"] for r in runs]
    g_iters = sum(g_runs[0].iterations)
    t1, t_enc = costs["t1"], costs.get("enc")
    n_batches = common.get("n_batches")
    for spec in specs:
        outs = [r[spec.name] for r in runs]
        speedups = [g.wallclock_s / o.wallclock_s for g, o in zip(g_runs, outs) if o.wallclock_s > 0]
        iters = sum(outs[0].iterations)
        tokens = sum(len(t) for t in outs[0].tokens)
        khat = g_iters / max(1, iters) if spec.rounds else 1.0
        tk = costs.get(spec.step_cost_key) if spec.step_cost_key else None  # where its step was timed
        ideal = khat * t1 / tk if tk else None
        repeat_median = statistics.median(speedups) if speedups else None
        e = (estimates or {}).get(spec.name)
        c = (vs_chain or {}).get(spec.name)
        speedup = e.speedup if e else repeat_median
        t_start = costs.get(spec.start_cost_key) if spec.start_cost_key else None
        predicted = None
        if tk and t_start is not None and t_enc is not None and n_batches:
            greedy_ms = n_batches * t_enc + g_runs[0].invocations * t1
            rounds = outs[0].invocations - n_batches
            predicted = greedy_ms / (n_batches * (t_enc + t_start) + rounds * tk)
        wall = statistics.median(o.wallclock_s for o in outs)
        identical = sum(a == b for a, b in zip(outs[0].tokens, g_runs[0].tokens)) / max(1, len(outs[0].tokens))
        rows.append(
            {
                **common,
                **spec.columns(),
                "n_examples": len(outs[0].tokens),
                "repeats": len(outs),
                "output_tokens": tokens,
                "iterations": iters,
                "invocations": outs[0].invocations,
                "greedy_iterations": g_iters,
                "mean_block_size": khat,
                "identical_to_greedy": identical,
                "wallclock_s": wall,
                "greedy_wallclock_s": statistics.median(g.wallclock_s for g in g_runs),
                "tokens_per_s": tokens / wall if wall > 0 else None,
                "speedup": speedup,
                "speedup_min": min(speedups) if speedups else None,
                "speedup_max": max(speedups) if speedups else None,
                "speedup_repeat_median": repeat_median,
                "speedup_ci_low": e.low if e else None,
                "speedup_ci_high": e.high if e else None,
                "speedup_ci_halfwidth": e.halfwidth if e else None,  # relative: 0.03 = +-3%
                "speedup_ci_level": e.level if e else None,
                "ci_target_met": e.halfwidth <= common["ci_target"] if e and common.get("ci_target") else None,
                "speedup_vs_chain": c.speedup if c else None,
                "speedup_vs_chain_ci_low": c.low if c else None,
                "speedup_vs_chain_ci_high": c.high if c else None,
                "t1_ms": t1,
                "tk_ms": tk,
                "step_cost_ratio": tk / t1 if tk else None,
                "ideal_speedup": ideal,
                "efficiency": speedup / ideal if (speedup and ideal) else None,
                "t_enc_ms": t_enc,
                "t_start_ms": t_start,
                **step_parts(costs, spec),
                "predicted_speedup": predicted,
                "efficiency_vs_predicted": speedup / predicted if (speedup and predicted) else None,
                # What efficiency a loop with no overhead of its own would reach: the ideal ignores the start
                # call and the encoder, the prediction does not (efficiency = ceiling * vs predicted).
                "efficiency_ceiling": predicted / ideal if (predicted and ideal) else None,
                "acceptance_rate_per_position": [
                    a / r if r else None for a, r in zip(outs[0].position_accepted, outs[0].position_reached)
                ],
            }
        )
    return rows


def median_run(outs: list[RunOutput]) -> RunOutput:
    """The repeat whose total wall time is the median (the lower middle one for an even count): the repeat
    whose per-example records stand beside the rows' median figures."""
    return sorted(outs, key=lambda o: o.wallclock_s)[(len(outs) - 1) // 2]


def settle(model, sources: list[list[int]], specs: list[DecodeSpec], max_len, batch_size: int, device: torch.device,
           criterion_kwargs: dict | None = None, tol: float = 0.03, max_passes: int = 8, aux=None,
           min_s: float = 1.0) -> int:
    """Warm up until step times settle: decode the first batches with every spec, untimed for the rows, until
    greedy's time for them changes by less than ``tol`` between two passes (allocator, caches and clock
    ramp-up first make it fall); returns the passes it took (at most ``max_passes``).

    The batches compared must take greedy at least ``min_s``: a few short sentences at batch 1 take
    milliseconds, where scheduler noise alone exceeds ``tol`` and the warm-up would run to its cap."""
    n = min(len(sources), batch_size * 4)
    prev = None
    for p in range(1, max_passes + 1):
        out = decode_and_time(model, sources[:n], specs, max_len, batch_size=batch_size, device=device,
                              criterion_kwargs=criterion_kwargs, warmup=0, progress=False, aux=aux)
        t = out["greedy"].wallclock_s
        if t < min_s and n < len(sources):  # too short to compare: grow the head and start comparing afresh
            n = min(len(sources), math.ceil(n * 1.2 * min_s / max(t, 1e-3) / batch_size) * batch_size)
            prev = None
            continue
        if prev is not None and abs(t - prev) <= tol * prev:
            return p
        prev = t
    return max_passes


def paired_estimates(runs: list[dict[str, RunOutput]], specs: list[DecodeSpec]) -> dict[str, SpeedupEstimate]:
    """Each spec's paired speedup over greedy from the per-batch times of every repeat (``bpd.speedup_ci``)."""
    g = _batch_times(runs, "greedy")
    return {s.name: paired_speedup(g, _batch_times(runs, s.name)) for s in specs}


def _batch_times(runs: list[dict[str, RunOutput]], name: str) -> np.ndarray:
    """One decoder's (repeats, batches) wall times, the input of ``paired_speedup``."""
    return np.array([r[name].batch_wall_s for r in runs])


def chain_estimates(runs: list[dict[str, RunOutput]], specs: list[DecodeSpec]) -> dict[str, SpeedupEstimate]:
    """Each tree, rescored or draft-model spec's paired speedup over the chain (the paper's blockwise decoder)
    at its k and criterion, from the same repeats: whether it beats the chain, not only greedy."""
    chains = {(s.k, s.criterion, s.criterion_param): s for s in specs if s.role is Role.CHAIN and s.min_block_size == 1}
    out = {}
    for s in specs:
        chain = chains.get((s.k, s.criterion, s.criterion_param)) if s.role is Role.BEYOND else None
        if chain is not None:
            out[s.name] = paired_speedup(_batch_times(runs, chain.name), _batch_times(runs, s.name))
    return out


def run_bench(
    model,
    sources: list[list[int]],
    specs: list[DecodeSpec],
    batch_sizes: list[int],
    max_len,
    device: torch.device,
    repeats: int = 3,
    n_examples: dict[int, int] | None = None,
    criterion_kwargs: dict | None = None,
    common: dict[str, Any] | None = None,
    model_id: str = "bpd",
    step_repeats: int = 200,
    category: str = "bench",
    detok: Callable[[list[int]], str] | None = None,
    max_repeats: int | None = None,
    ci_target: float = 0.03,
    aux=None,
    ci_batch_sizes: list[int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Rows, and Spec-Bench records by model id (one file's worth per batch size and decoder; greedy's is the
    baseline) from the median repeat, for every batch size (greedy must be the first spec).

    Each batch size takes at least ``repeats`` passes; those in ``ci_batch_sizes`` (None: all) continue, up to
    ``max_repeats``, until every configuration's 95% interval is within +-``ci_target`` of its speedup; rows
    say whether it got there (and carry no target where none was pursued)."""
    assert specs[0].role is Role.REFERENCE, "greedy is the reference and must come first"
    max_repeats = max(repeats, max_repeats or repeats)
    rows: list[dict[str, Any]] = []
    records: dict[str, list[dict[str, Any]]] = {}
    ks = sorted({s.k for s in specs if s.role is Role.CHAIN})
    trees = [(s.k, s.shape) for s in specs if isinstance(s.options, TreeOptions)]
    for bs in batch_sizes:
        n = min(len(sources), (n_examples or {}).get(bs, len(sources)))
        srcs = sources[:n]
        # Step costs at this batch size, on the first inputs, cache length ~ a typical prefix.
        src = pad_rows(srcs[:bs], model.pad_id, min_width=1).to(device)
        costs = step_costs(model, src, ks, repeats=step_repeats, criterion_kwargs=criterion_kwargs, trees=trees)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        # A method quadratic in length (the naive recompute-everything greedy): batch 1 only, as a reference.
        bs_specs = [s for s in specs if not s.entry.quadratic or bs == 1]
        passes = settle(model, srcs, bs_specs, max_len, bs, device, criterion_kwargs, aux=aux)
        pursue = ci_batch_sizes is None or bs in ci_batch_sizes
        runs: list[dict[str, RunOutput]] = []
        while len(runs) < (max_repeats if pursue else repeats):
            r = len(runs)
            runs.append(decode_and_time(model, srcs, bs_specs, max_len, batch_size=bs, device=device,
                                        criterion_kwargs=criterion_kwargs, warmup=0, desc=f"bench b{bs} r{r}",
                                        rotate=r, aux=aux))
            if len(runs) >= repeats:
                est = paired_estimates(runs, bs_specs[1:])
                if all(e.halfwidth <= ci_target for e in est.values()):
                    break
        est = paired_estimates(runs, bs_specs)
        extra = {**(common or {}), "batch_size": bs, "n_batches": -(-n // bs), "peak_mem_mb": peak_memory_mb(device),
                 "warmup_passes": passes, "max_repeats": max_repeats if pursue else repeats,
                 "ci_target": ci_target if pursue else None}
        bs_rows = bench_rows(runs, bs_specs, costs, extra, est, chain_estimates(runs, bs_specs))
        for spec in bs_specs:
            mid = f"{model_id}-b{bs}-{spec.name}"
            records[mid] = specbench_records(median_run([r[spec.name] for r in runs]), mid, category, detok)
        baseline = records[f"{model_id}-b{bs}-greedy"]
        for row, spec in zip(bs_rows, bs_specs):
            sb = specbench_speed(records[f"{model_id}-b{bs}-{spec.name}"], baseline)
            row["speedup_specbench"], row["mean_accepted_tokens"] = sb["speedup"], sb["mean_accepted_tokens"]
        rows += bs_rows
    return rows, records


def format_breakdown(rows: list[dict[str, Any]]) -> str:
    """Where a step's time goes, per batch size: greedy's step and each k's exact round, in ms and as
    multiples of the greedy step's parts (decoder layers, scoring, proposal chain)."""
    cols = f"{'total':>7} {'decoder':>8} {'scoring':>8} {'propose':>8} {'t/t_1':>6} {'dec/d_1':>7}"
    head = f"{'bs':>3} {'step':<8} {cols}"
    lines = [head, "-" * len(head)]
    g = {r["batch_size"]: r for r in rows if role_of(r["method"]) is Role.REFERENCE}
    for r in rows:
        if r.get("step_decoder_ms") is None or (role_of(r["method"]) is Role.CHAIN and r["criterion"] != "exact"):
            continue
        name = r["decoder"] if role_of(r["method"]) is Role.REFERENCE else f"k={r['k']}"
        prop = r["step_propose_ms"]
        lines.append(
            f"{r['batch_size']:>3} {name:<8} {r['step_total_ms']:7.3f} {r['step_decoder_ms']:8.3f} "
            f"{r['step_scoring_ms']:8.3f} {'-' if prop is None else format(prop, '.3f'):>8} "
            f"{r['step_total_ms'] / g[r['batch_size']]['step_total_ms']:6.2f} "
            f"{r['step_decoder_ms'] / g[r['batch_size']]['step_decoder_ms']:7.2f}"
        )
    return "\n".join(lines)


def format_bench(rows: list[dict[str, Any]]) -> str:
    """The printed table: speedup = the paired estimate with its 95% interval (``bpd.speedup_ci``; [min, max]
    over repeats for rows without one) and the repeats it took; sb =
    Spec-Bench's definition (mean per-example tokens/s over greedy's); eff = speedup / ideal, ceil = the
    efficiency the once-per-batch costs leave, pred = the speedup the step costs predict, eff_p = speedup /
    pred (the loop's own share)."""
    head = (
        f"{'arch':<9} {'bs':>3} {'decoder':<24} {'k_hat':>5} {'tok/s':>8} {'speedup [95% CI]':>18} {'rep':>3} "
        f"{'sb':>5} {'t_k/t_1':>7} "
        f"{'ideal':>6} {'eff':>5} {'ceil':>5} {'pred':>5} {'eff_p':>5} {'=greedy':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        sp = r["speedup"] or float("nan")
        lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
        if lo is None or not np.isfinite(lo) or not np.isfinite(hi):
            lo, hi = r["speedup_min"] or sp, r["speedup_max"] or sp
        rng = f"{sp:5.2f}x [{lo:.2f},{hi:.2f}]"
        f = lambda v, fmt: format(v, fmt) if isinstance(v, int | float) else "-"  # noqa: E731
        lines.append(
            f"{str(r.get('heads_arch')):<9} {r['batch_size']:>3} {r['decoder']:<24} {r['mean_block_size']:5.2f} "
            f"{f(r['tokens_per_s'], '8.0f')} {rng:>18} {r['repeats']:>3} {f(r.get('speedup_specbench'), '5.2f')} "
            f"{f(r['step_cost_ratio'], '7.2f')} "
            f"{f(r['ideal_speedup'], '6.2f')} {f(r['efficiency'], '5.2f')} {f(r.get('efficiency_ceiling'), '5.2f')} "
            f"{f(r.get('predicted_speedup'), '5.2f')} "
            f"{f(r.get('efficiency_vs_predicted'), '5.2f')} {r['identical_to_greedy']:7.2f}"
        )
    versus = [r for r in rows if r.get("speedup_vs_chain") is not None]
    if versus:  # the decoders beyond the paper against the chain itself, paired in the same repeats
        lines += ["", "against the chain at the same k and criterion (paired, 95% interval):"]
        lines += [f"{r['batch_size']:>3} {r['decoder']:<28} {r['speedup_vs_chain']:5.2f}x "
                  f"[{r['speedup_vs_chain_ci_low']:.2f},{r['speedup_vs_chain_ci_high']:.2f}]" for r in versus]
    return "\n".join(lines)
