"""A batch size's timed repeats aggregated into ``make bench`` rows, and the tables printed from them.

Each row holds what the decoder produced (tokens, rounds, k̂, identity with greedy), its speedup over greedy (the
paired estimate of ``bpd.bench.speedup_ci`` with its interval, and the spread over repeats), and what the isolated
step costs (``bpd.bench.step_costs``) make of it: the ideal speedup k̂ · t_1 / t_k, the efficiency, the whole run
predicted from the step costs and the efficiency ceiling the once-per-batch costs leave (``bpd.bench.timing``'s
docstring has the formulas).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from bpd.bench.speedup_ci import SpeedupEstimate
from bpd.bench.step_costs import step_parts
from bpd.config.methods import Role, role_of
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import RunOutput


def bench_rows(
    runs: list[dict[str, RunOutput]],
    specs: list[DecodeSpec],
    costs: dict[str, float],
    common: dict[str, Any],
    estimates: dict[str, SpeedupEstimate] | None = None,
    vs_chain: dict[str, SpeedupEstimate] | None = None,
) -> list[dict[str, Any]]:
    """Aggregate repeated runs of one batch size into rows (the speedup, its interval, ideal, efficiency).

    ``speedup`` is the paired estimate of ``estimates`` (``bpd.bench.speedup_ci``) where given, else (hand-made
    runs without per-batch times) the median over repeats of total greedy time / total time, which rows
    also keep as ``speedup_repeat_median``. ``vs_chain`` (``chain_estimates``) gives the decoders beyond
    the paper their paired speedup over the chain."""
    rows = []
    g_runs = [r[specs[0].key] for r in runs]
    for spec in specs:
        outs = [r[spec.key] for r in runs]
        decoded = decoded_columns(outs, g_runs, spec)
        speed = speedup_columns(outs, g_runs, (estimates or {}).get(spec.key), (vs_chain or {}).get(spec.key),
                                common.get("ci_target"))
        cost = cost_columns(costs, spec, decoded["mean_block_size"], speed["speedup"], outs[0].invocations,
                            g_runs[0].invocations, common.get("n_batches"))
        accepted = [a / r if r else None for a, r in zip(outs[0].position_accepted, outs[0].position_reached)]
        rows.append({**common, **spec.columns(), **decoded, **speed, **cost, "compile_s": outs[0].compile_s,
                     "compile_load_s": outs[0].load_s, "acceptance_rate_per_position": accepted,
                     "baseline": specs[0].baseline})
    return rows


def decoded_columns(outs: list[RunOutput], g_runs: list[RunOutput], spec: DecodeSpec) -> dict[str, Any]:
    """What the decoder produced (the first repeat's outputs) and its median wall time over the repeats."""
    g_iters = sum(g_runs[0].iterations)
    iters = sum(outs[0].iterations)
    tokens = sum(len(t) for t in outs[0].tokens)
    wall = statistics.median(o.wallclock_s for o in outs)
    identical = sum(a == b for a, b in zip(outs[0].tokens, g_runs[0].tokens)) / max(1, len(outs[0].tokens))
    return {
        "n_examples": len(outs[0].tokens),
        "repeats": len(outs),
        "output_tokens": tokens,
        "iterations": iters,
        "invocations": outs[0].invocations,
        "greedy_iterations": g_iters,
        "mean_block_size": g_iters / max(1, iters) if spec.rounds else 1.0,
        "identical_to_greedy": identical,
        "wallclock_s": wall,
        "greedy_wallclock_s": statistics.median(g.wallclock_s for g in g_runs),
        "tokens_per_s": tokens / wall if wall > 0 else None,
    }


def speedup_columns(outs: list[RunOutput], g_runs: list[RunOutput], e: SpeedupEstimate | None,
                    c: SpeedupEstimate | None, ci_target: float | None) -> dict[str, Any]:
    """The speedup over greedy (the paired estimate ``e`` with its interval, else the median over repeats), its
    spread over repeats, and the paired speedup over the chain ``c`` where there is one."""
    speedups = [g.wallclock_s / o.wallclock_s for g, o in zip(g_runs, outs) if o.wallclock_s > 0]
    repeat_median = statistics.median(speedups) if speedups else None
    return {
        "speedup": e.speedup if e else repeat_median,
        "speedup_min": min(speedups) if speedups else None,
        "speedup_max": max(speedups) if speedups else None,
        "speedup_repeat_median": repeat_median,
        "speedup_ci_low": e.low if e else None,
        "speedup_ci_high": e.high if e else None,
        "speedup_ci_halfwidth": e.halfwidth if e else None,  # relative: 0.03 = +-3%
        "speedup_ci_level": e.level if e else None,
        "ci_target_met": e.halfwidth <= ci_target if e and ci_target else None,
        "speedup_vs_chain": c.speedup if c else None,
        "speedup_vs_chain_ci_low": c.low if c else None,
        "speedup_vs_chain_ci_high": c.high if c else None,
    }


def cost_columns(costs: dict[str, float], spec: DecodeSpec, khat: float, speedup: float | None, invocations: int,
                 greedy_invocations: int, n_batches: int | None) -> dict[str, Any]:
    """What the isolated step costs make of the measured speedup: t_k / t_1, the ideal k̂ · t_1 / t_k and the
    efficiency, the step's parts, the whole run predicted from the step costs and the efficiency ceiling."""
    t1, t_enc = costs["t1"], costs.get("enc")
    tk = costs.get(spec.step_cost_key) if spec.step_cost_key else None  # where its step was timed
    t_start = costs.get(spec.start_cost_key) if spec.start_cost_key else None
    ideal = khat * t1 / tk if tk else None
    predicted = None
    if tk and t_start is not None and t_enc is not None and n_batches:
        greedy_ms = n_batches * t_enc + greedy_invocations * t1
        rounds = invocations - n_batches
        predicted = greedy_ms / (n_batches * (t_enc + t_start) + rounds * tk)
    return {
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
    }


def format_breakdown(rows: list[dict[str, Any]]) -> str:
    """Where a step's time goes, per batch size: greedy's step and each k's exact round, in ms and as
    multiples of the greedy step's parts (decoder layers, scoring, proposal chain)."""
    cols = f"{'total':>7} {'decoder':>8} {'scoring':>8} {'propose':>8} {'t/t_1':>6} {'dec/d_1':>7}"
    head = f"{'bs':>3} {'step':<8} {cols}"
    lines = [head, "-" * len(head)]
    # The parts are timed on the eager path only (the compiled one runs each step as one call).
    g = {r["batch_size"]: r for r in rows if role_of(r["method"]) is Role.REFERENCE and r.get("step_decoder_ms")}
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
    """The printed table: speedup = the paired estimate with its 95% interval (``bpd.bench.speedup_ci``; [min, max]
    over repeats for rows without one) and the repeats it took; sb =
    Spec-Bench's definition (mean per-example tokens/s over greedy's); eff = speedup / ideal, ceil = the
    efficiency the once-per-batch costs leave, pred = the speedup the step costs predict, eff_p = speedup /
    pred (the loop's own share)."""
    head = (
        f"{'arch':<9} {'engine':<8} {'bs':>3} {'decoder':<24} {'k_hat':>5} {'tok/s':>8} {'speedup [95% CI]':>18} "
        f"{'rep':>3} {'sb':>5} {'t_k/t_1':>7} "
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
            f"{str(r.get('heads_arch')):<9} {str(r.get('engine', 'eager')):<8} {r['batch_size']:>3} {r['decoder']:<24} "
            f"{r['mean_block_size']:5.2f} "
            f"{f(r['tokens_per_s'], '8.0f')} {rng:>18} {r['repeats']:>3} {f(r.get('speedup_specbench'), '5.2f')} "
            f"{f(r['step_cost_ratio'], '7.2f')} "
            f"{f(r['ideal_speedup'], '6.2f')} {f(r['efficiency'], '5.2f')} {f(r.get('efficiency_ceiling'), '5.2f')} "
            f"{f(r.get('predicted_speedup'), '5.2f')} "
            f"{f(r.get('efficiency_vs_predicted'), '5.2f')} {r['identical_to_greedy']:7.2f}"
        )
    base = [r for r in rows if r.get("speedup_vs_base_greedy") is not None]
    if base:  # another decode path against the first path's greedy, paired in the same repeats
        lines += ["", f"against {base[0]['base_engine']} greedy (paired, 95% interval):"]
        lines += [f"{r['engine']:<8} {r['batch_size']:>3} {r['decoder']:<24} {r['speedup_vs_base_greedy']:5.2f}x "
                  f"[{r['speedup_vs_base_greedy_ci_low']:.2f},{r['speedup_vs_base_greedy_ci_high']:.2f}]"
                  + ("" if not (r.get("compile_s") or r.get("compile_load_s")) else
                     f"   (steps built in {r.get('compile_s') or 0:.0f} s, "
                     f"loaded in {r.get('compile_load_s') or 0:.1f} s, untimed)")
                  for r in base]
    versus = [r for r in rows if r.get("speedup_vs_chain") is not None]
    if versus:  # the decoders beyond the paper against the chain itself, paired in the same repeats
        lines += ["", "against the chain at the same k and criterion (paired, 95% interval):"]
        lines += [f"{r['batch_size']:>3} {r['decoder']:<28} {r['speedup_vs_chain']:5.2f}x "
                  f"[{r['speedup_vs_chain_ci_low']:.2f},{r['speedup_vs_chain_ci_high']:.2f}]" for r in versus]
    return "\n".join(lines)


def format_floors(rows: list[dict[str, Any]]) -> str:
    """Each path's greedy step and exact rounds against their floors (``bpd.bench.floor``): the weight bytes a step
    reads over the measured memory bandwidth, and the measured cost as a multiple of it."""
    rows = [r for r in rows if r.get("t1_floor_ms") is not None]
    if not rows:
        return ""
    llc = rows[0].get("llc_mb")
    head = (f"{'engine':<9} {'bs':>3} {'step':<6} {'ms':>7} {'MB read':>8} {'floor ms':>8} {'x floor':>7} {'/ t_1':>6}"
            + (f" {'in LLC':>6}" if llc else ""))
    cache = f"; last-level cache {llc:.0f} MiB" if llc else ""
    lines = [f"memory bandwidth {rows[0]['bandwidth_gbs']:.1f} GB/s (a read far larger than the caches){cache}", head,
             "-" * len(head)]
    seen = set()
    for r in rows:
        reference = role_of(r["method"]) is Role.REFERENCE
        if not reference and (role_of(r["method"]) is not Role.CHAIN or r["criterion"] != "exact"
                              or r.get("tk_floor_ms") is None):
            continue
        key = (r.get("engine"), r["batch_size"], r["k"] if not reference else 1)
        if key in seen:
            continue
        seen.add(key)
        ms, mb, floor = ((r["t1_ms"], r["t1_bytes"], r["t1_floor_ms"]) if reference
                         else (r["tk_ms"], r["tk_bytes"], r["tk_floor_ms"]))
        name = "t_1" if reference else f"t_{r['k']}"
        fits = "" if not llc else f" {'yes' if mb / 2**20 <= llc else 'no':>6}"
        lines.append(f"{str(r.get('engine')):<9} {r['batch_size']:>3} {name:<6} {ms:7.3f} {mb / 2**20:8.1f} "
                     f"{floor:8.3f} {ms / floor:7.2f} {ms / r['t1_ms']:6.2f}{fits}")
    return "\n".join(lines)
