"""Two measurements of the photo corpus behind results/table2_photos/FINDINGS.md (issue 86, item 2).

``flat``: how many patches of each split are near-flat per channel (no channel's standard deviation reaches the
threshold: the builder's ``flat_per_channel`` filter), and bicubic PSNR of the test split's first n patches with
and without them.

``specks``: greedy PSNR of single patches (``test:10421``, ``faces:169``) under each model given, beside bicubic,
with how many intensities miss the target by more than 40 levels and how many of those are written as 0; and
p_1's top intensities at the first such miss along greedy's own prefix.

    python analysis/photo_probe.py flat outputs/cache/data/photos_sr_<key>
    python analysis/photo_probe.py specks outputs/cache/data/photos_sr_<key> checkpoints/photos_sr_base.pt \\
        checkpoints/photos_sr_finetune_sr.pt --patches test:10421 faces:169 faces:175
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

#: A miss this large is a speck, not a blur: bicubic misses by more than 40 levels at none of the patches probed.
SPECK = 40


def near_flat(hr: np.ndarray, threshold: float, chunk: int = 20000) -> np.ndarray:
    """(N,) whether each patch (N, H, W, 3) varies by less than ``threshold`` in every channel."""
    from corpora.photos.build import variation

    return np.concatenate([variation(np.asarray(hr[i : i + chunk]), True) < threshold
                           for i in range(0, len(hr), chunk)])


def flat(folder: Path, thresholds: list[float], firsts: list[int]) -> None:
    from bpd.data import images as im

    for split in ("train", "dev", "test"):
        hr = np.load(folder / f"{split}_hr.npy", mmap_mode="r")
        shares = ", ".join(f"std < {t:g}: {near_flat(hr, t).mean():.2%}" for t in thresholds)
        print(f"{split}: {len(hr):,} patches; near-flat in every channel {shares}")
    hr, lr = np.load(folder / "test_hr.npy"), np.load(folder / "test_lr.npy")
    is_flat = near_flat(hr, thresholds[0])
    bicubic = im.bicubic_upsample(lr, hr.shape[1] // lr.shape[1])
    for n in [*firsts, len(hr)]:
        keep = ~is_flat[:n]
        without = im.mean_psnr(bicubic[:n][keep], hr[:n][keep])
        print(f"test first {n:,}: {int(is_flat[:n].sum())} near-flat (std < {thresholds[0]:g}); bicubic "
              f"{im.mean_psnr(bicubic[:n], hr[:n]):.2f} dB, without them {without:.2f}")


def specks(folder: Path, models: list[Path], patches: list[str]) -> None:
    import torch

    from bpd.data import images as im
    from bpd.decoding.methods.greedy import greedy_decode
    from bpd.training.checkpoint import load_model

    for path in models:
        model, _ = load_model(path, "cpu")
        model.eval()
        for spec in patches:
            split, i = spec.split(":")
            lr = np.asarray(np.load(folder / f"{split}_lr.npy", mmap_mode="r")[int(i) : int(i) + 1])
            hr = np.asarray(np.load(folder / f"{split}_hr.npy", mmap_mode="r")[int(i) : int(i) + 1])
            src = torch.from_numpy(lr.reshape(1, -1).astype(np.int64))
            tokens = np.array(greedy_decode(model, src, hr[0].size).tokens[0])
            pred = im.tokens_to_image(tokens[None], hr.shape[1], hr.shape[2])
            miss = np.abs(pred.astype(int) - hr.astype(int)) > SPECK
            line = (f"{path.name} {spec}: greedy {im.mean_psnr(pred, hr):.2f} dB, bicubic "
                    f"{im.mean_psnr(im.bicubic_upsample(lr, 4), hr):.2f}; {int(miss.sum())} intensities off by "
                    f"> {SPECK}, {int((miss & (pred == 0)).sum())} of them written 0")
            if miss.any():
                at = int(np.flatnonzero(miss.reshape(-1))[0])
                with torch.inference_mode():
                    enc = model.encode(src)
                    prefix = torch.from_numpy(np.concatenate([[im.BOS_ID], tokens[:at]])[None])
                    p = model.heads.base_logits(model.decode(prefix, enc, None)[0, -1]).float().softmax(-1)
                top = p.topk(4)
                line += (f"; first at intensity {at} (channel {at % 3}, target {int(hr.reshape(-1)[at])}, "
                         f"upsampled guess {int(enc.aligned[0, at])}): p_1 there "
                         + ", ".join(f"{int(t)}: {float(v):.3f}" for v, t in zip(top.values, top.indices)))
            print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("flat")
    f.add_argument("folder", type=Path)
    f.add_argument("--thresholds", type=float, nargs="+", default=[2.0, 5.0])
    f.add_argument("--firsts", type=int, nargs="+", default=[48, 256, 1024])
    s = sub.add_parser("specks")
    s.add_argument("folder", type=Path)
    s.add_argument("models", type=Path, nargs="+")
    s.add_argument("--patches", nargs="+", default=["test:10421", "faces:169", "faces:175"])
    args = ap.parse_args()
    if args.what == "flat":
        flat(args.folder, args.thresholds, args.firsts)
    else:
        specks(args.folder, args.models, args.patches)


if __name__ == "__main__":
    main()
