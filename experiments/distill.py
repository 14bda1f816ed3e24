"""Sequence-level distillation: train a teacher (another seed), beam-decode the training sources in
resumable shards, and write the distilled training set; optionally train base and heads on it.

    python experiments/distill.py                       # teacher + distilled data only
    python experiments/distill.py stage=all heads.k=8   # then base and heads on distilled data
"""

from __future__ import annotations

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def run(cfg: dict) -> None:
    from bpd.pipeline import distilled_pairs, ensure_heads, load_task

    data = load_task(cfg)
    pairs = distilled_pairs(cfg, data)
    print(f"distilled training set: {len(pairs)} pairs")
    if cfg.get("stage", "all") == "all" and cfg.get("stage") != "data":
        cfg = {**cfg, "base_targets": "distilled", "heads": {**cfg["heads"], "targets": "distilled"}}
        print(f"heads checkpoint: {ensure_heads(cfg, data)}")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
