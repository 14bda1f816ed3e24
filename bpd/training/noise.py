"""Input-token noise for teacher forcing (``train.input_noise``).

Teacher forcing always shows the decoder the true previous tokens, so a model can learn to lean on them
(for images: copy the previous pixel) and then drift when greedy decoding feeds it its own mistakes.
Replacing a fraction of the decoder's *input* tokens (never the targets, never BOS or padding) with other
tokens of the same batch makes the previous tokens less reliable than the conditioning input, so the model
learns to use the source too. Replacements are drawn from the batch's own real tokens, which keeps them
in-distribution for any vocabulary (intensities, subwords) without knowing which ids are special.
"""

from __future__ import annotations

import torch


def noisy_inputs(tgt_in: torch.Tensor, rate: float, pad_id: int, generator: torch.Generator | None = None
                 ) -> torch.Tensor:
    """``tgt_in`` (B, T) with each real token after position 0 replaced, with probability ``rate``, by a
    token drawn uniformly from the batch's real tokens after position 0."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"train.input_noise must be in [0, 1) (got {rate}).")
    if rate == 0.0 or tgt_in.shape[1] < 2:
        return tgt_in
    body = tgt_in[:, 1:]
    real = body != pad_id
    pool = body[real]
    if pool.numel() == 0:
        return tgt_in
    dev = tgt_in.device
    hit = (torch.rand(body.shape, generator=generator, device=dev) < rate) & real
    draws = pool[torch.randint(pool.numel(), body.shape, generator=generator, device=dev)]
    return torch.cat([tgt_in[:, :1], torch.where(hit, draws, body)], dim=1)
