"""Labelled PNG grids of images (low-resolution input, decoders' outputs, ground truth) for figures."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# --- figures --------------------------------------------------------------------------------------------


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's bundled font at ``size`` when FreeType is available, else the fixed bitmap font."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):
        return ImageFont.load_default()


def save_grid(
    rows: list[tuple[str, np.ndarray]],
    path: str | os.PathLike,
    max_images: int = 8,
    scale: int | None = None,
) -> Path:
    """Save a labelled PNG grid: one column per (label, images) set, one row per image.

    Every set is (N, h, w, 3) uint8 (or one (h, w, 3) image). Sets smaller than the largest (the LR input)
    are nearest-upsampled to its size so pixels line up across a row, and the whole grid is enlarged by
    ``scale`` (default: so a cell is about 128 px) with nearest neighbour, because a 16x16 image is
    otherwise too small to judge. Column labels are wrapped to the cell width.
    """
    if not rows:
        raise ValueError("save_grid needs at least one (label, images) set")
    sets = []
    for label, imgs in rows:
        arr = np.asarray(imgs)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise ValueError(f"set {label!r}: expected (N, h, w, 3) images, got {arr.shape}")
        sets.append((label, arr.astype(np.uint8)))
    big_h = max(a.shape[1] for _, a in sets)
    big_w = max(a.shape[2] for _, a in sets)
    n = min(max_images, min(len(a) for _, a in sets))
    if scale is None:
        scale = max(1, 128 // max(big_h, big_w))
    cell_h, cell_w = big_h * scale, big_w * scale
    pad = 6
    font = _font(14)
    chars = max(4, cell_w // 8)
    labels = [textwrap.wrap(label, chars) or [""] for label, _ in sets]
    line_h = 17
    head = pad + line_h * max(len(lines) for lines in labels) + pad
    width = pad + len(sets) * (cell_w + pad)
    height = head + n * (cell_h + pad)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for j, ((_, arr), lines) in enumerate(zip(sets, labels)):
        x0 = pad + j * (cell_w + pad)
        for k, line in enumerate(lines):
            draw.text((x0, pad + k * line_h), line, fill=(0, 0, 0), font=font)
        for i in range(n):
            img = Image.fromarray(arr[i]).resize((cell_w, cell_h), Image.Resampling.NEAREST)
            canvas.paste(img, (x0, head + i * (cell_h + pad)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, format="PNG")
    return path
