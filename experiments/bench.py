"""`make bench`: time greedy and blockwise decoding side by side on a trained model and print the ratios.

    python experiments/bench.py experiment=demo                       # the demo's model (trained if missing)
    python experiments/bench.py experiment=demo 'bench.archs=[medusa,blockdiag,paper]'
    python experiments/bench.py experiment=demo device=cuda bench.dtype=bfloat16 'bench.batch_sizes=[1,8,32]'

Rows go to results/bench/rows.jsonl; with bench.specbench_records=true, Spec-Bench records to
results/bench/specbench/.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from _common import CONF_DIR, run_experiment, start
from omegaconf import DictConfig

if TYPE_CHECKING:
    from _schemas import BenchEntry

    from bpd.config import ExperimentConfig



def run(cfg: ExperimentConfig, entry: BenchEntry) -> list[dict]:
    from bpd.bench.floor import last_level_cache, memory_bandwidth
    from bpd.bench.rows import format_bench, format_breakdown, format_floors
    from bpd.bench.specbench import write_jsonl
    from bpd.bench.timing import BenchPlan, Reporting, TimingPolicy, run_bench
    from bpd.decoding.spec import Resources, bench_specs, prepare
    from bpd.runtime import Runtime, resolve_path
    from bpd.stages import Recipe, ensure_draft, ensure_heads
    from bpd.tasks import load_task
    from bpd.tracking import append_rows

    b = entry.bench
    b.validate()
    ks = bench_ks(cfg, b)
    archs = b.archs or [cfg.heads.arch]
    runtime = Runtime.build(cfg)
    task = load_task(runtime, cfg.task, cfg.shipped)
    device = runtime.device
    sources = task.pairs(cfg.decode.split).sources()
    out_dir = resolve_path(b.results_dir)
    all_rows = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    bandwidth = memory_bandwidth(device) if b.floors else None
    llc = last_level_cache() if b.floors and device.type == "cpu" else None
    draft_path = ensure_draft(runtime, Recipe.of(cfg), task)
    resources = Resources(device, {"draft": draft_path} if draft_path is not None else {})
    prepared = None
    for arch in archs:
        c = arch_config(cfg, arch, b)
        path = ensure_heads(runtime, Recipe.of(c), task)
        model, payload = bench_model(path, device, b, task.proposal_vocab(cfg.decode.proposal_vocab),
                                     cfg.decode.proposal_precision)
        specs = bench_specs(b, ks, models=resources.models)
        if prepared is None:  # what methods build beside the model (a draft, an n-gram model) fits every arch's
            prepared = prepare(specs, task, model, resources)
        common = common_columns(cfg, c, task, path, model, payload, b, device, draft_path)
        plan = BenchPlan(specs, b.batch_sizes, task.max_len(cfg.decode), engines=b.engines, n_examples=b.n_examples,
                         prepared=prepared)
        timing = TimingPolicy(repeats=b.repeats, max_repeats=b.max_repeats, ci_target=b.ci_target,
                              ci_batch_sizes=b.ci_batch_sizes, step_repeats=b.step_repeats)
        report = Reporting(common=common, model_id=f"{cfg.name}-{arch}", category=task.name, detok=task.detokenize,
                           bandwidth=bandwidth, llc=llc)
        rows, records = run_bench(model, sources, plan, device, timing, report)
        append_rows(out_dir / "rows.jsonl", rows)
        if b.specbench_records:
            for model_id, recs in records.items():  # one file per decoder; *-greedy.jsonl is the baseline
                write_jsonl(out_dir / "specbench" / f"{stamp}_{arch}" / f"{model_id}.jsonl", recs)
        print(format_bench(rows), flush=True)
        print("\nwhere a step's time goes (ms; exact rounds; scoring = p_1 projection, argmax, accept, sync, rollback)")
        print(format_breakdown(rows), flush=True)
        if bandwidth:
            print("\neach step against its floor (the weight bytes it reads over the memory bandwidth)")
            print(format_floors(rows), flush=True)
        all_rows += rows
    print(f"\nrows: {Path(out_dir) / 'rows.jsonl'}")
    if b.specbench_records:
        print(f"Spec-Bench records: {Path(out_dir) / 'specbench' / stamp}_*/ "
              "(Spec-Bench's evaluation/speed.py: --file-path <decoder>.jsonl --base-path <...>-greedy.jsonl)")
    return all_rows


def bench_ks(cfg: ExperimentConfig, b) -> list[int]:
    """The decode-time ks to time: every architecture's heads are trained with heads.k slots, so a k above it
    has nothing to time (said, and refused when no k is left)."""
    ks = [k for k in b.ks if k <= cfg.heads.k]
    if not ks:
        raise ValueError(f"bench.ks {list(b.ks)} are all above the heads' k={cfg.heads.k}, so only greedy would be "
                         "timed; lower bench.ks or raise heads.k.")
    if len(ks) < len(b.ks):
        print(f"bench.ks {[k for k in b.ks if k not in ks]}: above the heads' k={cfg.heads.k}, skipped")
    return ks


def arch_config(cfg: ExperimentConfig, arch: str, b) -> ExperimentConfig:
    """The experiment, or for another architecture's heads the same recipe trained briefly."""
    if arch == cfg.heads.arch:
        return cfg
    from bpd.config import chained_archs

    tied = cfg.heads.tie_slots and arch in chained_archs()  # tying applies to chained slots only
    return dataclasses.replace(cfg, heads=dataclasses.replace(cfg.heads, arch=arch, tie_slots=tied),
                               heads_train=dataclasses.replace(cfg.heads_train, max_steps=b.arch_train_steps,
                                                               max_minutes=b.arch_train_minutes))


