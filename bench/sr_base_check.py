"""Where a super-resolution base stands against bicubic, and whether greedy decoding drifts from what the model
predicts when it is shown the true pixels.

For the first ``--n`` dev patches of the photo corpus it prints, in dB PSNR against the true 32x32 patch:

* ``bicubic (Pillow)``: the evaluation rows' bicubic reference (``bpd.data.images.bicubic_upsample``);
* ``bicubic (torch)``: torch's bicubic interpolation (another kernel: what ``aligned_upsample=bicubic`` reads);
* ``model's guess``: the upsampled intensity the model reads under each output (``model.upsample``: with
  ``model.aligned_upsample=learned``, bicubic plus the fitted upsampler's correction; otherwise bicubic again);
* ``teacher-forced argmax``: each sub-pixel's most likely intensity given the true pixels before it (what the
  training loss sees), and its exact-match rate beside bicubic's;
* ``teacher-forced mean``: each sub-pixel's expected intensity under the same distributions, rounded (what
  PSNR rewards: a mean above the argmax says the mode, not the model, holds greedy back);
* ``greedy``: the model's own decode, and its mean absolute error per third of the raster beside bicubic's (an
  error rising down the image faster than bicubic's is drift: the model is fed its own earlier mistakes).

A checkpoint or a training state (``*.state.pt``: the weights of its last checkpoint) both load.

    python bench/sr_base_check.py outputs/cache/models/base_gold_s0_<hash>.state.pt --n 16
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from bpd.data.images import BOS_ID, N_INTENSITIES, bicubic_upsample, mean_psnr
from bpd.decoding import greedy_decode
from bpd.models import model_from_config
from bpd.models.image_transformer import upsampled_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--data", type=Path, default=None, help="the photo corpus folder (default: the only "
                    "outputs/cache/data/photos_sr_* folder)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--split", default="dev", choices=("dev", "test", "faces"), help="which patches (default dev)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = args.data or next(Path("outputs/cache/data").glob("photos_sr_*"))
    payload = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    model = model_from_config(payload["model_config"])
    model.load_state_dict(payload["model"])
    model.eval()
    lr = np.load(data / f"{args.split}_lr.npy", mmap_mode="r")[: args.n]
    hr = np.load(data / f"{args.split}_hr.npy", mmap_mode="r")[: args.n]
    n = len(lr)
    src = torch.from_numpy(lr.reshape(n, -1).astype(np.int64))
    tgt = torch.from_numpy(hr.reshape(n, -1).astype(np.int64))
    with torch.inference_mode():
        up = model.upsample(src)
        bicubic = upsampled_ids(src, lr.shape[1], hr.shape[1], "bicubic")
        pillow = torch.from_numpy(bicubic_upsample(np.asarray(lr), hr.shape[1] // lr.shape[1]).reshape(n, -1)
                                  .astype(np.int64))
        tin = torch.cat([torch.full((n, 1), BOS_ID), tgt[:, :-1]], 1)
        logits = model.heads.base_logits(model.teacher_forced(src, tin)[0])
        am = logits.argmax(-1)
        probs = logits[..., :N_INTENSITIES].double().softmax(-1)
        mean = (probs @ torch.arange(N_INTENSITIES, dtype=torch.double)).round().long()
        out = greedy_decode(model, src, max_len=tgt.shape[1]).tokens
    g = torch.tensor([t[: tgt.shape[1]] for t in out])
    def psnr(x: torch.Tensor) -> float:
        return mean_psnr(x.numpy(), tgt.numpy())  # the evaluation's PSNR: per patch, then the mean

    def thirds(x: torch.Tensor) -> str:
        return " / ".join(f"{t.mean():.2f}" for t in (x - tgt).abs().double().chunk(3, dim=1))

    print(f"{args.checkpoint.name} (step {payload.get('step')}), {n} {args.split} patches")
    for name, x in (("bicubic (Pillow)", pillow), ("bicubic (torch)", bicubic), ("model's guess", up)):
        print(f"{name:22s} {psnr(x):6.2f} dB  exact match {(x == tgt).double().mean():.3f}  "
              f"mean |error| per third of the raster {thirds(x)}")
    print(f"teacher-forced argmax  {psnr(am):6.2f} dB  exact match {(am == tgt).double().mean():.3f}")
    print(f"teacher-forced mean    {psnr(mean):6.2f} dB  exact match {(mean == tgt).double().mean():.3f}")
    print(f"greedy                 {psnr(g):6.2f} dB  {'':17s}  mean |error| per third of the raster {thirds(g)}")


if __name__ == "__main__":
    main()
