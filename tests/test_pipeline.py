"""End to end on a toy corpus: data -> base -> distillation -> heads -> evaluation rows."""

from __future__ import annotations

import json

import pytest
import torch
from toy import toy_config

from bpd import pipeline
from bpd.tracking import read_rows

ROW_COLUMNS = {
    "task",
    "dataset",
    "split",
    "model",
    "k",
    "heads_training",
    "distilled",
    "criterion",
    "criterion_param",
    "min_block_size",
    "batch_size",
    "n_examples",
    "bleu",
    "mean_block_size",
    "iterations",
    "invocations",
    "greedy_iterations",
    "identical_to_greedy",
    "wallclock_s",
    "greedy_wallclock_s",
    "speedup",
    "device",
    "seed",
    "git_sha",
    "hyp_file",
    "ref_file",
    "bleu_signature",
    "acceptance_rate_per_position",
    "block_size_histogram",
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    cfg = toy_config(tmp)
    data = pipeline.load_task(cfg)
    return tmp, cfg, data


def test_full_pipeline_rows(toy):
    tmp, cfg, data = toy
    path = pipeline.ensure_heads(cfg, data)
    rows = pipeline.evaluate(cfg, data, path)
    names = [r["decoder"] for r in rows]
    assert names == [
        "greedy",
        "beam2_a0.6",
        "blockwise_k2_exact",
        "blockwise_k3_exact",
        "blockwise_k2_topk2",
        "blockwise_k3_topk2",
    ]
    for r in rows:
        assert ROW_COLUMNS <= set(r), ROW_COLUMNS - set(r)
        assert r["n_examples"] == len(data.test)
    exact = [r for r in rows if r["criterion"] == "exact"]
    greedy = rows[0]
    for r in exact:
        assert r["identical_to_greedy"] == 1.0
        assert r["bleu"] == pytest.approx(greedy["bleu"])
        assert r["invocations"] == r["iterations"] + r["n_examples"]  # batch 1: one extra call per sentence
    # BLEU is recomputable with sacrebleu from the written files.
    import sacrebleu

    r = exact[-1]
    hyp = pipeline.resolve_path(r["hyp_file"]).read_text().splitlines()
    ref = pipeline.resolve_path(r["ref_file"]).read_text().splitlines()
    assert sacrebleu.corpus_bleu(hyp, [ref]).score == pytest.approx(r["bleu"])
    # Rows are on disk, and a second evaluation of the same config is skipped (idempotent sweeps).
    on_disk = read_rows(tmp / "results" / "rows.jsonl")
    assert len(on_disk) == len(rows)
    again = pipeline.evaluate(cfg, data, path)
    assert len(read_rows(tmp / "results" / "rows.jsonl")) == len(rows) and len(again) == len(rows)
    # A model retrained under the same config (same file name, other weights: e.g. a fresh clone whose
    # results/ holds committed rows) is evaluated anew, not skipped.
    ckpt = torch.load(path, weights_only=False)
    ckpt["step"] = ckpt["step"] + 1
    torch.save(ckpt, path)
    pipeline.evaluate(cfg, data, path)
    assert len(read_rows(tmp / "results" / "rows.jsonl")) == 2 * len(rows)
    # decode.skip_existing=false redoes the same run: same run id, so the same output folder.
    redo = {**cfg, "decode": {**cfg["decode"], "skip_existing": False}}
    assert pipeline.run_id(redo, path) == pipeline.run_id(cfg, path) == rows[0]["run_id"]
    json.dumps(rows)  # tidy: serialisable


def test_distillation_and_self_targets(toy):
    tmp, cfg, data = toy
    d = pipeline.distilled_pairs(cfg, data)
    # Empty outputs (EOS alone) are dropped; everything else ends in EOS, even when cut by max_len.
    assert len(d) > 0.5 * len(data.train)
    assert all(t[-1] == data.eos_id and len(t) >= 2 for _, t in d)
    assert {tuple(s) for s, _ in d} <= {tuple(s) for s, _ in data.train}
    # Shards are resumable: the final file is reused without decoding again.
    assert pipeline.distilled_pairs(cfg, data) == d
    cfg2 = {**cfg, "base_targets": "distilled", "heads": {**cfg["heads"], "targets": "distilled"}}
    p = pipeline.ensure_heads(cfg2, data)
    assert "distilled" in p.name
    base = pipeline.ensure_base(cfg, data)
    s = pipeline.self_pairs(cfg, data, base)
    assert 0 < len(s) <= len(data.train)


def test_finished_heads_need_nothing_else(toy, tmp_path, monkeypatch):
    """A heads checkpoint copied alone into a cache (e.g. carried to a GPU machine) is reused as is: neither its
    base model nor its self-distilled targets are rebuilt, and the path is known without training anything."""
    _, cfg, data = toy
    cfg = {**cfg, "heads": {**cfg["heads"], "targets": "self"}}
    trained = pipeline.ensure_heads(cfg, data)
    assert pipeline.heads_path_for(cfg, data) == trained
    other = {**cfg, "paths": {**cfg["paths"], "cache_dir": str(tmp_path / "cache")}}
    target = pipeline.heads_path_for(other, data)
    assert target.name == trained.name and not target.exists()
    target.parent.mkdir(parents=True)
    target.write_bytes(trained.read_bytes())

    def no(*_a, **_k):
        raise AssertionError("a finished heads model must not rebuild its base or targets")

    monkeypatch.setattr(pipeline, "ensure_base", no)
    monkeypatch.setattr(pipeline, "self_pairs", no)
    assert pipeline.ensure_heads(other, data) == target


def test_clear_errors(toy, tmp_path):
    tmp, cfg, data = toy
    with pytest.raises(ValueError, match="decode.ks"):
        pipeline.decode_specs({"decode": {"ks": [5]}}, model_k=3)
    for bad, match in (({"split": "foo"}, "decode.split"), ({"batch_size": 0}, "decode.batch_size"),
                       ({"n_examples": 0}, "decode.n_examples")):
        with pytest.raises(ValueError, match=match):
            pipeline.decode_specs({"decode": {"ks": [2], **bad}}, model_k=3)
    with pytest.raises(ValueError, match="unknown split"):
        data.pairs("validation")
    pipeline.check_train_options(cfg)  # the toy config is fine
    with pytest.raises(ValueError, match=r"heads_train \(or train\)\.max_steps"):
        pipeline.check_train_options({**cfg, "heads_train": {**(cfg.get("heads_train") or {}), "max_steps": 0}})
    with pytest.raises(ValueError, match="unknown acceptance criterion"):
        pipeline.decode_specs({"decode": {"ks": [2], "criteria": [{"name": "vibes"}]}}, model_k=3)
    with pytest.raises(FileNotFoundError, match="task.data_dir"):
        pipeline.load_task({**cfg, "task": {**cfg["task"], "data_dir": str(tmp_path / "missing")}})
    with pytest.raises(FileNotFoundError, match="data_dir"):
        pipeline.load_task({**cfg, "task": {"kind": "translation", "name": "wmt14_en_de", "data_dir": None}})
    with pytest.raises(ValueError, match="heads.k"):
        pipeline.ensure_heads({**cfg, "heads": {**cfg["heads"], "k": 0}}, data)
    with pytest.raises(ValueError, match="heads.targets"):
        pipeline.ensure_heads({**cfg, "heads": {**cfg["heads"], "targets": "oracle"}}, data)


def test_vocabulary_mismatch_is_a_clear_error(toy, tmp_path):
    from bpd.training.checkpoint import CheckpointError

    tmp, cfg, data = toy
    path = pipeline.ensure_heads(cfg, data)
    other = pipeline.load_task({**cfg, "task": {**cfg["task"], "vocab_size": 80}, "paths": {
        **cfg["paths"], "results_dir": str(tmp_path / "r")}})
    with pytest.raises(CheckpointError, match="vocabulary of"):
        pipeline.evaluate({**cfg, "paths": {**cfg["paths"], "results_dir": str(tmp_path / "r")}}, other, path)


def test_corrupt_checkpoint_is_retrained_not_crashing(toy, capsys):
    tmp, cfg, data = toy
    base = pipeline.ensure_base(cfg, data)
    base.write_bytes(b"garbage")
    state = base.with_name(base.stem + ".state.pt")
    if state.exists():
        state.unlink()
    again = pipeline.ensure_base(cfg, data)
    assert again == base
    from bpd.training.checkpoint import load_checkpoint

    assert load_checkpoint(again)["step"] > 0
