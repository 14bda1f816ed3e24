"""Tests for bpd.data.images: the token layout contract, resampling, PSNR, datasets, batches and figures."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bpd.data import celeba, faces, grid
from bpd.data import images as I
from corpora.photos.downsample import area_downsample


def _rand_img(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# --- token layout ---------------------------------------------------------------------------------------


def test_vocab_constants() -> None:
    assert I.N_INTENSITIES == 256 and I.BOS_ID == 256 and I.PAD_ID == 257 and I.VOCAB_SIZE == 258
    assert I.EOS_ID == -1


def test_token_round_trip_and_raster_order() -> None:
    h, w = 5, 7
    img = _rand_img(h, w)
    tok = I.image_to_tokens(img)
    assert tok.shape == (h * w * 3,) and tok.dtype == np.int64
    for r in range(h):
        for c in range(w):
            for ch in range(3):
                assert tok[3 * (r * w + c) + ch] == img[r, c, ch]
    np.testing.assert_array_equal(I.tokens_to_image(tok, h, w), img)
    batch = np.stack([img, _rand_img(h, w, 1)])
    np.testing.assert_array_equal(I.tokens_to_image(I.image_to_tokens(batch), h, w), batch)
    np.testing.assert_array_equal(I.tokens_to_image(torch.from_numpy(tok), h, w), img)


def test_tokens_to_image_pads_short_and_clips_special_ids() -> None:
    img = I.tokens_to_image([10, 20, 30, 40], 2, 2)
    assert img.shape == (2, 2, 3) and img.dtype == np.uint8
    assert list(img.reshape(-1)[:4]) == [10, 20, 30, 40] and not img.reshape(-1)[4:].any()
    assert I.tokens_to_image([I.BOS_ID, I.PAD_ID, -1], 1, 1).tolist() == [[[255, 255, 0]]]


# --- resampling and metrics -----------------------------------------------------------------------------


def test_area_downsample_known_array() -> None:
    img = np.zeros((4, 4, 1), dtype=np.uint8)
    img[:2, :2] = [[[0], [1]], [[2], [3]]]  # mean 1.5 -> rounds half up to 2
    img[:2, 2:] = 10
    img[2:, :2] = [[[0], [0]], [[0], [1]]]  # mean 0.25 -> 0
    img[2:, 2:] = 255
    out = area_downsample(img, 2)
    assert out.dtype == np.uint8 and out[..., 0].tolist() == [[2, 10], [0, 255]]
    rgb = _rand_img(8, 8)
    np.testing.assert_array_equal(area_downsample(rgb, 1), rgb)
    assert area_downsample(np.stack([rgb, rgb]), 4).shape == (2, 2, 2, 3)
    with pytest.raises(ValueError):
        area_downsample(_rand_img(6, 8), 4)


def test_upsamplers() -> None:
    lr = _rand_img(2, 3)
    up = I.nearest_upsample(lr, 4)
    assert up.shape == (8, 12, 3) and (up[4:8, 8:12] == lr[1, 2]).all()
    np.testing.assert_array_equal(area_downsample(up, 4), lr)
    flat = np.full((4, 4, 3), 77, dtype=np.uint8)
    assert (I.bicubic_upsample(flat, 4) == 77).all()
    assert I.bicubic_upsample(np.stack([lr, lr]), 2).shape == (2, 4, 6, 3)


def test_psnr_known_values() -> None:
    a = np.zeros((4, 4, 3), dtype=np.uint8)
    assert I.psnr(a, a) == math.inf
    b = a.copy()
    b[...] = 1  # MSE 1 -> 20*log10(255)
    assert I.psnr(b, a) == pytest.approx(20 * math.log10(255))
    c = np.full_like(a, 255)  # MSE 255^2 -> 0 dB
    assert I.psnr(c, a) == pytest.approx(0.0)
    # per-image average with the 100 dB cap on the identical pair
    preds, targets = np.stack([a, c]), np.stack([a, a])
    assert I.mean_psnr(preds, targets) == pytest.approx(50.0)
    assert I.mean_psnr(np.stack([b, c]), targets) == pytest.approx(10 * math.log10(255))


# --- embedded dataset -----------------------------------------------------------------------------------

_SMALL = faces.SRPatches(lr_size=4, factor=4, n_train=64, n_dev=8, n_test=16, seed=3)


@pytest.fixture(scope="module")
def small_embedded() -> dict:
    return faces.build_sr_patches(faces.load_embedded_sources(), _SMALL, return_plans=True)


def test_embedded_shapes_and_lr_is_area_of_hr(small_embedded: dict) -> None:
    for split, n in (("train", 64), ("dev", 8), ("test", 16)):
        lr, hr = small_embedded[split]
        assert lr.shape == (n, 4, 4, 3) and hr.shape == (n, 16, 16, 3)
        assert lr.dtype == hr.dtype == np.uint8
        np.testing.assert_array_equal(lr, area_downsample(hr, 4))
    assert I.image_to_tokens(small_embedded["test"][1]).shape == (16, 768)


def test_embedded_deterministic_and_test_independent_of_n_train(small_embedded: dict) -> None:
    again = faces.build_embedded_sr(_SMALL)
    more_train = faces.build_embedded_sr(dataclasses.replace(_SMALL, n_train=10))
    other_seed = faces.build_embedded_sr(dataclasses.replace(_SMALL, seed=4))
    for split in I.SPLITS:
        for a, b in zip(small_embedded[split], again[split]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(more_train["test"][1], small_embedded["test"][1])
    assert not np.array_equal(other_seed["test"][1], small_embedded["test"][1])


def test_embedded_splits_are_region_disjoint(small_embedded: dict) -> None:
    plans, srcs, hr = small_embedded["plans"], small_embedded["sources"], 16
    masks = {s: [np.zeros(src.shape[:2], dtype=bool) for src in srcs] for s in I.SPLITS}
    for split, plan in plans.items():
        for i, y, x in zip(plan.image, plan.y, plan.x):
            assert 0 <= y and y + hr <= srcs[i].shape[0] and 0 <= x and x + hr <= srcs[i].shape[1]
            masks[split][i][y : y + hr, x : x + hr] = True
    for i in range(len(srcs)):
        assert not (masks["train"][i] & masks["test"][i]).any()
        assert not (masks["train"][i] & masks["dev"][i]).any()
        assert not (masks["dev"][i] & masks["test"][i]).any()
    assert len(set(plans["test"].image.tolist())) > 1  # the test set is not one photo
    assert not plans["test"].flip.any() and not plans["dev"].flip.any()


def test_assign_blocks_partition() -> None:
    blocks = faces.assign_blocks([(100, 60), (48, 48)], block=24, seed=0)
    flat = [b for s in I.SPLITS for b in blocks[s]]
    assert len(flat) == len(set(flat)) == 4 * 2 + 2 * 2
    for s in I.SPLITS:
        assert {b[0] for b in blocks[s]} == {0, 1}


def test_prepare_embedded_sr_caches(tmp_path: Path) -> None:
    args = faces.SRPatches(lr_size=2, factor=2, n_train=8, n_dev=2, n_test=3, seed=1)
    path = faces.prepare_embedded_sr(tmp_path, args)
    assert path.exists() and path.name == "faces_sr_v1_lr2_x2_n8-2-3_s1.npz"  # defaults stay out of the name
    mtime = path.stat().st_mtime_ns
    assert faces.prepare_embedded_sr(tmp_path, args) == path and path.stat().st_mtime_ns == mtime
    data = faces.load_sr_npz(path)
    ref = faces.build_embedded_sr(args)
    for split in I.SPLITS:
        np.testing.assert_array_equal(data[split][1], ref[split][1])
    assert not list(tmp_path.glob(".*tmp"))
    assert faces.prepare_embedded_sr(tmp_path, dataclasses.replace(args, seed=2)) != path
    assert dataclasses.replace(args, context=4).tuned() == {"context": 4}  # an option off its default: in the name


# --- CelebA ---------------------------------------------------------------------------------------------


def _write_celeba(root: Path, parts: list[int]) -> None:
    img_dir = root / "img_align_celeba"
    img_dir.mkdir(parents=True)
    lines = []
    for k, p in enumerate(parts, start=1):
        arr = np.zeros((218, 178, 3), dtype=np.uint8)
        arr[40:178, 20:158] = (10 * k, 100, 200)  # the crop region is flat, the rest black
        Image.fromarray(arr).save(img_dir / f"{k:06d}.jpg", quality=95, subsampling=0)
        lines.append(f"{k:06d}.jpg {p}")
    (root / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")


def test_load_celeba_sr_crop_resize_and_splits(tmp_path: Path) -> None:
    _write_celeba(tmp_path, [0, 0, 1, 2, 0])
    lr, hr = celeba.load_celeba_sr(tmp_path, "train")
    assert lr.shape == (3, 8, 8, 3) and hr.shape == (3, 32, 32, 3) and lr.dtype == hr.dtype == np.uint8
    # the crop is exactly the flat region: a one-pixel offset would pull an HR edge row ~50 levels to black
    for j, k in enumerate((1, 2, 5)):
        fill = np.array([10 * k, 100, 200])
        assert np.abs(hr[j].astype(int) - fill).max() <= 3
        assert np.abs(lr[j].astype(int) - fill).max() <= 3
    assert celeba.load_celeba_sr(tmp_path, "dev")[1].shape[0] == 1
    lr_t, hr_t = celeba.load_celeba_sr(tmp_path, "test", lr_size=4, hr_size=16)
    assert lr_t.shape == (1, 4, 4, 3) and hr_t.shape == (1, 16, 16, 3)
    np.testing.assert_allclose(hr_t[0].reshape(-1, 3).mean(0), (40, 100, 200), atol=4)
    assert celeba.load_celeba_sr(tmp_path, "train", limit=2)[0].shape[0] == 2


def test_load_celeba_sr_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="img_align_celeba"):
        celeba.load_celeba_sr(tmp_path / "nope", "train")


# --- batches and figures --------------------------------------------------------------------------------


def test_sr_batches_shapes_bos_and_sharding() -> None:
    rng = np.random.default_rng(0)
    hr = rng.integers(0, 256, (10, 8, 8, 3), dtype=np.uint8)
    lr = area_downsample(hr, 4)
    batches = list(I.sr_batches(lr, hr, batch_size=4, shuffle=False))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    src, tgt_in, tgt_out = batches[0]
    assert src.shape == (4, 12) and tgt_in.shape == tgt_out.shape == (4, 192)
    assert src.dtype == tgt_in.dtype == tgt_out.dtype == torch.long
    assert (tgt_in[:, 0] == I.BOS_ID).all() and torch.equal(tgt_in[:, 1:], tgt_out[:, :-1])
    assert torch.equal(tgt_out[0], torch.from_numpy(I.image_to_tokens(hr[0])))
    shuf = [b[2] for b in I.sr_batches(lr, hr, 4, shuffle=True, seed=1)]
    assert torch.equal(torch.cat(shuf).sort(0).values, torch.cat([b[2] for b in batches]).sort(0).values)
    ranks = [torch.cat([b[2] for b in I.sr_batches(lr, hr, 2, True, 1, r, 3)]) for r in range(3)]
    assert all(len(r) == 3 for r in ranks)
    assert len({tuple(row.tolist()) for r in ranks for row in r}) == 9


def test_save_grid_writes_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    hr = rng.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    lr = area_downsample(hr, 4)
    out = grid.save_grid([("low-res input", lr), ("greedy", hr), ("ground truth", hr)], tmp_path / "g.png")
    with Image.open(out) as im:
        assert im.format == "PNG" and im.mode == "RGB"
        w, h = im.size
    assert w > 3 * 16 * 4 and h > 3 * 16 * 4
