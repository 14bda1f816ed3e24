"""Every shipped base model (checkpoints/*.json, made by `make pretrain`) loads, matches its manifest and
decodes its golden sample to the recorded tokens; the toy export is held to the same checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bpd.decoding import greedy_decode
from bpd.decoding.common import pad_rows
from bpd.shipped import load_shipped

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "checkpoints").glob("*.json"))
MAX_BYTES = 20 * 2**20  # what the repository ships per checkpoint


def check_shipped(manifest_path: Path) -> None:
    m = json.loads(manifest_path.read_text())
    weights = manifest_path.with_suffix(".pt")
    assert weights.stat().st_size == m["bytes"] <= MAX_BYTES
    model = load_shipped(manifest_path)
    assert sum(p.numel() for p in model.state_dict().values()) == m["parameters"]
    assert model.cfg.vocab_size == m["model_config"]["vocab_size"] and model.k == 1
    assert m["steps"] == m["train_config"]["max_steps"] or m["stopped_by"] == "patience", "a budget in steps"
    sample = m["golden_sample"]
    for src, expected in zip(sample["sources"], sample["greedy"], strict=True):
        out = greedy_decode(model, pad_rows([src], model.pad_id), max_len=sample["max_len"]).tokens[0]
        assert out == expected


@pytest.mark.parametrize("manifest", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_checkpoint_matches_its_manifest(manifest):
    check_shipped(manifest)


@pytest.mark.parametrize("experiment", ["demo", "demo_sr"])
def test_a_fresh_build_of_the_embedded_data_installs_the_shipped_base(experiment, tmp_path):
    """The data and tokenizer a fresh clone builds fingerprint as the shipped base's manifest says, so `make
    demo` installs it (a fingerprint of the tokenizer's file bytes, which record the training run's
    temporary paths, once refused it on every new machine)."""
    import dataclasses

    from test_config import composed

    from bpd.stages import base_path_for
    from bpd.tasks import TASKS

    cfg, _ = composed([f"experiment={experiment}"])
    task = TASKS[cfg.task.kind](dataclasses.replace(cfg.task), tmp_path / "data")
    shipped = {json.loads(p.read_text())["cache_name"]: json.loads(p.read_text()) for p in SHIPPED}
    manifest = shipped[base_path_for(cfg, task).name]
    assert task.fingerprint() == manifest["fingerprint"]
