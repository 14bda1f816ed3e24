"""A learned upsampler for super-resolution models (``model.aligned_upsample: learned``).

An image model with ``model.aligned_input`` reads, at each output position, an upsampled guess of the intensity it
predicts. Bicubic interpolation is the classic guess, and a base that copies it can at best tie bicubic's PSNR.
This module is a small convolutional network (ESPCN-like: convolutions over the low-resolution image, then a
pixel shuffle to the high resolution) that predicts a correction *to* bicubic. Its last layer starts at zero, so
an untrained upsampler is exactly bicubic; ``fit_upsampler`` then trains it alone, with a squared error on the
training patches, before the autoregressive base trains on top of it (frozen: its guesses are rounded to
intensities, so the base's loss sends it no gradient anyway).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bpd.data.images import N_INTENSITIES
from bpd.progress import progress_interval


class Upsampler(nn.Module):
    """(B, 3, lr, lr) intensities in [0, 255] -> (B, 3, lr*scale, lr*scale): bicubic plus a learned correction."""

    def __init__(self, scale: int, channels: int = 64, layers: int = 5) -> None:
        super().__init__()
        if layers < 2 or channels < 1 or scale < 1:
            raise ValueError(f"an upsampler needs layers >= 2, channels >= 1 and scale >= 1 (got {layers}, "
                             f"{channels}, {scale}); set model.upsampler_layers / upsampler_channels.")
        self.scale = scale
        conv = lambda i, o: nn.Conv2d(i, o, 3, padding=1, padding_mode="replicate")  # noqa: E731
        body: list[nn.Module] = [conv(3, channels), nn.ReLU()]
        for _ in range(layers - 2):
            body += [conv(channels, channels), nn.ReLU()]
        last = conv(channels, 3 * scale * scale)
        nn.init.zeros_(last.weight)  # untrained: exactly bicubic
        nn.init.zeros_(last.bias)
        self.body = nn.Sequential(*body, last)
        self.shuffle = nn.PixelShuffle(scale)

    def bicubic(self, img: torch.Tensor) -> torch.Tensor:
        size = (img.shape[-2] * self.scale, img.shape[-1] * self.scale)
        return F.interpolate(img, size=size, mode="bicubic", align_corners=False)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        img = img.to(self.body[0].weight.dtype)  # a model cast to half precision casts its upsampler too
        out = self.bicubic(img) + (N_INTENSITIES - 1) * self.shuffle(self.body(img / (N_INTENSITIES - 1) - 0.5))
        return out.float()


def fit_upsampler(up: Upsampler, lr: np.ndarray, hr: np.ndarray, steps: int, batch: int, peak_lr: float,
                  seed: int, show: bool = True) -> list[float]:
    """Train ``up`` for ``steps`` Adam steps (cosine-decayed from ``peak_lr``) on random batches of ``batch``
    patches of ``lr`` (N, h, w, 3) and ``hr`` (N, H, W, 3) uint8 arrays (memory-mapped arrays are read a batch at
    a time), with the squared error against ``hr``. Returns the loss of every step; ``seed`` fixes the batches."""
    from tqdm import tqdm  # the progress bar only

    if len(lr) != len(hr) or len(lr) == 0:
        raise ValueError(f"fit_upsampler needs equal, non-empty patch arrays (got {len(lr)} and {len(hr)}).")
    rng = np.random.default_rng(seed)
    up.train()
    params = list(up.parameters())
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=peak_lr)
    losses = []
    with tqdm(total=steps, desc="fit upsampler", unit="step", disable=not show, mininterval=progress_interval()) as bar:
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = peak_lr * 0.5 * (1 + math.cos(math.pi * step / steps))
            idx = np.sort(rng.choice(len(lr), size=min(batch, len(lr)), replace=False))  # sorted: mmap locality
            x = torch.from_numpy(np.ascontiguousarray(lr[idx])).permute(0, 3, 1, 2)
            y = torch.from_numpy(np.ascontiguousarray(hr[idx])).permute(0, 3, 1, 2).float()
            loss = F.mse_loss(up(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(mse=f"{losses[-1]:.2f}", refresh=False)
    for p in params:
        p.requires_grad_(False)  # frozen under the base: its rounded guesses carry no gradient
    up.eval()
    return losses
