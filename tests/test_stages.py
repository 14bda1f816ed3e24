"""End to end on a toy corpus: data -> base -> distillation -> heads -> evaluation rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from toy import evaluate_toy, self_pairs, staged, toy_config, toy_task, tweak

from bpd import stages, targets
from bpd.config import BeamOptions, CriterionConfig, MethodsConfig
from bpd.decoding.spec import decode_specs
from bpd.evaluate import run_id
from bpd.runtime import resolve_path
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
    # paired timing (issue 46): the interval, each repeat's speedup, the flag, and the machine's load
    "speedup_ci_low",
    "speedup_ci_high",
    "speedup_repeats",
    "timing_repeats",
    "timing_note",
    "load_other_cores",
    "load_self_cores",
    "timing_busy",
}

#: Decoding without beam search (decode.methods.beam.size=0).
NO_BEAM = MethodsConfig(beam=BeamOptions(0))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("toy")
    cfg = toy_config(tmp)
    return tmp, cfg, toy_task(cfg)


def test_full_pipeline_rows(toy):
    tmp, cfg, task = toy
    path = staged(stages.ensure_heads, cfg, task)
    rows = evaluate_toy(cfg, task, path)
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
        assert r["n_examples"] == len(task.pairs("test"))
        # Both stages ran out of steps (no time cap in the toy config): the same model on any machine.
        assert (r["train_stopped_by"], r["base_stopped_by"]) == ("steps", "steps")
    exact = [r for r in rows if r["criterion"] == "exact"]
    greedy = rows[0]
    for r in exact:
        assert r["identical_to_greedy"] == 1.0
        assert r["bleu"] == pytest.approx(greedy["bleu"])
        assert r["invocations"] == r["iterations"] + r["n_examples"]  # batch 1: one extra call per sentence
    # BLEU is recomputable with sacrebleu from the written files.
    import sacrebleu

    r = exact[-1]
    hyp = resolve_path(r["hyp_file"]).read_text().splitlines()
    ref = resolve_path(r["ref_file"]).read_text().splitlines()
    assert sacrebleu.corpus_bleu(hyp, [ref]).score == pytest.approx(r["bleu"])
    # Rows are on disk, and a second evaluation of the same config is skipped (idempotent sweeps).
    on_disk = read_rows(tmp / "results" / "rows.jsonl")
    assert len(on_disk) == len(rows)
    again = evaluate_toy(cfg, task, path)
    assert len(read_rows(tmp / "results" / "rows.jsonl")) == len(rows) and len(again) == len(rows)
    # A model retrained under the same config (same file name, other weights: e.g. a fresh clone whose
    # results/ holds committed rows) is evaluated anew, not skipped.
    ckpt = torch.load(path, weights_only=False)
    ckpt["step"] = ckpt["step"] + 1
    torch.save(ckpt, path)
    evaluate_toy(cfg, task, path)
    assert len(read_rows(tmp / "results" / "rows.jsonl")) == 2 * len(rows)
    # decode.skip_existing=false redoes the same run (same run id) into a new output folder: the files that
    # earlier rows point at are never rewritten.
    redo = tweak(cfg, decode={"skip_existing": False})
    assert run_id(redo.decode, "folder", "cpu", path) == run_id(cfg.decode, "folder", "cpu", path) == rows[0]["run_id"]
    written = {r["hyp_file"] for r in read_rows(tmp / "results" / "rows.jsonl")}
    before = {f: resolve_path(f).read_bytes() for f in written}
    again = evaluate_toy(redo, task, path)
    assert {resolve_path(r["hyp_file"]).parent.name for r in again} == {rows[0]["run_id"] + "-3"}
    assert all(resolve_path(f).read_bytes() == b for f, b in before.items())
    json.dumps(rows)  # tidy: serialisable


def test_distillation_and_self_targets(toy, monkeypatch):
    tmp, cfg, task = toy
    train = task.pairs("train")
    d = staged(stages.distillation_targets, cfg, task, None)
    pairs = [d.pair(i) for i in range(len(d))]
    # Empty outputs (EOS alone) are dropped; everything else ends in EOS, even when cut by max_len.
    assert len(d) > 0.5 * len(train)
    assert all(t[-1] == task.eos_id and len(t) >= 2 for _, t in pairs)
    it = iter(train.sources())
    assert all(any(s == x for x in it) for s, _ in pairs)  # the training sources, in the training order
    # The targets are the teacher's beam outputs, shard by shard: redecode a few and compare.
    from bpd.data.batches import pad_rows
    from bpd.decoding import beam_decode
    from bpd.training.checkpoint import load_model

    teacher, _ = load_model(staged(stages.base_path_for, cfg, task, "gold", seed=cfg.teacher_seed))
    for s, t in pairs[:5]:
        src = pad_rows([s], task.pad_id, min_width=1)
        out = beam_decode(teacher, src, cfg.distill.beam, cfg.distill.alpha, task.max_len(cfg.decode)(src)).tokens[0]
        assert t == (out if out[-1] == task.eos_id else out + [task.eos_id])
    # Shards are resumable: the final store is reused without decoding again.
    again = staged(stages.distillation_targets, cfg, task, None)
    assert again.path == d.path and [again.pair(i) for i in range(len(again))] == pairs
    # A sample of the sources (the heads' distill.max_sources) is read from that decode of them all, not decoded.
    with monkeypatch.context() as m:
        m.setattr(targets, "_decode_targets", lambda *a: pytest.fail("decoded again"))
        sample = staged(stages.distillation_targets, tweak(cfg, distill={"max_sources": 5}), task, 5)
    chosen = {tuple(train.src(int(i)).tolist()) for i in targets.sampled_sources(len(train), 5)}
    expected = [(s, t) for s, t in pairs if tuple(s) in chosen]
    assert sample.path != d.path and [sample.pair(i) for i in range(len(sample))] == expected and 0 < len(expected) <= 5
    cfg2 = tweak(cfg, base_targets="distilled", heads={"targets": "distilled"})
    p = staged(stages.ensure_heads, cfg2, task)
    assert "distilled" in p.name
    base = staged(stages.ensure_base, cfg, task)
    s = self_pairs(cfg, task, base)
    assert 0 < len(s) <= len(train)
    # distill.max_sources: only that many sources, spread over the training set, are decoded; the targets are
    # the full run's outputs on exactly those sources, and every model trained on them has a key of its own.
    few = tweak(cfg, distill={"max_sources": 5})
    chosen = targets.sampled_sources(len(train), 5)
    assert len(set(chosen.tolist())) == 5 and chosen[0] == 0 and chosen[-1] >= len(train) // 2
    assert targets.sampled_sources(len(train), None).tolist() == targets.sampled_sources(len(train), 10**6).tolist()
    s5 = self_pairs(few, task, base)
    full = {tuple(s.src(i).tolist()): s.tgt(i).tolist() for i in range(len(s))}
    assert 0 < len(s5) <= 5 and s5.path != s.path
    for i in range(len(s5)):  # the same greedy outputs; a batch's length limit may cut one (then EOS appended)
        a, b = sorted([full[tuple(s5.src(i).tolist())][:-1], s5.tgt(i).tolist()[:-1]], key=len)
        assert a == b[: len(a)]
    picked = iter([train.src(int(i)).tolist() for i in chosen])
    assert all(any(s5.src(i).tolist() == x for x in picked) for i in range(len(s5)))  # the sample, in order
    on_self = {"targets": "self"}
    assert staged(stages.heads_path_for, tweak(few, heads=on_self), task) != staged(
        stages.heads_path_for, tweak(cfg, heads=on_self), task)
    assert staged(stages.heads_path_for, tweak(few, heads={"targets": "gold"}), task) == staged(
        stages.heads_path_for, tweak(cfg, heads={"targets": "gold"}), task)
    assert staged(stages.base_path_for, few, task) == staged(stages.base_path_for, cfg, task)  # gold: nothing decoded
    # distill.max_sources is the heads' targets' sample; a distilled base decodes distill.base_sources (null: all,
    # the paper's), so it is compared with a gold base on the same sources.
    assert staged(stages.base_path_for, few, task, "distilled") == staged(stages.base_path_for, cfg, task, "distilled")
    few_base = tweak(cfg, distill={"base_sources": 5})
    assert staged(stages.base_path_for, few_base, task, "distilled") != staged(
        stages.base_path_for, cfg, task, "distilled")
    assert staged(stages.base_path_for, few_base, task) == staged(stages.base_path_for, cfg, task)
    assert staged(stages.heads_path_for, tweak(few_base, heads=on_self), task) == staged(
        stages.heads_path_for, tweak(cfg, heads=on_self), task)
    asked = []

    def record(runtime, recipe, task, sources):
        asked.append(sources)
        raise RuntimeError("recorded")

    monkeypatch.setattr(stages, "distillation_targets", record)
    both = tweak(cfg, distill={"base_sources": 7, "max_sources": 5}, base_targets="distilled",
                 heads={"targets": "distilled"})
    with pytest.raises(RuntimeError, match="recorded"):
        staged(stages.ensure_base, both, task, "distilled")
    monkeypatch.setattr(stages, "ensure_base", lambda *a, **k: staged(stages.base_path_for, cfg, task))
    with pytest.raises(RuntimeError, match="recorded"):
        staged(stages.ensure_heads, both, task)
    assert asked == [7, 5]  # the base's sample, then the heads'


def test_paper_heads_on_a_plain_base(toy):
    """identity_p1=false (the paper's p_1 through the new layer): the base trains as a plain model, and the
    heads stage adds the layer for all k slots on top of it (a base built with a k = 1 layer would have a
    shape the heads model cannot load)."""
    _, cfg, task = toy
    paper = tweak(cfg, heads={"identity_p1": False, "loss": "sampled"})
    path = staged(stages.ensure_heads, paper, task)
    from bpd.training.checkpoint import load_model

    model, payload = load_model(path)
    assert not model.heads.identity_p1 and model.k == 3 and payload["heads_config"]["loss"] == "sampled"


def test_tree_rescored_and_draft_rows_beside_the_chain(toy, tmp_path):
    """decode.methods.tree, decode.methods.rescored and a draft model (draft.model) add their own rows to an evaluation,
    token-identical to greedy with exact acceptance; the draft is a cached base model of its own sizes, built by
    its stage: evaluation without it refuses, training nothing."""
    from bpd.config import DraftConfig, ModelConfig, RescoreOptions

    _, cfg, task = toy
    draft = DraftConfig(ModelConfig("nano", 16, 2, 32, 1, 1, 0.0), max_steps=12)
    methods = MethodsConfig(beam=BeamOptions(2), tree=["2x2", "beam2"], rescored=[RescoreOptions(2, 1.0)])
    c = tweak(cfg, decode={"methods": methods,
                           "criteria": [CriterionConfig("exact")]}, draft=draft,
              paths={"cache_dir": cfg.paths.cache_dir, "results_dir": str(tmp_path / "res")})
    c.validate()
    heads = staged(stages.ensure_heads, c, task)
    models = sorted(heads.parent.iterdir())
    with pytest.raises(ValueError, match="needs the trained draft model: build it with `python experiments/train.py "
                                         "stage=draft`"):
        evaluate_toy(c, task, heads)
    assert sorted(heads.parent.iterdir()) == models
    drafted = staged(stages.ensure_draft, c, task)
    rows = evaluate_toy(c, task, heads, drafted)
    by_method = {m: [r for r in rows if r["method"] == m] for m in ("tree", "draft", "rescored")}
    assert [r["decoder"] for r in by_method["rescored"]] == ["rescored_b2_w1_k2_exact", "rescored_b2_w1_k3_exact"]
    assert [r["decoder"] for r in by_method["tree"]] == ["tree_2x2_k3_exact", "tree_beam2_k2_exact",
                                                         "tree_beam2_k3_exact"]
    assert [r["decoder"] for r in by_method["draft"]] == ["draft_k2_exact", "draft_k3_exact"]
    new = by_method["tree"] + by_method["draft"] + by_method["rescored"]
    assert all(r["identical_to_greedy"] == 1.0 and r["mean_block_size"] >= 1 for r in new)
    assert {r["draft_model"] for r in rows} == {drafted.name} and drafted != staged(stages.base_path_for, c, task)
    from bpd.training.checkpoint import load_model

    model, payload = load_model(drafted)
    assert model.cfg.d_model == 16 and payload["step"] == 12


def test_finished_heads_need_nothing_else(toy, tmp_path, monkeypatch):
    """A heads checkpoint copied alone into a cache (e.g. carried to a GPU machine) is reused as is: neither its
    base model nor its self-distilled targets are rebuilt, and the path is known without training anything."""
    _, cfg, task = toy
    cfg = tweak(cfg, heads={"targets": "self"})
    trained = staged(stages.ensure_heads, cfg, task)
    assert staged(stages.heads_path_for, cfg, task) == trained
    other = tweak(cfg, paths={"cache_dir": str(tmp_path / "cache")})
    target = staged(stages.heads_path_for, other, task)
    assert target.name == trained.name and not target.exists()
    target.parent.mkdir(parents=True)
    target.write_bytes(trained.read_bytes())

    def no(*_a, **_k):
        raise AssertionError("a finished heads model must not rebuild its base or targets")

    monkeypatch.setattr(stages, "ensure_base", no)
    monkeypatch.setattr(stages, "self_pairs", no)
    assert staged(stages.ensure_heads, other, task) == target


@pytest.mark.parametrize(
    "over, match",
    [
        ({"decode": {"ks": [5]}}, "decode.ks"),
        ({"decode": {"split": "foo"}}, "decode.split"),
        ({"decode": {"batch_size": 0}}, "decode.batch_size"),
        ({"decode": {"n_examples": 0}}, "decode.n_examples"),
        ({"heads_train": {"max_steps": 0}}, r"heads_train \(or train\)\.max_steps"),
        ({"train": {"lr": 0.0}}, r"train\.lr"),
        ({"heads": {"k": 0}}, "heads.k"),
        ({"heads": {"targets": "oracle"}}, "heads.targets"),
        ({"heads": {"arch": "lstm"}}, "heads.arch"),
        ({"base_targets": "silver"}, "base_targets"),
        ({"model": {"n_heads": 3}}, "divisible"),
    ],
)
def test_bad_options_fail_before_any_work(toy, over, match):
    _, cfg, _ = toy
    with pytest.raises(ValueError, match=match):
        tweak(cfg, **over).validate()


def test_clear_errors(toy, tmp_path):
    tmp, cfg, task = toy
    from bpd.config import CriterionConfig, DecodeConfig, experiment_config

    with pytest.raises(ValueError, match="unknown acceptance criterion"):
        decode_specs(DecodeConfig(ks=[2], criteria=[CriterionConfig("vibes")]), trained_k=3)
    with pytest.raises(ValueError, match="unknown split"):
        task.pairs("validation")
    with pytest.raises(ValueError, match=r"unknown option train\.lr_x"):
        experiment_config({"train": {"lr_x": 1}})
    with pytest.raises(FileNotFoundError, match="task.data_dir"):
        toy_task(tweak(cfg, task={"data_dir": str(tmp_path / "missing")}))
    with pytest.raises(FileNotFoundError, match="data_dir"):
        toy_task(tweak(cfg, task={"name": "wmt14_en_de", "source": "wmt14", "data_dir": None}))


def test_vocabulary_mismatch_is_a_clear_error(toy, tmp_path):
    from bpd.training.checkpoint import CheckpointError

    tmp, cfg, task = toy
    path = staged(stages.ensure_heads, cfg, task)
    other_cfg = tweak(cfg, task={"vocab_size": 80}, paths={"results_dir": str(tmp_path / "r")})
    with pytest.raises(CheckpointError, match="vocabulary of"):
        evaluate_toy(other_cfg, toy_task(other_cfg), path)


def test_corrupt_checkpoint_is_retrained_not_crashing(toy, capsys):
    tmp, cfg, task = toy
    base = staged(stages.ensure_base, cfg, task)
    base.write_bytes(b"garbage")
    state = base.with_name(base.stem + ".state.pt")
    if state.exists():
        state.unlink()
    again = staged(stages.ensure_base, cfg, task)
    assert again == base
    from bpd.training.checkpoint import load_checkpoint

    assert load_checkpoint(again)["step"] > 0


def test_every_test_line_is_decoded_even_a_long_one(toy, tmp_path):
    """Dev/test lines are never dropped: a test line far longer than 4 * task.max_len is decoded whole (with
    the proportionally longer output limit), and rows count the outputs that hit the limit."""
    import shutil

    tmp, cfg, _ = toy
    corpus = tmp_path / "corpus"
    shutil.copytree(cfg.task.data_dir, corpus)
    words = "alpha beta gamma delta epsilon zeta eta theta".split() * 12  # ~100 words, > 4 * max_len pieces
    with open(corpus / "test.src", "a") as f:
        f.write(" ".join(words) + "\n")
    with open(corpus / "test.tgt", "a") as f:
        f.write(" ".join(w.upper()[:3] for w in reversed(words)) + "\n")
    n_lines = len((corpus / "test.src").read_text().splitlines())
    long_cfg = tweak(cfg, task={"data_dir": str(corpus)}, paths={"results_dir": str(tmp_path / "r")},
                     decode={"methods": NO_BEAM, "ks": [2], "criteria": [CriterionConfig("exact")]})
    task = toy_task(long_cfg)
    test = task.pairs("test")
    assert len(test) == n_lines and len(test.src(n_lines - 1)) > 4 * cfg.task.max_len
    rows = evaluate_toy(long_cfg, task, staged(stages.ensure_heads, long_cfg, task))
    assert all(r["n_examples"] == n_lines for r in rows)
    assert all(0 <= r["hit_length_limit"] <= n_lines for r in rows) and rows[1]["identical_to_greedy"] == 1.0
    hyps = resolve_path(rows[0]["hyp_file"]).read_text().splitlines()
    assert len(hyps) == n_lines


def test_dev_score_learning_curve_and_best_by_score(toy):
    """train.score_every records the greedy dev BLEU in the checkpoint's history (the learning curve), and
    best_on=score keeps the weights of the best-scoring evaluation; the new options at their defaults leave
    earlier cache keys unchanged."""
    from bpd.training.checkpoint import load_model

    _, cfg, task = toy
    scored = tweak(cfg, train={"score_every": 10, "score_examples": 8, "keep_best": True, "best_on": "score"})
    model, payload = load_model(staged(stages.ensure_base, scored, task))
    curve = [(r["step"], r["dev/bleu"]) for r in payload["history"] if "dev/bleu" in r]
    assert payload["stopped_by"] == "steps"
    assert [s for s, _ in curve] == [10, 20, 30]
    best_step, best = max(curve, key=lambda c: (c[1], -c[0]))
    assert payload["best_step"] == best_step and payload["best_dev_score"] == pytest.approx(best)
    assert task.dev_score(model, scored.decode, 8)["bleu"] == pytest.approx(best)  # the kept weights
    assert staged(stages.base_path_for, tweak(cfg, train={"score_examples": 200}), task) == staged(
        stages.base_path_for, cfg, task)
    assert staged(stages.base_path_for, scored, task) != staged(stages.base_path_for, cfg, task)


def test_a_shipped_base_is_installed_instead_of_trained(toy, tmp_path, monkeypatch):
    """make pretrain's export, then a run of the same config: the shipped base (fp16 on disk) is installed
    in the cache as fp32 instead of trained, and its manifest carries the scores and learning curve; a
    run on other data is refused with the fix."""
    import sys

    from bpd.shipped import manifests
    from bpd.training.checkpoint import CheckpointError, load_checkpoint, load_model, save_checkpoint

    sys.path.insert(0, str(resolve_path("experiments")))
    import pretrain
    from _schemas import PretrainEntry

    _, cfg, _ = toy
    cfg = tweak(cfg, paths={"cache_dir": str(tmp_path / "cache"), "results_dir": str(tmp_path / "results"),
                            "shipped_dir": str(tmp_path / "shipped")},
                train={"score_every": 10, "score_examples": 8})
    task = toy_task(cfg)
    pretrain.run(cfg, PretrainEntry(models=["base"]))
    (m,) = manifests(tmp_path / "shipped").values()
    from test_shipped import check_shipped

    check_shipped(m["manifest"])  # the checks every shipped checkpoint passes, golden sample included
    weights = load_checkpoint(m["manifest"].with_suffix(".pt"))["model"]  # the tied embeddings: stored once
    assert len({weights[k].untyped_storage().data_ptr() for k in ("src_embed.weight", "tgt_embed.weight",
                                                                   "output.weight")}) == 1
    path = staged(stages.base_path_for, cfg, task)
    assert m["cache_name"] == path.name and m["steps"] == 30 and m["stopped_by"] == "steps"
    assert set(m["dev"]) == set(m["test"]) == {"bleu"} and [r["step"] for r in m["learning_curve"]] == [10, 20, 30]
    # A resumed make pretrain passes the finished model again: nothing is re-scored or re-exported.
    import bpd.shipped

    monkeypatch.setattr(bpd.shipped, "export", lambda *a, **k: pytest.fail("an unchanged model was re-exported"))
    pretrain.run(cfg, PretrainEntry(models=["base"]))
    monkeypatch.undo()
    trained, _ = load_model(path)
    path.unlink()
    monkeypatch.setattr(stages, "_train_stage", lambda *a, **k: pytest.fail("a shipped base must not be trained"))
    assert staged(stages.ensure_base, cfg, task) == path
    installed, payload = load_model(path)
    for (name, a), b in zip(trained.state_dict().items(), installed.state_dict().values()):
        assert b.dtype == a.dtype and torch.equal(b, a.half().to(a.dtype)), name
    assert payload["shipped"].endswith("folder_base.pt")
    # Its greedy outputs on the training sources ship too: the installed base's self-distillation targets
    # are read, not decoded; a base trained anew under the same name decodes its own.
    import bpd.targets

    with monkeypatch.context() as patched:
        patched.setattr(bpd.targets, "_decode_targets", lambda *a, **k: pytest.fail("shipped targets decoded"))
        pairs = self_pairs(cfg, task, path)
    with np.load(tmp_path / "shipped" / m["greedy_train"]["file"]) as z:
        starts = np.concatenate([[0], np.cumsum(z["lengths"])[:-1]])
        by_line = {int(i): z["tokens"][a : a + n].tolist() for i, a, n in zip(z["index"], starts, z["lengths"])}
    assert len(by_line) == m["greedy_train"]["lines"] == len(task.pairs("train"))
    kept = [by_line[i] for i in sorted(by_line) if len(by_line[i]) > 1]  # an EOS alone teaches nothing
    assert [pairs.tgt(j).tolist() for j in range(len(pairs))] == kept
    n = len(task.pairs("train"))
    assert bpd.shipped.greedy_targets(path, tmp_path / "shipped", n) is not None
    assert bpd.shipped.greedy_targets(path, tmp_path / "shipped", n - 1) is None  # another distill.max_sources
    save_checkpoint(path, {**load_checkpoint(path), "shipped": None})
    assert bpd.shipped.greedy_targets(path, tmp_path / "shipped", n) is None
    path.unlink()
    manifest = tmp_path / "shipped" / "folder_base.json"  # as if trained on other data
    manifest.write_text(manifest.read_text().replace(m["fingerprint"], "0" * 16))
    with pytest.raises(CheckpointError, match="shipped=false"):
        staged(stages.ensure_base, cfg, task)
    # make pretrain on this data does not export over a model of other data; it says so before training
    # (_train_stage still fails the test if called).
    with pytest.raises(ValueError, match="ships a model of other data.*paths.shipped_dir=<folder>"):
        pretrain.run(cfg, PretrainEntry(models=["base"]))


def test_a_shipped_heads_model_is_installed_with_nothing_under_it_built(toy, tmp_path, monkeypatch):
    """experiments/pretrain.py models=[heads] ships a setting's heads model (base and heads together) with its
    test k-hat and a golden sample that pins its heads; a run of that recipe installs it (fp16 on disk, fp32 in
    the cache) without building its base or its training targets; without a setting the export is refused."""
    import sys

    from bpd.shipped import manifests
    from bpd.training.checkpoint import load_model

    sys.path.insert(0, str(resolve_path("experiments")))
    import pretrain
    from _schemas import PretrainEntry

    _, cfg, _ = toy
    cfg = tweak(cfg, setting="finetune", paths={"cache_dir": str(tmp_path / "cache"),
                                                 "shipped_dir": str(tmp_path / "shipped")})
    task = toy_task(cfg)
    with pytest.raises(ValueError, match="add setting=both"):
        pretrain.run(tweak(cfg, setting=None), PretrainEntry(models=["heads"]))
    pretrain.run(cfg, PretrainEntry(models=["heads"]))
    (m,) = [m for m in manifests(tmp_path / "shipped").values() if m.get("role") == "heads"]
    from test_shipped import check_shipped

    check_shipped(m["manifest"])  # golden greedy tokens and blockwise rounds included
    path = staged(stages.heads_path_for, cfg, task)
    assert (m["cache_name"], m["manifest"].stem, m["setting"]) == (path.name, f"{task.name}_finetune", "finetune")
    assert set(m["test_block_size"]) == {str(k) for k in cfg.decode.ks if k > 1}
    assert all(1.0 <= v <= int(k) for k, v in m["test_block_size"].items())
    trained, _ = load_model(path)
    for f in (tmp_path / "cache" / "models").glob("*.pt"):
        f.unlink()  # nothing cached: neither the heads model nor its base
    monkeypatch.setattr(stages, "_train_stage", lambda *a, **k: pytest.fail("a shipped heads model was trained"))
    monkeypatch.setattr(stages, "ensure_base", lambda *a, **k: pytest.fail("a shipped heads model's base was built"))
    assert staged(stages.ensure_heads, cfg, task) == path
    installed, payload = load_model(path)
    for (name, a), b in zip(trained.state_dict().items(), installed.state_dict().values()):
        assert b.dtype == a.dtype and torch.equal(b, a.half().to(a.dtype)), name
    assert payload["shipped"].endswith("_finetune.pt")
    path.unlink()  # shipped=false trains it anew (here: stopped by the patched stage, which is the point)
    with pytest.raises(pytest.fail.Exception, match="base was built"):
        staged(stages.ensure_heads, tweak(cfg, shipped=False), task)


def test_the_distilled_base_is_made_from_the_shipped_teacher(toy, tmp_path, monkeypatch):
    """make pretrain models=[distilled] after the teacher shipped: the teacher is installed for the beam
    targets, not trained again (a GPU lease or a later sitting makes the distilled base alone)."""
    import sys

    from bpd.shipped import manifests
    from bpd.training.checkpoint import load_checkpoint

    sys.path.insert(0, str(resolve_path("experiments")))
    import pretrain
    from _schemas import PretrainEntry

    _, cfg, _ = toy
    cfg = tweak(cfg, paths={"cache_dir": str(tmp_path / "cache"), "results_dir": str(tmp_path / "results"),
                            "shipped_dir": str(tmp_path / "shipped")})
    task = toy_task(cfg)
    pretrain.run(cfg, PretrainEntry(models=["teacher"]))
    teacher = staged(stages.base_path_for, cfg, task, "gold", seed=cfg.teacher_seed)
    teacher.unlink()  # a fresh cache: only the shipped files are left
    train_stage = stages._train_stage

    def no_teacher(*args, **kwargs):
        assert args[4].name != f"base-gold-s{cfg.teacher_seed}", "the shipped teacher was trained again"
        return train_stage(*args, **kwargs)

    monkeypatch.setattr(stages, "_train_stage", no_teacher)
    pretrain.run(cfg, PretrainEntry(models=["distilled"]))
    assert stages.finished(teacher) and load_checkpoint(teacher)["shipped"].endswith("folder_teacher.pt")
    assert {m["manifest"].stem for m in manifests(tmp_path / "shipped").values()} == {"folder_teacher",
                                                                                       "folder_distilled"}


def test_a_corrupt_resume_state_is_set_aside_and_the_stage_retrained(toy, tmp_path, capsys):
    """The README's promise for the resume file too: a damaged .state.pt is moved aside with a warning and
    the stage trains from the start instead of stopping the run."""
    _, cfg, task = toy
    cfg = tweak(cfg, paths={"cache_dir": str(tmp_path / "cache"), "results_dir": str(tmp_path / "results")})
    path = staged(stages.base_path_for, cfg, task)
    state = path.with_name(path.stem + ".state.pt")
    state.parent.mkdir(parents=True)
    state.write_bytes(b"half a checkpoint")
    assert staged(stages.ensure_base, cfg, task) == path and path.exists()
    assert state.with_name(state.name + ".corrupt").read_bytes() == b"half a checkpoint"
    assert "training this stage from the start" in capsys.readouterr().out


def test_bad_data_and_folders_are_named_before_training(toy, tmp_path):
    from toy import make_corpus

    from bpd.data.tokenizer import Tokenizer
    from bpd.runtime import ensure_writable

    _, cfg, _ = toy
    folder = make_corpus(tmp_path / "corpus")
    (folder / "test.src").write_text("")
    with pytest.raises(ValueError, match=r"test set .*test.src is empty"):
        toy_task(tweak(cfg, task={"data_dir": str(folder)}))
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="empty.txt is empty"):
        Tokenizer.train([tmp_path / "empty.txt"], tmp_path / "spm", 50)
    (tmp_path / "text.txt").write_text("".join(chr(0x4E00 + i) + "\n" for i in range(200)))
    with pytest.raises(ValueError, match="could not learn a 20-piece vocabulary .*change task.vocab_size"):
        Tokenizer.train([tmp_path / "text.txt"], tmp_path / "spm", 20)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match="cannot write results to .*point paths.results_dir at a writable folder"):
        ensure_writable(tmp_path / "a_file" / "results")


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(toy, tmp_path):
    """Files saved by Windows editors open with U+FEFF: it must not reach the first source's tokens, the first
    reference, or the ref.txt BLEU is recomputed from."""
    from toy import make_corpus

    _, cfg, _ = toy
    folder = make_corpus(tmp_path / "corpus")
    first = {f: (folder / f).read_text().splitlines()[0] for f in ("test.src", "test.tgt")}
    for f in ("train.src", "train.tgt", "dev.src", "dev.tgt", "test.src", "test.tgt"):
        (folder / f).write_bytes(b"\xef\xbb\xbf" + (folder / f).read_bytes())
    task = toy_task(tweak(cfg, task={"data_dir": str(folder)}, paths={"cache_dir": str(tmp_path / "cache"),
                                                                       "results_dir": str(tmp_path / "results")}))
    assert task.refs["test"][0] == first["test.tgt"]
    assert task.tokenizer.decode(task.pairs("test").src(0).tolist()) == first["test.src"]
    assert task.tokenizer.decode(task.pairs("test").tgt(0).tolist()) == first["test.tgt"]
    written = task.scorer("test", 3).write([[task.eos_id]] * 3, tmp_path / "out" / "greedy")
    assert not resolve_path(written["ref_file"]).read_text(encoding="utf-8").startswith("\ufeff")


def test_a_full_disk_keeps_the_decoded_outputs_and_the_rows(toy, tmp_path, monkeypatch):
    """Writing the outputs fails (ENOSPC) after all decoding: rows.jsonl is left as it was, the outputs and their
    rows go to a temporary folder, and the error is one sentence naming both folders and the fix."""
    import errno

    from bpd.runtime import ResultsNotSaved
    from bpd.tasks.translation import TranslationScorer

    tmp, cfg, task = toy
    path = staged(stages.ensure_heads, cfg, task)
    results = tmp_path / "results"
    results.mkdir()
    (results / "rows.jsonl").write_text('{"earlier": 1}\n')
    real = TranslationScorer.write

    def full(self, tokens, stem):
        if results in stem.parents:
            raise OSError(errno.ENOSPC, "No space left on device", str(stem))
        return real(self, tokens, stem)

    monkeypatch.setattr(TranslationScorer, "write", full)
    redo = tweak(cfg, paths=dataclasses.replace(cfg.paths, results_dir=str(results)),
                 decode={"timing_repeats": 1, "methods": NO_BEAM, "ks": [2], "criteria": [CriterionConfig("exact")]})
    with pytest.raises(ResultsNotSaved) as e:
        evaluate_toy(redo, task, path)
    msg = str(e.value)
    assert f"could not write the results to {results} (No space left on device)" in msg and "\n" not in msg
    assert "run the same command again" in msg
    rescue = Path(msg.split("their rows are in ")[1].split(" instead")[0])
    assert (results / "rows.jsonl").read_text() == '{"earlier": 1}\n'
    saved = read_rows(rescue / "rows.jsonl")
    assert [r["decoder"] for r in saved] == ["greedy", "blockwise_k2_exact"]
    assert all(resolve_path(r["hyp_file"]).is_file() and str(rescue) in r["hyp_file"] for r in saved)


def test_too_little_free_space_is_refused_before_any_work(tmp_path, monkeypatch):
    from collections import namedtuple

    from bpd.runtime import ensure_writable

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("bpd.runtime.shutil.disk_usage", lambda p: usage(10 * 2**30, 10 * 2**30, 2**20))
    with pytest.raises(ValueError, match=r"only 1.0 MB free for results in .*free disk space or point "
                                         r"paths.results_dir at a folder on another disk"):
        ensure_writable(tmp_path / "results")
