"""The evaluation stage: decode a split with greedy, beam and every blockwise configuration, timed side by
side in one process, and append one tidy row per decoder to ``results/<name>/rows.jsonl``.

Rows carry every column of ``../shared/DESIGN.md`` and how they were made (config, commit, device,
command), and point at the output files they were scored from, so every number recomputes from files.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bpd import machine_load
from bpd.bench.speedup_ci import timing_columns
from bpd.config import DecodeConfig
from bpd.config.common import cache_key, keyed
from bpd.config.methods import Role, role_of
from bpd.decoding.agreement import mismatch_gaps
from bpd.decoding.spec import DecodeSpec, Resources, decode_specs, prepare
from bpd.decoding.timed import Passes, RunOutput, decode_and_time
from bpd.locks import exclusive
from bpd.metrics import block_histogram, mean_block_size, per_example_block_means, summarize
from bpd.models import fastpath
from bpd.runtime import ResultsNotSaved, Runtime, ensure_writable, repo_relative
from bpd.tasks import Pairs, Scorer, Task
from bpd.tracking import append_rows, command_line, device_name, git_sha, make_tracker, read_rows
from bpd.training import distributed as dist
from bpd.training.checkpoint import load_model


def run_id(decode_cfg: DecodeConfig, task_name: str, device: str, model_path: Path, draft_path: Path | None = None
           ) -> str:
    """The id of an evaluation: the model file, the decoding options it sets (``keyed``: each method's under
    ``methods.<name>``), the task and the device (and the draft model's file, with one). ``task_name`` is the task
    config's name and ``device`` the configured device (``Runtime.device_setting``)."""
    parts = [model_path.name, keyed(decode_cfg), task_name, device]
    return cache_key(*parts, *([draft_path.name] if draft_path is not None else []))


@dataclass(frozen=True)
class Provenance:
    """What an evaluation's rows record of the experiment beyond its decoding options (the entry points build it
    from their config: ``provenance`` in experiments/_common.py)."""

    task_name: str  # the task config's name, which run ids hash (a translation task's own name adds its direction)
    columns: Mapping[str, Any]  # the experiment's row columns, by name (``row_provenance`` orders them)


def same_weights(row: dict, payload: dict) -> bool:
    """Whether a result row was produced by the checkpoint in ``payload`` (same training steps and time:
    a retrained model never matches both)."""
    return row.get("train_steps") == payload.get("step") and row.get("train_minutes") == round(
        payload.get("elapsed", 0.0) / 60, 2
    )


def evaluate(runtime: Runtime, task: Task, model_path: Path, d: DecodeConfig, about: Provenance,
             draft_path: Path | None = None) -> list[dict]:
    """Decode the configured split with greedy, beam and every blockwise config (and the draft model's, given
    ``draft_path``); write and return rows (``about``: the experiment's columns, a ``Provenance``). Trains nothing:
    the caller builds the models first (the draft with ``bpd.stages.ensure_draft``)."""
    results_dir = ensure_writable(runtime.results_dir)
    rows_path = results_dir / "rows.jsonl"
    rid = run_id(d, about.task_name, runtime.device_setting, model_path, draft_path)
    model, payload = load_model(model_path, runtime.device)

    def done() -> list[dict]:
        # The same run id *and* the same trained weights: a model file retrained under the same config
        # (e.g. a fresh clone, whose results/ already holds our committed rows) is evaluated anew.
        if not d.skip_existing:
            return []
        return [r for r in read_rows(rows_path) if r.get("run_id") == rid and same_weights(r, payload)]

    if not done():
        # One job decodes a run; an identical one started meanwhile waits, then finds its rows and skips.
        with exclusive(results_dir / ".locks" / f"{rid}.lock", lambda: bool(done())) as finished:
            if not finished:
                return _evaluate(runtime, task, Loaded(model_path, model, payload), d, about, rid, draft_path)
    rows = done()
    print(f"results for run {rid} already in {rows_path}; skipping (decode.skip_existing=false to redo)")
    return rows


@dataclass(frozen=True)
class Loaded:
    """A model file and what ``load_model`` read from it: the model and the checkpoint's payload (its training
    step, time and config)."""

    path: Path
    model: Any
    payload: dict


@dataclass(frozen=True)
class Window:
    """The examples an evaluation decoded, from ``decode.first`` on: output ``i`` is the split's ``first + i``."""

    pairs: Pairs
    first: int

    def src(self, i: int):
        return self.pairs.src(self.first + i)

    def __len__(self) -> int:
        return len(self.pairs) - self.first


@dataclass(frozen=True)
class Decoded:
    """What an evaluation decoded: the decoders' specs, their outputs by decoder name, the split's pairs, the
    scorer of the examples decoded, and the decode options asked for."""

    specs: list[DecodeSpec]
    outs: dict[str, RunOutput]
    pairs: Pairs
    scorer: Scorer
    decode: DecodeConfig | None = None


def _evaluate(runtime: Runtime, task: Task, loaded: Loaded, d: DecodeConfig, about: Provenance, rid: str,
              draft_path: Path | None) -> list[dict]:
    model_path, model, payload = loaded.path, loaded.model, loaded.payload
    info, device, results_dir = runtime.info, runtime.device, runtime.results_dir
    task.check_model(model, model_path)
    if d.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.heads.set_proposal_vocab(task.proposal_vocab(d.proposal_vocab))
    model.heads.set_proposal_precision(fastpath.precision_on(device, d.proposal_precision))
    if d.threads:
        torch.set_num_threads(d.threads)
    pairs = task.pairs(d.split)
    if d.first >= len(pairs):
        raise ValueError(f"decode.first={d.first} is past the {len(pairs)} examples of {d.split}; use a smaller one.")
    left = len(pairs) - d.first
    n = left if d.n_examples is None else min(d.n_examples, left)
    resources = Resources(device, {"draft": draft_path} if draft_path is not None else {})
    specs = decode_specs(d, model.k, models=resources.models)
    # What every decoder is handed beside its options: the task's criterion options, and what methods build beside
    # the model (a draft, an n-gram model).
    prepared = prepare(specs, task, model, resources)
    sources = pairs.sources(range(d.first, d.first + n))
    scorer = task.scorer(d.split, n, d.first)
    mine = list(range(len(sources)))
    if info.distributed:  # whole batches of decode_and_time's order: the same batches (and outputs) as one process
        order = sorted(mine, key=lambda i: len(sources[i])) if d.batch_size > 1 else mine
        mine = dist.shard_batches(order, d.batch_size, info.rank, info.world_size)
    start = machine_load.sample()
    # Greedy and every decoder on each sentence (batch) back to back, the order rotating and each batch
    # repeated: a load that comes and goes falls on both sides of every speedup (bpd.decoding.timed).
    outs = decode_and_time(
        model,
        [sources[i] for i in mine],
        specs,
        task.max_len(d),
        batch_size=d.batch_size,
        device=device,
        prepared=prepared,
        passes=Passes(repeats=d.timing_repeats, rotate=0, progress=info.is_main,
                      desc=f"decode {d.split} b{d.batch_size}"),
    )
    outs = {s.name: outs[s.key] for s in specs}  # one decode path per evaluation: names are unique
    load = machine_load.load_columns(start, machine_load.sample(), torch.get_num_threads())
    if info.distributed:
        outs = merge_shards(dist.all_gather_object((mine, outs)), len(sources))
        if not info.is_main:
            return []  # rank 0 writes the rows and files
    common = {**row_provenance(about, d, task, model_path, payload, rid, device), **load}
    common["proposal_coverage"] = proposal_coverage(outs["greedy"].tokens, model.heads.proposal_ids)
    common["draft_model"] = draft_path.name if draft_path is not None else None

    def write(folder: Path) -> tuple[list[dict], Path]:
        out_dir = fresh_folder(folder / "outputs", rid)
        try:
            rows = make_rows(outs, specs, scorer, common, out_dir, task.eos_id)
            explain_mismatches(model, sources, outs, specs, rows)
            rows += task.extra_rows(scorer, outs, specs, rows, common, out_dir)
            append_rows(folder / "rows.jsonl", rows)
        except OSError:
            # No row points at this run's outputs (append_rows undoes a partial append): an empty or cut
            # greedy.hyp.txt left behind would look like a finished output.
            shutil.rmtree(out_dir, ignore_errors=True)
            raise
        return rows, out_dir

    rows, out_dir = save_or_rescue(write, results_dir)
    print(format_table(rows, task.quality))
    log_to_wandb(runtime, task, Decoded(specs, outs, pairs, scorer, d), rows, common, rid, out_dir)
    return rows


def save_or_rescue(write: Callable[[Path], tuple[list[dict], Path]], results_dir: Path) -> tuple[list[dict], Path]:
    """``write(results_dir)`` (the outputs, then the rows); when the disk refuses (full, quota, read-only) the
    same outputs and rows go to a fresh temporary folder instead and ``ResultsNotSaved`` names it, so a full
    disk costs no decoding. rows.jsonl stays as it was: ``append_rows`` undoes a partial append."""
    try:
        return write(results_dir)
    except OSError as e:
        reason = e.strerror or str(e)
    fix = (f"free space in {results_dir} (or point paths.results_dir at a folder on another disk) and run the same "
           "command again (the trained models are cached)")
    rescue = Path(tempfile.mkdtemp(prefix="bpd-results-"))
    try:
        write(rescue)
    except OSError as e:
        raise ResultsNotSaved(f"could not write the results to {results_dir} ({reason}) nor to {rescue} "
                              f"({e.strerror or e}); {fix}.") from None
    raise ResultsNotSaved(f"could not write the results to {results_dir} ({reason}); the decoded outputs and their "
                          f"rows are in {rescue} instead; {fix}.")


def fresh_folder(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``, ... if taken: a redone run (``decode.skip_existing=false``)
    writes its outputs beside the earlier run's, whose rows keep pointing at unchanged files."""
    out, n = parent / name, 1
    while out.exists():
        n += 1
        out = parent / f"{name}-{n}"
    return out


def row_provenance(about: Provenance, d: DecodeConfig, task: Task, model_path: Path, payload: dict, rid: str,
                   device: torch.device) -> dict[str, Any]:
    """The columns every row of one evaluation shares: what was decoded, by which model, where and how."""
    mc, ex = payload["model_config"], about.columns
    return {
        "run_id": rid,
        "experiment": ex["experiment"],
        "task": task.kind,
        "dataset": task.name,
        "split": d.split,
        "first_example": d.first,  # a chunk of a long evaluation starts here (decode.first; 0: the split's start)
        "model": Path(model_path).name,
        "model_preset": ex["model_preset"],
        "trained_k": mc["k"],
        "heads_arch": mc.get("heads_arch"),
        "heads_tied": mc.get("heads_tied", False),  # one set of weights for every proposal slot
        "heads_ahead": mc.get("heads_ahead", False),  # slots read the input's guess at the position they guess
        "identity_p1": mc.get("identity_p1"),
        "heads_training": ex["heads_training"],
        "heads_targets": ex["heads_targets"],
        "heads_loss": ex["heads_loss"],  # mean over the heads or one sampled head per batch
        "heads_p1_weight": ex["heads_p1_weight"],  # p_1's loss weight while fine-tuning (1: as any head)
        "heads_p1_distill": ex.get("heads_p1_distill", 0.0),  # p_1 held near the base's own (0: off)
        "distilled": ex["distilled"],
        "setting": ex["setting"],
        "batch_size": d.batch_size,
        "proposal_vocab": d.proposal_vocab,
        "proposal_precision": fastpath.precision_on(device, d.proposal_precision),  # what ran (int8: a CPU path)
        "dtype": d.dtype,
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "seed": ex["seed"],
        "git_sha": git_sha(),
        "command": ex["command"] or command_line(),
        "train_steps": payload.get("step"),
        "train_minutes": round(payload.get("elapsed", 0.0) / 60, 2),
        # "minutes": the time cap ended the stage, so the same command may train another model elsewhere.
        "train_stopped_by": payload.get("stopped_by"),
        "base_stopped_by": payload.get("meta", {}).get("config", {}).get("base_stopped_by"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def make_rows(outputs: dict[str, RunOutput], specs: list[DecodeSpec], scorer: Scorer, common: dict[str, Any],
              out_dir: Path, eos_id: int = -1) -> list[dict[str, Any]]:
    """One tidy row per decoding configuration (columns as in DESIGN.md), its outputs written to files.
    ``hit_length_limit`` counts the outputs that ended at the length limit without EOS (text tasks)."""
    g = outputs["greedy"]
    g_iters = sum(g.iterations)
    baseline = next(s for s in specs if s.name == "greedy").baseline
    rows = []
    for spec in specs:
        o = outputs[spec.name]
        iters = sum(o.iterations)
        identical = sum(a == b for a, b in zip(o.tokens, g.tokens)) / max(1, len(g.tokens))
        rates = [a / r if r else None for a, r in zip(o.position_accepted, o.position_reached)]
        row = {
            **common,
            **spec.columns(),
            "n_examples": len(o.tokens),
            "output_tokens": sum(len(t) for t in o.tokens),
            "iterations": iters,
            "invocations": o.invocations,
            "greedy_iterations": g_iters,
            "mean_block_size": mean_block_size(g_iters, iters) if spec.rounds else 1.0,
            "tokens_per_iteration": sum(len(t) for t in o.tokens) / max(1, iters),
            "identical_to_greedy": identical,
            "hit_length_limit": sum(not t or t[-1] != eos_id for t in o.tokens) if eos_id >= 0 else None,
            "wallclock_s": o.wallclock_s,  # per pass: each batch's median over the timing repeats
            "greedy_wallclock_s": g.wallclock_s,
            "compile_s": o.compile_s,  # the static path's compilation, before and outside the timing
            "compile_load_s": o.load_s,  # loading compiled steps an earlier process built, likewise
            **speedup_columns(g, o, bool(common.get("timing_busy"))),
            "baseline": baseline,  # the decoder every speedup of the row divides by
            "acceptance_rate_per_position": rates,
            "block_size_histogram": {str(k): v for k, v in block_histogram(o.block_sizes).items()},
            "block_size_per_example": summarize(per_example_block_means(o.tokens, o.iterations)),
            "spec": spec.record(),
        }
        row.update(scorer.score(o.tokens, g.tokens))
        row.update({k: repo_relative(v) for k, v in scorer.write(o.tokens, out_dir / spec.name).items()})
        rows.append(row)
    return rows


def proposal_coverage(greedy_tokens: list[list[int]], ids: torch.Tensor | None) -> float | None:
    """The share of greedy's output tokens inside the proposal vocabulary ``ids`` (``decode.proposal_vocab``;
    None when unrestricted): a slot can never propose the others, so this caps every slot's agreement with
    greedy, and a block of n proposals is accepted at most as often as n proposable tokens in a row."""
    if ids is None:
        return None
    flat = torch.tensor([t for out in greedy_tokens for t in out], dtype=torch.long)
    return float(torch.isin(flat, ids.cpu()).float().mean()) if len(flat) else None


def speedup_columns(greedy: RunOutput, o: RunOutput, busy: bool = False) -> dict[str, Any]:
    """The paired speedup of ``o`` over greedy from their per-batch repeats (``bpd.bench.speedup_ci``), flagged in
    ``timing_note`` when the repeats disagree or the machine was busy; outputs without per-batch times
    (hand-made ones) get greedy's total over theirs, unflagged."""
    g, m = np.asarray(greedy.repeat_wall_s, dtype=float), np.asarray(o.repeat_wall_s, dtype=float)
    if g.size and g.shape == m.shape and (m > 0).all():
        return timing_columns(g, m, busy)
    return {"speedup": greedy.wallclock_s / o.wallclock_s if o.wallclock_s > 0 else None}


def explain_mismatches(model, sources, outputs: dict[str, RunOutput], specs: list[DecodeSpec],
                       rows: list[dict[str, Any]]) -> None:
    """Add ``greedy_mismatch_max_gap`` to each exact row: None when every output equals greedy's, else the
    largest logit gap at which an output parted from greedy's (``bpd.decoding.agreement``): about 1e-6 or
    less is a float near-tie, larger a bug. Approximate rows differ by design and get None."""
    g = outputs["greedy"].tokens
    for spec, row in zip(specs, rows):
        exact = spec.rounds and spec.options.exact
        differs = exact and row["identical_to_greedy"] < 1
        row["greedy_mismatch_max_gap"] = (
            max(mismatch_gaps(model, sources, g, outputs[spec.name].tokens)) if differs else None)


def format_table(rows: list[dict[str, Any]], quality: str = "bleu") -> str:
    """A readable fixed-width table of the key columns. The speedup is paired (greedy and the decoder timed
    back to back on each example, repeated) with its 95% interval; one the repeats or the machine's load make
    unreliable is marked ``?`` and its reason printed under the table, never shown as a clean number."""
    head = (f"{'decoder':<30} {quality:>7} {'k_hat':>6} {'=greedy':>7} {'iters':>7} {'time_s':>8} {'speedup':>8} "
            f"{'95% interval':>14}")
    lines = [head, "-" * len(head)]
    notes = []
    for r in rows:
        if r.get("method") == "reference":  # upsampling baselines: quality only
            lines.append(f"{r['decoder']:<30} {r[quality]:7.2f}   (reference, no model)")
            continue
        q = r.get(quality)
        q_s = f"{q:7.2f}" if isinstance(q, int | float) else f"{'-':>7}"
        sp = r.get("speedup")
        lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
        reference = role_of(r.get("method")) is Role.REFERENCE  # its speedup is 1 by definition
        interval = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None and not reference else ""
        note = r.get("timing_note")
        if note and not reference:
            notes.append(f"  ? {r['decoder']}: {note}")
        lines.append(
            f"{r['decoder']:<30} {q_s} {r['mean_block_size']:6.2f} {r['identical_to_greedy']:7.2f} "
            f"{r['iterations']:7d} {r['wallclock_s']:8.2f} {(sp or float('nan')):6.2f}x{'?' if note else ' '} "
            f"{interval:>14}"
        )
    return "\n".join(lines + timing_legend(rows, notes))


def timing_legend(rows: list[dict[str, Any]], notes: list[str]) -> list[str]:
    """The lines under the table: the machine's load while timing, and each unreliable speedup's reason."""
    timed = next((r for r in rows if r.get("load_self_cores") is not None), None)
    out = []
    decoded = [r for r in rows if r.get("method") != "reference"]
    if decoded and decoded[0].get("device"):
        # Which machine and which decode path: a speedup means little without both (rows before the static path
        # existed decoded eagerly and have no engine column).
        paths = dict.fromkeys(r.get("engine") or "eager" for r in decoded)
        out.append(f"timed on {decoded[0]['device']}, decode path {' / '.join(paths)}")
    built, loaded = (sum(r.get(c) or 0.0 for r in decoded) for c in ("compile_s", "compile_load_s"))
    if any("compile_load_s" in r for r in decoded) and (built or loaded):  # before and outside the timing
        out.append(f"compiled steps: built in {built:.0f} s, loaded from the store in {loaded:.1f} s (untimed)")
    elif built:  # (rows from before the step store: every run compiled its steps)
        out.append(f"compiled in {built:.0f} s (untimed)")
    if timed is not None:
        other = timed.get("load_other_cores")
        others = f"other processes {other:.2f} cores, " if other is not None else ""
        out.append(f"load while timing: {others}this one {timed['load_self_cores']:.2f}, of {timed['load_cores']} "
                   f"cores (load average {timed.get('loadavg_1m')})")
    if notes:
        out += ["unreliable speedups (?): noisy = the timing repeats disagree by more than 5%; busy = other "
                "processes took CPU the decoder's threads needed, which skews greedy against blockwise; re-run on "
                "a quiet machine (decode.skip_existing=false) or use make bench.", *notes]
    return out


def merge_shards(parts: list[tuple[list[int], dict[str, RunOutput]]], n: int) -> dict[str, RunOutput]:
    """One process's ``decode_and_time`` outputs from the ranks' ``(example indices, outputs)`` shards.

    Per-example lists go back to example order; counts (invocations, per-position acceptance) add up, and so
    do wall-clock seconds: the total decode time, which is what the speedup ratios compare. Per-batch times
    are the ranks' batches side by side (every rank's repeats of its own batches: still paired).
    """
    merged: dict[str, RunOutput] = {}
    for name, first in parts[0][1].items():
        values: dict[str, Any] = {}
        for f in fields(first):
            got = [(idx, getattr(o[name], f.name)) for idx, o in parts]
            v0 = got[0][1]
            if f.name == "batch_wall_s":  # each rank's own batches, side by side
                values[f.name] = [t for _, v in got for t in v]
            elif f.name == "repeat_wall_s":
                values[f.name] = [[t for _, v in got for t in v[r]] for r in range(len(v0))]
            elif isinstance(v0, list) and not f.name.startswith("position_") and all(len(v) == len(i) for i, v in got):
                full: list[Any] = [None] * n
                for idx, v in got:
                    for i, x in zip(idx, v):
                        full[i] = x
                values[f.name] = full
            elif isinstance(v0, list):
                width = max(len(v) for _, v in got)
                values[f.name] = [sum(v[p] for _, v in got if p < len(v)) for p in range(width)]
            elif isinstance(v0, int | float):
                values[f.name] = sum(v for _, v in got)
        merged[name] = replace(first, **values)
    return merged


#: What each decoder's row puts in the W&B run's summary as ``<decoder>/<figure>`` (``analysis.wandb_runs`` reads
#: them back into rows), beside the task's quality (bleu or psnr).
SUMMARY_FIGURES = ("mean_block_size", "speedup", "speedup_ci_low", "speedup_ci_high", "identical_to_greedy",
                   "wallclock_s")


def log_to_wandb(runtime: Runtime, task: Task, decoded: Decoded, rows: list[dict], common: dict, rid: str,
                 out_dir: Path) -> None:
    """The evaluation's metrics, its rows as a table and the task's samples, as one W&B run. Its config holds
    what a sweep varies (setting, trained k, head architecture, corpus and split, the decode path, ks and
    criteria: the dashboard's filters), its summary each decoder's figures and, under ``rows``, the whole rows (so
    ``make figures WANDB_RUNS=...`` draws from runs as from rows.jsonl); the runs of one experiment share a group
    (``logger.group``, default the experiment's name)."""
    quality = task.quality
    d = decoded.decode
    sweep = {} if d is None else {"engine": d.engine, "ks": list(d.ks), "criteria": [
        c.name if c.param is None else f"{c.name}{c.param:g}" for c in d.criteria]}
    tracker = make_tracker(runtime, name=f"eval-{rid}", job_type="evaluate",
                           extra={"run_id": rid, **common, **sweep})
    for r in rows:
        tracker.log({f"{r['decoder']}/{k}": r[k] for k in (quality, *SUMMARY_FIGURES) if r.get(k) is not None})
    tracker.summary({"rows": {r["decoder"]: json.loads(json.dumps(r, default=str)) for r in rows}})
    columns = list(rows[0].keys())[:40]
    tracker.table("results", columns, [[str(r.get(c)) for c in columns] for r in rows])
    first = 0 if d is None else d.first
    task.log_outputs(tracker, decoded.scorer, decoded.outs, decoded.specs, Window(decoded.pairs, first), out_dir)
    tracker.finish()


__all__ = ["Provenance", "evaluate", "format_table", "make_rows", "merge_shards", "run_id"]
