"""The report's tables that have no counterpart in the paper: the wall-clock benchmark and the decoders beyond
the paper (tree, rescored chain, draft model) beside the chain."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells import Table
from bpd.config.methods import DECODE_METHODS, Role, methods_of

BENCH_COLUMNS = [
    "source_experiment", "task", "heads_arch", "train_steps", "device", "dtype", "compile", "engine", "batch_size",
    "decoder", "k", "criterion", "criterion_param", "mean_block_size", "tokens_per_s", "speedup", "speedup_min",
    "speedup_max",
    "speedup_ci_low", "speedup_ci_high", "repeats", "step_cost_ratio",
    "ideal_speedup", "efficiency", "efficiency_ceiling", "predicted_speedup", "efficiency_vs_predicted",
    "identical_to_greedy", "peak_mem_mb",
]


def bench_table(rows: pd.DataFrame) -> Table:
    """The benchmark rows (``make bench``) per heads_arch, batch size, k and criterion, when present."""
    bench = rows[rows["is_bench"].astype(bool)] if not rows.empty else rows
    if bench.empty:
        return Table("bench", "Wall-clock benchmark", pd.DataFrame(columns=BENCH_COLUMNS), bench,
                     "no benchmark rows yet: run `make bench`")
    data = bench.reindex(columns=BENCH_COLUMNS).copy()
    data["_m"] = bench["method"].map(_BENCH_ORDER).fillna(len(DECODE_METHODS))
    data = data.sort_values(
        ["source_experiment", "task", "heads_arch", "train_steps", "device", "dtype", "compile", "engine", "batch_size",
         "_m",
         "criterion", "k"],
        na_position="first", kind="mergesort",
    ).drop(columns="_m").reset_index(drop=True)
    t = Table("bench", "Wall-clock benchmark (ours only; the paper has no such table)", data, bench)
    t.notes.append("speedup: rows since 2026-12-01 the paired estimate with its 95% bootstrap interval "
                   "(speedup_ci_low, speedup_ci_high; docs/benchmark.md) after as many repeats as the interval "
                   "needed, earlier rows the median over repeats [min, max]; t_k/t_1: cost of one blockwise round "
                   "over one greedy "
                   "step; ideal = k̂ · t_1 / t_k; efficiency = speedup / ideal; predicted = the whole run from the "
                   "step costs, with the encoder and blockwise's propose-only start call per batch; "
                   "vs predicted = speedup / predicted; ceiling = predicted / ideal, the efficiency a loop with no "
                   "overhead of its own reaches (efficiency = ceiling × vs predicted); compiled: the decoder "
                   "layers under torch.compile, for greedy and blockwise alike.")
    return t


#: The bench table's method order: greedy, the baselines and the chain in registry order, then every method beyond
#: the paper together (those rows sort by criterion and k among themselves).
_BENCH_ORDER = {name: i for i, name in enumerate(methods_of(Role.REFERENCE, Role.BASELINE, Role.CHAIN))}
#: The chain and the methods beyond it, in registry order.
BEYOND_METHODS = tuple(methods_of(Role.CHAIN, Role.BEYOND))
BEYOND_COLUMNS = ["study", "task", "timing", "run", "batch_size", "method", "decoder", "k", "tree_nodes",
                  "mean_block_size", "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_vs_chain",
                  "speedup_vs_chain_ci_low", "speedup_vs_chain_ci_high", "identical_to_greedy", "quality"]


def _results_folder(source_file: str) -> str:
    """The folder a rows file sits in, as results/README.md names it (``beyond_mt/bench`` for a study's bench)."""
    parts = Path(str(source_file)).parent.parts
    return "/".join(parts[parts.index("studies") + 1:]) if "studies" in parts else parts[-1]


def _identity_note(src: pd.DataFrame) -> str:
    """What the rows say about token identity with greedy: the note must not claim identity a row lacks."""
    below = src[src["identical_to_greedy"].lt(1)]
    if below.empty:
        return "exact acceptance, so every row's output is greedy's (identical_to_greedy = 1)"
    studies = ", ".join(sorted(set(below["source_file"].map(_results_folder))))
    dtypes = ", ".join(sorted(set(below.get("dtype", pd.Series(["unknown"])).fillna("unknown").astype(str))))
    lo, hi = below["identical_to_greedy"].min(), below["identical_to_greedy"].max()
    return (f"exact acceptance: identical_to_greedy = 1 in every row except {len(below)} of {studies} "
            f"({dtypes}; {lo:.0%}–{hi:.0%} of examples equal to greedy's: near-tied logits rounded differently "
            f"by a verify pass and a greedy step, docs/beyond.md)")


def beyond_table(rows: pd.DataFrame) -> Table:
    """Chain, tree, rescored chain and draft model side by side (docs/beyond.md): every run (evaluation or
    bench) that has a tree, rescored or draft-model row, with its exact chain rows as the baseline."""
    if rows.empty:
        return Table("beyond", "Beyond the paper", pd.DataFrame(columns=BEYOND_COLUMNS), rows,
                     "no tree, rescored or draft-model rows yet: see docs/beyond.md")
    run = rows["run_id"].astype(str).where(~rows["is_bench"].astype(bool),
                                           rows["source_file"].astype(str) + rows["batch_size"].astype(str))
    new_methods = rows["method"].isin(methods_of(Role.BEYOND))
    keep = run.isin(set(run[new_methods])) & rows["method"].isin(BEYOND_METHODS) & rows["k"].gt(1)
    keep &= rows["criterion"].astype(str).eq("exact") & rows["min_block_size"].fillna(1).eq(1)
    src = rows[keep]
    if src.empty:
        return Table("beyond", "Beyond the paper", pd.DataFrame(columns=BEYOND_COLUMNS), src,
                     "no tree, rescored or draft-model rows yet: see docs/beyond.md")
    data = src.assign(
        study=src["source_file"].map(_results_folder),
        timing=np.where(src["is_bench"].astype(bool), "bench (paired)", "evaluation run"),
        quality=src["bleu"].where(src["task"].eq("translation"), src.get("psnr")),
        # When the run started: a folder can hold several runs of the same decoders (e.g. a rerun after a
        # change), and each one's rows must read against its own chain.
        run=src["time"].astype(str).str.slice(0, 16).str.replace("T", " "),
        _m=src["method"].map({m: i for i, m in enumerate(BEYOND_METHODS)}),
    ).sort_values(["study", "task", "timing", "run", "batch_size", "k", "_m", "decoder"], kind="mergesort")
    data = data.reindex(columns=BEYOND_COLUMNS).reset_index(drop=True)
    t = Table("beyond", "Beyond the paper: chain, tree, rescored chain and draft model (ours only)", data, src)
    t.notes.append(_identity_note(src) + "; speedup over "
                   "greedy on the same machine in the same run: the evaluation's one timed pass, or the bench's "
                   "paired estimate with its 95% interval; tree_nodes = tokens one verify call scores. "
                   "Published figures of the same families (Spec-Bench, A100, Vicuna-7B) are in the figure "
                   "and analysis/published_reference.csv; they are another model, task and device.")
    return t
