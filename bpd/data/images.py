"""Image super-resolution data for the paper's second task (Stern et al. 2018, section 6.2).

The paper super-resolves CelebA faces from 8x8 to 32x32 with an image Transformer that generates the
high-resolution image one *pixel channel* at a time. Everything the model and the decoders need to agree on
lives here:

Token layout (the contract with the model)
    A high-resolution RGB image of shape (H, W, 3) uint8 is the target sequence of H*W*3 tokens in raster
    order: row-major over pixels and R, G, B within a pixel, so token ``3*(r*W + c) + ch`` is pixel
    ``(r, c, ch)``. The token id *is* the intensity (0..255), so no lookup table is needed and a decoded
    sequence is an image after a reshape. Two extra ids exist for the decoder input: ``BOS_ID`` (256), which
    starts the shifted target, and ``PAD_ID`` (257). Images have a fixed length, so there is no EOS and
    ``EOS_ID`` is -1 (a value no decoder can emit, which turns "stop at EOS" off). The low-resolution source
    uses the same layout and ids.

Datasets: ``bpd.data.faces`` (embedded photograph patches, the default) and ``bpd.data.celeba``.
Labelled image grids for figures: ``bpd.data.grid``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from PIL import Image

N_INTENSITIES = 256
BOS_ID = 256
PAD_ID = 257
VOCAB_SIZE = 258
EOS_ID = -1

SPLITS = ("train", "dev", "test")

# --- token layout ---------------------------------------------------------------------------------------


def image_to_tokens(img: np.ndarray) -> np.ndarray:
    """Flatten (H, W, 3) -- or a batch (N, H, W, 3) -- uint8 images to raster-order int64 token ids.

    A C-order reshape is exactly the documented layout (row-major pixels, R, G, B within a pixel), so the
    conversion is free and cannot drift from :func:`tokens_to_image`.
    """
    arr = np.asarray(img)
    if arr.ndim not in (3, 4) or arr.shape[-1] != 3:
        raise ValueError(f"expected (H, W, 3) or (N, H, W, 3) image(s), got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"expected uint8 intensities, got {arr.dtype}")
    lead = arr.shape[:-3]
    return arr.reshape(*lead, -1).astype(np.int64)


def tokens_to_image(tokens: np.ndarray | Sequence[int] | torch.Tensor, h: int, w: int) -> np.ndarray:
    """Inverse of :func:`image_to_tokens`: (L,) -> (h, w, 3) uint8, or (N, L) -> (N, h, w, 3).

    A decoder stopped early (step budget) returns fewer than h*w*3 tokens, so short sequences are zero-padded
    and over-long ones truncated instead of failing on a figure or a PSNR row. Ids outside 0..255 (BOS/PAD
    emitted by a poorly trained model) are clipped into range for the same reason.
    """
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens, dtype=np.int64)
    if arr.ndim not in (1, 2):
        raise ValueError(f"expected (L,) or (N, L) tokens, got shape {arr.shape}")
    n = h * w * 3
    arr = arr[..., :n]
    if arr.shape[-1] < n:
        pad = [(0, 0)] * (arr.ndim - 1) + [(0, n - arr.shape[-1])]
        arr = np.pad(arr, pad)
    arr = np.clip(arr, 0, N_INTENSITIES - 1).astype(np.uint8)
    return arr.reshape(*arr.shape[:-1], h, w, 3)


# --- resampling and metrics -----------------------------------------------------------------------------


def nearest_upsample(img: np.ndarray, factor: int) -> np.ndarray:
    """Repeat each pixel factor x factor times: the "nearest" reference row and the LR display column."""
    arr = np.asarray(img)
    return np.repeat(np.repeat(arr, factor, axis=-3), factor, axis=-2)


def bicubic_upsample(img: np.ndarray, factor: int) -> np.ndarray:
    """Upsample (H, W, 3) or (N, H, W, 3) uint8 images with Pillow's BICUBIC: the "bicubic" reference row."""
    arr = np.asarray(img, dtype=np.uint8)
    if arr.ndim == 4:
        return np.stack([bicubic_upsample(x, factor) for x in arr]) if len(arr) else arr
    h, w = arr.shape[:2]
    out = Image.fromarray(arr).resize((w * factor, h * factor), Image.Resampling.BICUBIC)
    return np.asarray(out, dtype=np.uint8)


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """PSNR in dB of one uint8 image against its target (peak 255); ``inf`` when they are identical."""
    p = np.asarray(pred)
    t = np.asarray(target)
    if p.shape != t.shape:
        raise ValueError(f"shape mismatch: {p.shape} vs {t.shape}")
    mse = float(np.mean((p.astype(np.float64) - t.astype(np.float64)) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(255.0**2 / mse)


PSNR_CAP_DB = 100.0


def mean_psnr(preds: np.ndarray, targets: np.ndarray, cap_db: float = PSNR_CAP_DB) -> float:
    """Average of per-image PSNRs over the leading (batch) axis, each capped at ``cap_db`` (100 dB).

    Per-image averaging (not PSNR of the pooled MSE) is the usual super-resolution convention. The cap
    exists because a single exactly reproduced image has infinite PSNR and would make the mean infinite;
    100 dB is far above any real reconstruction (one off-by-one channel in a 16x16 image is ~77 dB), so
    the cap only changes the perfect images.
    """
    p = np.asarray(preds)
    t = np.asarray(targets)
    if p.shape != t.shape or p.ndim < 1 or len(p) == 0:
        raise ValueError(f"expected equal non-empty batches, got {p.shape} vs {t.shape}")
    return float(np.mean([min(psnr(a, b), cap_db) for a, b in zip(p, t)]))


# --- torch batches --------------------------------------------------------------------------------------


def sr_batches(
    lr: np.ndarray,
    hr: np.ndarray,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield ``(src, tgt_in, tgt_out)`` LongTensors for teacher-forced training or for decoding.

    ``src`` is the LR image as (B, h*w*3) tokens, ``tgt_out`` the HR image as (B, H*W*3) tokens and
    ``tgt_in`` is ``tgt_out`` shifted right behind ``BOS_ID`` (its last token dropped), so every row has the
    same fixed length and no padding is needed. The order is a ``seed``-determined permutation when
    ``shuffle``. For distributed runs each rank takes every ``world_size``-th example after the dataset is
    cut to a multiple of ``world_size``, so all ranks run the same number of steps (DDP would otherwise hang
    on the rank with an extra batch); with one rank nothing is dropped. The last batch may be smaller.
    """
    if len(lr) != len(hr):
        raise ValueError(f"lr and hr differ in length: {len(lr)} vs {len(hr)}")
    if batch_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"bad batch_size/rank/world_size: {batch_size}, {rank}, {world_size}")
    idx = np.random.default_rng(seed).permutation(len(lr)) if shuffle else np.arange(len(lr))
    idx = idx[: len(idx) - len(idx) % world_size][rank::world_size]
    for start in range(0, len(idx), batch_size):
        sel = idx[start : start + batch_size]
        src = torch.from_numpy(image_to_tokens(lr[sel]))
        tgt_out = torch.from_numpy(image_to_tokens(hr[sel]))
        tgt_in = torch.cat([torch.full((len(sel), 1), BOS_ID, dtype=torch.long), tgt_out[:, :-1]], dim=1)
        yield src, tgt_in, tgt_out
