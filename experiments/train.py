"""Train one stage: ``stage=base`` (p_1), ``stage=heads`` (k proposal heads), or ``stage=all``.

python experiments/train.py stage=base model=tiny train.max_minutes=10
python experiments/train.py stage=heads heads.k=8 heads.training=finetune heads.targets=self
python experiments/train.py -m stage=heads heads.k=1,2,4,6,8,10          # one model per k

The same command runs data-parallel on several GPUs and nodes, unchanged:

torchrun --nproc_per_node=8 experiments/train.py experiment=table1 task.data_dir=... dist.reference_world_size=8
python experiments/train.py -m hydra/launcher=submitit_slurm experiment=table1 ...   # one SLURM job per config

Every rank runs this script; rank 0 alone prepares the data cache first, logs and writes checkpoints.
"""

from __future__ import annotations

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def run(cfg: dict) -> str:
    from bpd.pipeline import check_train_options, ensure_base, ensure_heads, load_task
    from bpd.training.distributed import init_distributed, main_first

    check_train_options(cfg)  # a bad heads_train value fails now, not after the base model's training
    dc = cfg.get("dist") or {}
    info = init_distributed(dc.get("backend"), cfg.get("device"), dc.get("timeout_min"))
    data = main_first(lambda: load_task(cfg))  # rank 0 tokenizes and caches; the others then read its files
    if cfg.get("stage", "all") == "base":
        path = ensure_base(cfg, data, cfg.get("base_targets", "gold"))
    else:
        path = ensure_heads(cfg, data)
    if info.is_main:
        print(f"checkpoint: {path}")
    return str(path)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
