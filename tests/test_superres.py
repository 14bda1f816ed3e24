"""Super-resolution: the image Transformer under the shared decoding contract, and the SR pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toy import toy_config

from bpd import pipeline
from bpd.decoding import blockwise_decode, criteria, greedy_decode
from bpd.models.image_transformer import build_image_model


def sr_config(tmp, **over):
    cfg = toy_config(tmp)
    cfg.update(
        task={"kind": "image", "name": "faces_sr", "lr_size": 2, "hr_size": 4, "n_train": 96, "n_dev": 8,
              "n_test": 8, "seed": 0},
        model={"preset": "image_micro", "overrides": {}},
        decode={**cfg["decode"], "beam_size": 0, "ks": [2, 3],
                "criteria": [{"name": "exact"}, {"name": "distance", "param": 2}]},
    )
    cfg["train"] = {**cfg["train"], "max_tokens": 48 * 8}
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("seed", range(4))
def test_image_model_exact_blockwise_equals_greedy(seed):
    model = build_image_model(4, "image_micro", lr_size=2, hr_size=4, seed=seed).double().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.heads.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    src = torch.randint(0, 256, (3, 12), generator=g)
    gr = greedy_decode(model, src, max_len=48)
    bw = blockwise_decode(model, src, k=4, max_len=48)
    assert bw.tokens == gr.tokens
    assert all(len(t) == 48 for t in bw.tokens)  # fixed length, no EOS
    assert all(0 <= x < 256 for t in bw.tokens for x in t)  # only intensities are ever produced
    d = blockwise_decode(model, src, k=4, criterion=criteria.Distance(eps=255), max_len=48)
    assert all(b == 4 for row in d.block_sizes for b in row[:-1])  # eps=255 accepts every intensity


def test_image_model_teacher_forced_shapes_and_positions():
    model = build_image_model(3, "image_micro", lr_size=2, hr_size=4, seed=0).eval()
    src = torch.randint(0, 256, (2, 12))
    tgt = torch.randint(0, 256, (2, 48))
    tgt[:, 0] = model.bos_id
    assert model(src, tgt).shape == (2, 48, 3, 256)
    # Row, column and channel embeddings: position p>=1 holds token p-1 = 3*(r*W+c)+ch.
    pos = torch.tensor([[1, 2, 4, 13]])
    grid = model._grid(pos - 1, 4, model.tgt_row, model.tgt_col)
    expect = [model.tgt_row.weight[r] + model.tgt_col.weight[c] + model.channel.weight[ch]
              for r, c, ch in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0))]
    torch.testing.assert_close(grid[0], torch.stack(expect))


def test_sr_pipeline_rows_files_and_psnr(tmp_path):
    from bpd.data.images import mean_psnr

    cfg = sr_config(tmp_path)
    data = pipeline.load_task(cfg)
    assert data.kind == "image" and len(data.train[0][1]) == 48
    path = pipeline.ensure_heads(cfg, data)
    rows = pipeline.evaluate(cfg, data, path)
    names = [r["decoder"] for r in rows]
    assert names[:3] == ["greedy", "blockwise_k2_exact", "blockwise_k3_exact"]
    assert {"nearest", "bicubic"} <= set(names)
    for r in rows:
        if r["method"] == "reference":
            assert r["psnr"] > 0
            continue
        assert {"psnr", "psnr_vs_greedy", "pred_file", "target_file", "grid_file", "mean_block_size"} <= set(r)
        pred = np.load(pipeline.resolve_path(r["pred_file"]))
        target = np.load(pipeline.resolve_path(r["target_file"]))
        assert pred.dtype == np.uint8 and pred.shape == (8, 4, 4, 3)
        assert mean_psnr(pred, target) == pytest.approx(r["psnr"])  # recomputable from the saved arrays
        if r["criterion"] == "exact" or r["method"] == "greedy":
            assert r["identical_to_greedy"] == 1.0
    assert pipeline.resolve_path(rows[0]["grid_file"]).exists()


def test_sr_training_lowers_loss(tmp_path):
    from bpd.training.loop import TrainConfig, evaluate_heads, train

    cfg = sr_config(tmp_path)
    data = pipeline.load_task(cfg)
    model = pipeline.build_model(cfg, data, 1, 0)
    dev = pipeline.dev_batches(data, data.dev, 400)
    before = evaluate_heads(model, dev(), [0], "cpu")["loss_head1"]
    tcfg = TrainConfig(stage="base", lr=1e-2, warmup_steps=5, max_steps=100, label_smoothing=0.0, ckpt_every=1000,
                       eval_every=100)
    out = train(model, pipeline.batch_factory(data, data.train, 400, 0), tcfg, tmp_path / "m.pt",
                dev_sets={"dev": dev}, progress=False)
    assert out["history"][-1]["dev/loss_head1"] < before - 0.3


def test_missing_celeba_is_a_clear_error(tmp_path):
    cfg = sr_config(tmp_path)
    cfg["task"] = {"kind": "image", "name": "celeba_sr", "data_dir": str(tmp_path / "nope")}
    with pytest.raises(FileNotFoundError, match="img_align_celeba"):
        pipeline.load_task(cfg)