def bench_model(path: Path, device, b, proposal_vocab, proposal_precision: str = "float32"):
    """The trained model in the bench's dtype, with the experiment's proposal vocabulary and precision, compiled
    if asked."""
    import torch

    from bpd.bench.timing import torch_dtype
    from bpd.models import fastpath
    from bpd.training.checkpoint import load_model

    model, payload = load_model(path, device)
    if b.dtype != "float32":
        model = model.to(torch_dtype(b.dtype))
    model.heads.set_proposal_vocab(proposal_vocab)  # the experiment's setting
    model.heads.set_proposal_precision(fastpath.precision_on(device, proposal_precision))
    if b.compile:
        model.decode = torch.compile(model.decode, dynamic=True)
    return model, payload


def common_columns(cfg: ExperimentConfig, c: ExperimentConfig, task, path: Path, model, payload: dict, b, device,
                   draft_path: Path | None) -> dict:
    """What every row of one architecture's bench carries: the model and how it was trained, the machine."""
    import torch

    from bpd.tracking import device_name, git_sha

    return {
        "experiment": "bench",
        "source_experiment": cfg.name,
        "task": task.kind,
        "dataset": task.name,
        "split": cfg.decode.split,
        "model": path.name,
        "heads_arch": c.heads.arch,
        "heads_tied": model.heads.tie_slots,
        "trained_k": model.k,
        "proposal_vocab": cfg.decode.proposal_vocab,
        "proposal_precision": model.heads.proposal_precision,  # what ran (int8 is a CPU path)
        "heads_training": (payload.get("heads_config") or {}).get("training"),
        "heads_targets": c.heads.targets,  # what the heads were trained on (gold, distilled, self)
        "setting": cfg.setting,
        "train_steps": payload.get("step"),
        "device": device_name(device),
        "dtype": b.dtype,
        "threads": torch.get_num_threads(),
        "compile": b.compile,
        "draft_model": draft_path.name if draft_path is not None else None,
        "git_sha": git_sha(),
        "command": cfg.command,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


@hydra.main(config_path=CONF_DIR, config_name="bench", version_base="1.3")
def job(cfg: DictConfig) -> None:
    from bpd.decoding.compiling import graph_per_bucket

    # Benchmarks time steady-state steps: one compiled graph per source bucket, whose steps are faster than those
    # of the one graph an evaluation shares across buckets (docs/benchmark.md).
    with graph_per_bucket():
        run_experiment(run, cfg, engines=lambda entry: entry.bench.engines)


def main() -> None:
    start()  # the plugins and schemas, before Hydra composes (importing this module changes nothing)
    job()


if __name__ == "__main__":
    main()
