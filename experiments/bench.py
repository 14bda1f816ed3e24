"""`make bench`: time greedy and blockwise decoding side by side on a trained model and print the ratios.

    python experiments/bench.py experiment=demo                       # the demo's model (trained if missing)
    python experiments/bench.py experiment=demo bench.archs=[medusa,blockdiag,paper]
    python experiments/bench.py experiment=demo device=cuda bench.dtype=bfloat16 bench.batch_sizes=[1,8,32]

Rows go to results/bench/rows.jsonl, Spec-Bench records to results/bench/specbench/.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def run(cfg: dict) -> list[dict]:
    import torch

    from bpd.bench import DTYPES, check_options, format_bench, format_breakdown, run_bench, write_jsonl
    from bpd.evaluation import DecodeSpec
    from bpd.pipeline import (
        apply_proposal_vocab,
        ensure_heads,
        load_task,
        pick_device,
        resolve_path,
        translation_max_len,
    )
    from bpd.tracking import append_rows, device_name, git_sha
    from bpd.training.checkpoint import load_model

    b = cfg["bench"]
    archs = b.get("archs") or [cfg["heads"]["arch"]]
    dtype = b.get("dtype") or "float32"
    check_options(b["batch_sizes"], b["ks"], dtype, archs, b["criteria"])
    data = load_task(cfg)
    device = pick_device(cfg.get("device"))
    split = cfg["decode"].get("split", "test")
    sources = [s for s, _ in data.pairs(split)]
    if data.kind == "translation":
        max_len = translation_max_len(cfg["decode"])

        crit_kw: dict = {}
    else:
        seq = len(data.pairs(split)[0][1])

        def max_len(src):
            return seq

        crit_kw = {"offset": 0, "n_values": 256}
    out_dir = resolve_path(b.get("results_dir", "results/bench"))
    all_rows = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for arch in archs:
        c = copy.deepcopy(cfg)
        if arch != cfg["heads"]["arch"]:
            c["heads"]["arch"] = arch
            c["heads_train"] = {**(c.get("heads_train") or {}), "max_minutes": float(b["arch_train_minutes"])}
        path = ensure_heads(c, data)
        model, payload = load_model(path, device)
        if dtype != "float32":
            model = model.to(DTYPES[dtype])
        proposal_vocab = apply_proposal_vocab(model, cfg, data)  # the experiment's decode setting
        if b.get("compile"):
            model.decode = torch.compile(model.decode, dynamic=True)
        ks = [k for k in b["ks"] if k <= model.k]
        specs = [DecodeSpec("greedy")] + ([DecodeSpec("naive_greedy")] if b.get("naive_greedy") else [])
        for crit in b["criteria"]:
            specs += [DecodeSpec("blockwise", k=k, criterion=crit["name"], criterion_param=crit.get("param"))
                      for k in ks]
        common = {
            "experiment": "bench",
            "source_experiment": cfg.get("name"),
            "task": data.kind,
            "dataset": data.name,
            "split": split,
            "model": path.name,
            "heads_arch": arch,
            "trained_k": model.k,
            "proposal_vocab": proposal_vocab,
            "heads_training": payload["train_config"].get("heads_training"),
            "heads_targets": c["heads"].get("targets"),  # what the heads were trained on (gold, distilled, self)
            "setting": cfg.get("setting"),
            "train_steps": payload.get("step"),
            "device": device_name(device),
            "dtype": dtype,
            "threads": torch.get_num_threads(),
            "compile": bool(b.get("compile")),
            "git_sha": git_sha(),
            "command": cfg.get("_command"),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        n_ex = {int(k): int(v) for k, v in (b.get("n_examples") or {}).items()}
        rows, records = run_bench(model, sources, specs, [int(x) for x in b["batch_sizes"]], max_len, device,
                                  repeats=int(b["repeats"]), n_examples=n_ex, criterion_kwargs=crit_kw,
                                  common=common, model_id=f"{cfg.get('name')}-{arch}",
                                  step_repeats=int(b.get("step_repeats", 200)))
        append_rows(out_dir / "rows.jsonl", rows)
        write_jsonl(out_dir / "specbench" / f"{stamp}_{arch}.jsonl", records)
        print(format_bench(rows), flush=True)
        print("\nwhere a step's time goes (ms; exact rounds; scoring = p_1 projection, argmax, accept, sync, rollback)")
        print(format_breakdown(rows), flush=True)
        all_rows += rows
    print(f"\nrows: {Path(out_dir) / 'rows.jsonl'}; Spec-Bench records: {Path(out_dir) / 'specbench'}/")
    return all_rows


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
