"""Every shipped model (checkpoints/*.json: base models made by `make pretrain`, heads models by
`experiments/pretrain.py models=[heads]`) loads, matches its manifest and decodes its golden sample to the recorded
tokens (and a heads model to the recorded blockwise rounds); the toy export is held to the same checks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from bpd.data.batches import pad_rows
from bpd.decoding import blockwise_decode, greedy_decode
from bpd.shipped import load_shipped, sample_agrees
from bpd.targets import sampled_sources

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted((REPO / "checkpoints").glob("*.json"))
MAX_BYTES = 30 * 2**20  # what the repository ships per checkpoint (the 8k-vocabulary Debian bases outgrow 20)
# A heads model is its (fine-tuned) base and its k slots together: the Debian Both model's 10 slots add 12 MB.
MAX_HEADS_BYTES = 40 * 2**20


def check_shipped(manifest_path: Path) -> None:
    m = json.loads(manifest_path.read_text())
    weights = manifest_path.with_suffix(".pt")
    heads = m.get("role") == "heads"
    assert weights.stat().st_size == m["bytes"] <= (MAX_HEADS_BYTES if heads else MAX_BYTES)
    model = load_shipped(manifest_path)
    assert sum(p.numel() for p in model.state_dict().values()) == m["parameters"]
    assert model.cfg.vocab_size == m["model_config"]["vocab_size"]
    assert model.k == (m["model_config"]["k"] if heads else 1) and (model.k > 1) == heads
    assert m["steps"] == m["train_config"]["max_steps"] or m["stopped_by"] == "patience", "a budget in steps"
    sample = m["golden_sample"]
    for src, expected in zip(sample["sources"], sample["greedy"], strict=True):
        out = greedy_decode(model, pad_rows([src], model.pad_id, min_width=1), max_len=sample["max_len"]).tokens[0]
        assert out == expected
    if heads:  # the proposal heads, pinned by how many rounds exact decoding takes at the trained k
        assert sample["blockwise_k"] == model.k and any(n < len(g) for n, g in
                                                        zip(sample["blockwise_iterations"], sample["greedy"]))
        for src, expected, rounds in zip(sample["sources"], sample["greedy"], sample["blockwise_iterations"],
                                         strict=True):
            out = blockwise_decode(model, pad_rows([src], model.pad_id, min_width=1), max_len=sample["max_len"])
            assert (out.tokens[0], out.iterations[0]) == (expected, rounds)
    if "greedy_train" in m:  # its greedy outputs on the training sources (the demo's self-distillation targets)
        g = m["greedy_train"]
        path = manifest_path.with_name(g["file"])
        assert path.stat().st_size <= MAX_BYTES and hashlib.sha256(path.read_bytes()).hexdigest() == g["sha256"]
        with np.load(path) as z:
            assert len(z["index"]) == len(z["lengths"]) == g["lines"] and int(z["lengths"].sum()) == len(z["tokens"])
            # every training line once, or distill.max_sources of them spread evenly (the Debian base's 50,000)
            decoded = sorted(z["index"].tolist())
            assert decoded == sampled_sources(g.get("of", g["lines"]), g["lines"]).tolist()
            starts = np.concatenate([[0], np.cumsum(z["lengths"])[:-1]])
            row = {int(i): r for r, i in enumerate(z["index"])}
            stored = [z["tokens"][starts[row[i]] : starts[row[i]] + z["lengths"][row[i]]].tolist()
                      for i in g["sample"]["index"]]
        assert g["sample"]["index"] == decoded[:4] and stored == g["sample"]["greedy"]
        assert any(len(out) > 1 for out in stored), "a sample of EOS alone would check nothing"
        assert sample_agrees(model, g["sample"])


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
    from toy import staged

    from bpd.stages import base_path_for
    from bpd.tasks import TASKS

    cfg, _ = composed([f"experiment={experiment}"])
    task = TASKS[cfg.task.kind](dataclasses.replace(cfg.task), tmp_path / "data")
    shipped = {json.loads(p.read_text())["cache_name"]: json.loads(p.read_text()) for p in SHIPPED}
    manifest = shipped[staged(base_path_for, cfg, task).name]
    assert task.fingerprint() == manifest["fingerprint"]


def test_the_shipped_debian_tokenizer_names_the_reference_corpus():
    """The tokenizer shipped beside the Debian bases is named for the committed reference build's corpus hash
    (so a build of those packages installs it), has the Debian bases' vocabulary and the id contract, and
    carries no machine's paths."""
    from sentencepiece import sentencepiece_model_pb2

    from bpd.data.tokenizer import Tokenizer, tokenizer_file
    from corpora.debian.build import REFERENCE_MANIFEST

    corpus = json.loads(REFERENCE_MANIFEST.read_text())["corpus_hash"]
    vocab = json.loads((REPO / "checkpoints" / "debian_en_de_base.json").read_text())["model_config"]["vocab_size"]
    path = tokenizer_file(REPO / "checkpoints", f"debian_en_de_{corpus}", vocab)
    assert Tokenizer(path).vocab_size == vocab  # refuses a file without the pad/bos/eos contract
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    assert list(proto.trainer_spec.input) == ["train.src", "train.tgt"] and "/" not in proto.trainer_spec.model_prefix
