"""Wall-clock benchmark of greedy vs blockwise decoding, measured side by side in one process.

For each batch size the configurations are decoded on the same inputs, batch by batch, back to back in an
order that rotates from batch to batch (``bpd.decoding.timed.decode_and_time``), after a warm-up that
lasts until greedy's time settles, and the whole pass is repeated (``TimingPolicy``) until every speedup's 95%
bootstrap interval is within +-``ci_target`` (or ``max_repeats``; at the batch sizes of ``ci_batch_sizes``,
batch 1 by default, others take ``repeats`` passes): the speedup is the paired estimate of
``bpd.bench.speedup_ci`` (greedy's total over the method's, per-batch medians over repeats), with its interval.
Separately, the cost of one decoding step is timed in isolation (``bpd.bench.step_costs``): t_1 for a greedy
step and t_k for a blockwise round, so that

    ideal speedup = k_hat * t_1 / t_k        efficiency = measured speedup / ideal speedup

shows how much of what the step costs allow the full decoder actually delivers. The ideal ignores what
every batch pays once: the encoder (t_enc, the same for both) and blockwise's propose-only start call
(t_start,k: decode BOS, p_1, propose). With those timed too, the step costs predict the whole run,

    predicted speedup = (n_b * t_enc + calls_greedy * t_1) / (n_b * (t_enc + t_start,k) + rounds * t_k)

(n_b batches, rounds = blockwise calls - n_b), and speedup / predicted is the share of that prediction
the decoding loop delivers: what is left is bookkeeping between calls and rows finishing inside a batch.
predicted / ideal is the efficiency ceiling those once-per-batch costs leave, so that
efficiency = ceiling * (speedup / predicted). The rows hold these (``bpd.bench.rows``), and the parts of each step
(``step_parts``) say where t_k / t_1 comes from (``format_breakdown``).
"""

from __future__ import annotations

