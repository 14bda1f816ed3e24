"""Decode a list of sources with several decoders, batch by batch, interleaved and timed in one process.

Fair timing: every batch of inputs is decoded by every configuration back to back, so slow drift of the
machine (thermal, other processes) hits all of them alike, and the order rotates from batch to batch
(``rotate``), so that no configuration always runs first, on the caches the previous one left; a warm-up
batch runs first, untimed. Each batch's time is kept per configuration (``batch_wall_s``): the bench pairs
them (``bpd.speedup_ci``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from bpd.decoding.common import pad_rows
from bpd.decoding.result import DecodeResult
from bpd.decoding.spec import DecodeAux, DecodeSpec, decoder_fn
from bpd.tracking import progress_interval


@dataclass
class RunOutput:
    """One decoder's outputs over all sources, in input order, with its summed costs."""

    tokens: list[list[int]]
    iterations: list[int]
    block_sizes: list[list[int]]
    invocations: int = 0
    wallclock_s: float = 0.0
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    example_wall_s: list[float] = field(default_factory=list)  # wall time of the batch each example was in
    example_batch_size: list[int] = field(default_factory=list)  # how many examples that batch held
    batch_wall_s: list[float] = field(default_factory=list)  # each batch's wall time, in decoding order


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_and_time(
    model,
    sources: list[list[int]],
    specs: list[DecodeSpec],
    max_len: Callable[[torch.Tensor], int],
    batch_size: int = 1,
    device: str | torch.device = "cpu",
    criterion_kwargs: dict[str, Any] | None = None,
    warmup: int = 1,
    progress: bool = True,
    desc: str = "decode",
    rotate: int | None = None,
    aux: DecodeAux | None = None,
) -> dict[str, RunOutput]:
    """Decode ``sources`` with every spec, batch by batch, interleaved; outputs in input order. With
    ``rotate`` set, batch j runs the specs starting at spec ``(j + rotate) % len(specs)``; else in the given
    order. ``aux``: what draft and rescored specs need (moved to the device here)."""
    device = torch.device(device)
    model = model.to(device).eval()
    if aux is not None:
        aux = DecodeAux(aux.draft.to(device).eval() if aux.draft is not None else None,
                        aux.lm.to(device) if aux.lm is not None else None)
    fns = {s.name: decoder_fn(s, criterion_kwargs, aux) for s in specs}
    # Batches of similar length waste less on padding; the original order is restored at the end.
    order = sorted(range(len(sources)), key=lambda i: len(sources[i])) if batch_size > 1 else list(range(len(sources)))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    n = len(sources)
    out = {s.name: RunOutput([[]] * n, [0] * n, [[]] * n, example_wall_s=[0.0] * n, example_batch_size=[0] * n)
           for s in specs}
    for idx in batches[: min(warmup, len(batches))]:  # warm-up: allocator, kernels, caches
        src = pad_rows([sources[i] for i in idx], model.pad_id).to(device)
        for fn in fns.values():
            fn(model, src, max_len(src))
    for bi, idx in enumerate(tqdm(batches, desc=desc, disable=not progress, leave=False,
                                  mininterval=progress_interval())):
        src = pad_rows([sources[i] for i in idx], model.pad_id).to(device)
        limit = max_len(src)
        first = 0 if rotate is None else (bi + rotate) % len(specs)
        for spec in specs[first:] + specs[:first]:
            fn, o = fns[spec.name], out[spec.name]
            _sync(device)
            t0 = time.perf_counter()
            res: DecodeResult = fn(model, src, limit)
            _sync(device)
            dt = time.perf_counter() - t0
            o.wallclock_s += dt
            o.batch_wall_s.append(dt)
            o.invocations += res.invocations
            for j, i in enumerate(idx):
                o.tokens[i], o.iterations[i], o.block_sizes[i] = res.tokens[j], res.iterations[j], res.block_sizes[j]
                o.example_wall_s[i], o.example_batch_size[i] = dt, len(idx)
            if res.position_reached:
                if not o.position_reached:
                    o.position_reached = [0] * len(res.position_reached)
                    o.position_accepted = [0] * len(res.position_reached)
                for p, (r, a) in enumerate(zip(res.position_reached, res.position_accepted)):
                    o.position_reached[p] += r
                    o.position_accepted[p] += a
    return out
