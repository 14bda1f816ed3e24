"""Train one stage: ``stage=base`` (p_1), ``stage=heads`` (k proposal heads), or ``stage=all``.

python experiments/train.py stage=base model=tiny train.max_minutes=10
python experiments/train.py stage=heads heads.k=8 heads.training=finetune heads.targets=self
python experiments/train.py -m stage=heads heads.k=1,2,4,6,8,10          # one model per k
"""

from __future__ import annotations

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def run(cfg: dict) -> str:
    from bpd.pipeline import ensure_base, ensure_heads, load_task

    data = load_task(cfg)
    if cfg.get("stage", "all") == "base":
        path = ensure_base(cfg, data, cfg.get("base_targets", "gold"))
    else:
        path = ensure_heads(cfg, data)
    print(f"checkpoint: {path}")
    return str(path)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