import math
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bpd.bench.floor import floor_columns, step_bytes
from bpd.bench.rows import bench_rows
from bpd.bench.specbench import specbench_records, specbench_speed
from bpd.bench.speedup_ci import SpeedupEstimate, paired_speedup
from bpd.bench.step_costs import StepTiming, step_costs
from bpd.config.methods import Role
from bpd.data.batches import pad_rows
from bpd.decoding.method import NOTHING, Prepared
from bpd.decoding.methods.tree import TreeVerification
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import Passes, RunOutput, decode_and_time


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a ``bench.dtype`` name (one of ``bpd.config.DTYPES``, checked by ``BenchConfig``)."""
    return getattr(torch, name)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def median_run(outs: list[RunOutput]) -> RunOutput:
    """The repeat whose total wall time is the median (the lower middle one for an even count): the repeat
    whose per-example records stand beside the rows' median figures."""
    return sorted(outs, key=lambda o: o.wallclock_s)[(len(outs) - 1) // 2]


@dataclass(frozen=True)
class WarmUp:
    """When ``settle``'s warm-up ends: greedy's time over the first batches changes by less than ``tol`` between
    two passes, or after ``max_passes``; the batches compared take greedy at least ``min_s``."""

    tol: float = 0.03
    max_passes: int = 8
    min_s: float = 1.0


def settle(model, sources: list[list[int]], specs: list[DecodeSpec], max_len, batch_size: int, device: torch.device,
           prepared: Prepared = NOTHING, until: WarmUp | None = None) -> int:
    """Warm up until step times settle: decode the first batches with every spec, untimed for the rows, until
    greedy's time for them changes by less than ``until.tol`` between two passes (allocator, caches and clock
    ramp-up first make it fall); returns the passes it took (at most ``until.max_passes``; default ``WarmUp()``).

    The batches compared must take greedy at least ``until.min_s``: a few short sentences at batch 1 take
    milliseconds, where scheduler noise alone exceeds ``tol`` and the warm-up would run to its cap."""
    until = WarmUp() if until is None else until
    tol, max_passes, min_s = until.tol, until.max_passes, until.min_s
    n = min(len(sources), batch_size * 4)
    prev = None
    for p in range(1, max_passes + 1):
        out = decode_and_time(model, sources[:n], specs, max_len, batch_size=batch_size, device=device,
                              prepared=prepared, passes=Passes(warmup=0, progress=False))
        t = out[specs[0].key if specs else "greedy"].wallclock_s  # greedy, the first spec, on its path
        if t < min_s and n < len(sources):  # too short to compare: grow the head and start comparing afresh
            n = min(len(sources), math.ceil(n * 1.2 * min_s / max(t, 1e-3) / batch_size) * batch_size)
            prev = None
            continue
        if prev is not None and abs(t - prev) <= tol * prev:
            return p
        prev = t
    return max_passes


def paired_estimates(runs: list[dict[str, RunOutput]], specs: list[DecodeSpec], ref: DecodeSpec
                     ) -> dict[str, SpeedupEstimate]:
    """Each spec's paired speedup over the reference ``ref`` (greedy on the same decode path) from the per-batch
    times of every repeat (``bpd.bench.speedup_ci``), by ``spec.key``."""
    g = _batch_times(runs, ref.key)
    return {s.key: paired_speedup(g, _batch_times(runs, s.key)) for s in specs}


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
            out[s.key] = paired_speedup(_batch_times(runs, chain.key), _batch_times(runs, s.key))
    return out


def on_engines(specs: list[DecodeSpec], engines: list[str]) -> list[DecodeSpec]:
    """Every spec on the first decode path, then those with a path of their own on each other one (greedy first
    on each): the benchmark's decoders, each path's greedy the reference of its ratios."""
    out = [s.on(engines[0]) for s in specs]
    for e in engines[1:]:
        out += [s.on(e) for s in specs if s.entry.engine_of(e) == e]
    return out


def by_engine(specs: list[DecodeSpec]) -> dict[str, list[DecodeSpec]]:
    groups: dict[str, list[DecodeSpec]] = {}
    for s in specs:
        groups.setdefault(s.path, []).append(s)
    return groups


@dataclass(frozen=True)
class BenchPlan:
    """What the benchmark times: the decoders ``specs`` (greedy first) on each decode path of ``engines`` (default:
    eager only), at each of ``batch_sizes``, over the first ``n_examples[batch size]`` sources (default: all), with
    the output-length rule ``max_len``; ``prepared``: the task's criterion options and what the specs' methods built
    beside the model (``bpd.decoding.spec.prepare``)."""

    specs: list[DecodeSpec]
    batch_sizes: list[int]
    max_len: Callable[[torch.Tensor], int]
    engines: list[str] | None = None
    n_examples: dict[int, int] | None = None
    prepared: Prepared = NOTHING


@dataclass(frozen=True)
class TimingPolicy:
    """How long each batch size is timed: at least ``repeats`` passes; those in ``ci_batch_sizes`` (None: all)
    continue, up to ``max_repeats``, until every configuration's 95% interval is within +-``ci_target`` of its
    speedup. ``step_repeats``: the round-robin repetitions of each isolated step cost (``bpd.bench.step_costs``)."""

    repeats: int = 3
    max_repeats: int | None = None
    ci_target: float = 0.03
    ci_batch_sizes: list[int] | None = None
    step_repeats: int = 200

    def pursues(self, batch_size: int) -> bool:
        """Whether this batch size repeats until its intervals reach ``ci_target``."""
        return self.ci_batch_sizes is None or batch_size in self.ci_batch_sizes

    def cap(self, batch_size: int) -> int:
        """The most passes this batch size takes (never fewer than ``repeats``)."""
        return max(self.repeats, self.max_repeats or self.repeats) if self.pursues(batch_size) else self.repeats


@dataclass(frozen=True)
class Reporting:
    """What the rows and Spec-Bench records carry beside the timings: the columns every row shares (``common``),
    the records' model id prefix and category, and their outputs' text (``detok``; None: token ids). With
    ``bandwidth`` (bytes/s, ``bpd.bench.floor.memory_bandwidth``), rows also carry each step's floor, the weight
    bytes it reads over the bandwidth, and t_1 and t_k as multiples of their floors; ``llc`` (bytes of the CPU's
    last-level cache, ``bpd.bench.floor.last_level_cache``) says beside them whether each step's bytes fit in it."""

    common: dict[str, Any] | None = None
    model_id: str = "bpd"
    category: str = "bench"
    detok: Callable[[list[int]], str] | None = None
    bandwidth: float | None = None
    llc: int | None = None


def run_bench(model, sources: list[list[int]], plan: BenchPlan, device: torch.device,
              timing: TimingPolicy | None = None, report: Reporting | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Rows, and Spec-Bench records by model id (one file's worth per batch size and decoder; greedy's is the
    baseline) from the median repeat, for every batch size of ``plan`` (greedy must be the first spec).

    Each batch size is timed as ``timing`` says (default ``TimingPolicy()``); rows say whether its intervals
    reached the target (and carry no target where none was pursued).

    ``plan.engines``: the decode paths timed, all in the same passes. Each path's rows take their ratios against
    greedy on that path; rows off the first path also carry their paired speedup over the first path's greedy
    (``speedup_vs_base_greedy``), e.g. compiled greedy over eager greedy.

    ``report`` (default ``Reporting()``): the rows' shared columns, the records' names, and the bandwidth of the
    floor columns."""
    specs, max_len, prepared = plan.specs, plan.max_len, plan.prepared
    timing = TimingPolicy() if timing is None else timing
    report = Reporting() if report is None else report
    assert specs[0].role is Role.REFERENCE, "greedy is the reference and must come first"
    engines = list(plan.engines or ["eager"])
    rows: list[dict[str, Any]] = []
    records: dict[str, list[dict[str, Any]]] = {}
    ks = sorted({s.k for s in specs if s.role is Role.CHAIN})
    trees = [(s.k, s.entry.shape(s.options)) for s in specs if isinstance(s.entry, TreeVerification)]
    for bs in plan.batch_sizes:
        n = min(len(sources), (plan.n_examples or {}).get(bs, len(sources)))
        srcs = sources[:n]
        # Step costs at this batch size, on the first inputs, cache length ~ a typical prefix. (The exact criterion
        # the rounds are timed with takes no task options.)
        src = pad_rows(srcs[:bs], model.pad_id, min_width=1).to(device)
        costs = {e: step_costs(model, src, ks, timing=StepTiming(repeats=timing.step_repeats),
                               trees=trees if e == "eager" else None, engine=e, max_len=max_len(src))
                 for e in engines}
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        # A method quadratic in length (the naive recompute-everything greedy): batch 1 only, as a reference.
        bs_specs = on_engines([s for s in specs if not s.entry.quadratic or bs == 1], engines)
        passes = settle(model, srcs, bs_specs, max_len, bs, device, prepared)
        cap = timing.cap(bs)
        runs = timed_repeats(model, srcs, bs_specs, max_len, bs, device, prepared, timing)
        extra = {**(report.common or {}), "batch_size": bs, "n_batches": -(-n // bs),
                 "peak_mem_mb": peak_memory_mb(device), "warmup_passes": passes, "max_repeats": cap,
                 "ci_target": timing.ci_target if timing.pursues(bs) else None}
        base = bs_specs[0]
        for engine, e_specs in by_engine(bs_specs).items():
            est = paired_estimates(runs, e_specs, e_specs[0])
            e_rows = bench_rows(runs, e_specs, costs[engine], extra, est, chain_estimates(runs, e_specs))
            if report.bandwidth:
                nbytes = step_bytes(model, ks)
                for row, spec in zip(e_rows, e_specs):
                    row |= floor_columns(costs[engine], nbytes, report.bandwidth, spec.step_cost_key,
                                         report.llc)
            if engine != base.path:
                vs_base = paired_estimates(runs, e_specs, base)
                for row, spec in zip(e_rows, e_specs):
                    e = vs_base[spec.key]
                    row |= {"speedup_vs_base_greedy": e.speedup, "speedup_vs_base_greedy_ci_low": e.low,
                            "speedup_vs_base_greedy_ci_high": e.high, "base_engine": base.path}
            records |= specbench_figures(e_rows, e_specs, runs, f"{report.model_id}-b{bs}", report.category,
                                         report.detok)
            rows += e_rows
    return rows, records


def timed_repeats(model, srcs: list[list[int]], specs: list[DecodeSpec], max_len, batch_size: int,
                  device: torch.device, prepared: Prepared, timing: TimingPolicy) -> list[dict[str, RunOutput]]:
    """Timed passes over ``srcs`` by every spec (greedy first), the order rotating from pass to pass: at least
    ``timing.repeats``, then more, up to ``timing.cap(batch_size)``, until every speedup's 95% interval is within
    +-``timing.ci_target``."""
    repeats, cap, ci_target = timing.repeats, timing.cap(batch_size), timing.ci_target
    runs: list[dict[str, RunOutput]] = []
    while len(runs) < cap:
        r = len(runs)
        runs.append(decode_and_time(model, srcs, specs, max_len, batch_size=batch_size, device=device,
                                    prepared=prepared,
                                    passes=Passes(warmup=0, rotate=r, desc=f"bench b{batch_size} r{r}")))
        if len(runs) >= repeats:
            est = {}
            for e_specs in by_engine(specs).values():
                est |= paired_estimates(runs, e_specs[1:], e_specs[0])
            if all(e.halfwidth <= ci_target for e in est.values()):
                break
    return runs


def specbench_figures(rows: list[dict[str, Any]], specs: list[DecodeSpec], runs: list[dict[str, RunOutput]],
                      prefix: str, category: str, detok: Callable[[list[int]], str] | None
                      ) -> dict[str, list[dict[str, Any]]]:
    """Each spec's Spec-Bench records from its median repeat, by model id ``<prefix>-<decoder>`` (the first
    spec's, greedy's, is the baseline); their speedup and mean accepted tokens go into the spec's row."""
    records = {}
    for spec in specs:
        mid = f"{prefix}-{spec.key}"
        records[mid] = specbench_records(median_run([r[spec.key] for r in runs]), mid, category, detok)
    baseline = records[f"{prefix}-{specs[0].key}"]
    for row, spec in zip(rows, specs):
        sb = specbench_speed(records[f"{prefix}-{spec.key}"], baseline)
        row["speedup_specbench"], row["mean_accepted_tokens"] = sb["speedup"], sb["mean_accepted_tokens"]
    return records
