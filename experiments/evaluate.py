"""Evaluate a trained model (the one the config would train, or checkpoint=PATH) and write result rows.

python experiments/evaluate.py heads.k=8 decode.ks=[2,4,8] decode.batch_size=1
python experiments/evaluate.py checkpoint=outputs/cache/models/heads_....pt decode=blockwise
"""

from __future__ import annotations

from pathlib import Path

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def run(cfg: dict) -> list[dict]:
    from bpd.pipeline import ensure_heads, evaluate, load_task

    data = load_task(cfg)
    ckpt = cfg.get("checkpoint")
    path = Path(ckpt) if ckpt else ensure_heads(cfg, data)
    return evaluate(cfg, data, path)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(run, cfg)


if __name__ == "__main__":
    main()
