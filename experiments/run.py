"""One experiment end to end: data -> base model -> [distillation] -> proposal heads -> evaluation.

    python experiments/run.py experiment=demo
    python experiments/run.py -m heads.k=2,4 heads.training=frozen,finetune   # a sweep

Every stage is cached by its config hash, so re-running skips finished work and resumes the rest.
"""

from __future__ import annotations

import hydra
from _common import CONF_DIR, friendly
from omegaconf import DictConfig


def pipeline(cfg: dict) -> list[dict]:
    from bpd.pipeline import check_train_options, decode_specs, ensure_heads, evaluate, load_task

    decode_specs(cfg, int(cfg["heads"]["k"]))  # bad decoding and training options fail now, not after training
    check_train_options(cfg)
    data = load_task(cfg)
    model_path = ensure_heads(cfg, data)
    return evaluate(cfg, data, model_path)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    friendly(pipeline, cfg)


if __name__ == "__main__":
    main()
