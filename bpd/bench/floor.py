"""What a decoding step must cost at least on this machine: the bytes of weights it reads over the memory bandwidth.

At batch 1 every matrix product of a decoder step is a matrix-vector product, so a step cannot run faster than
its weights stream from memory. ``memory_bandwidth`` measures that stream (a read of a buffer far larger than
the caches) and ``step_bytes`` counts what a greedy step and a blockwise round read; ``floor_columns`` puts
both beside the measured t_1 and t_k, so that "close to the limit" is a ratio in every ``make bench`` row.

The floor is a lower bound in three ways: weights that stay in the caches between steps (a model of a few MB
on a CPU with a large L3) can be read faster than from memory (``last_level_cache`` gives the CPU's, and rows
say whether each step's bytes fit in it: a step that fits finds its weights there at the next call of a
decoder's loop, a round that does not fit streams them from memory); the KV cache and the source's keys and values
are not counted (they are small beside the weights at these lengths); and every weight is counted once per call,
however many rows read it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch


def memory_bandwidth(device: torch.device | str = "cpu", mb: int = 512, repeats: int = 5) -> float:
    """Bytes per second that a sum over a ``mb`` MB float32 buffer reads, the best of ``repeats`` (after one
    untimed pass): far larger than any cache, so it streams from memory as a large step's weights do."""
    device = torch.device(device)
    buf = torch.ones(mb * 2**20 // 4, dtype=torch.float32, device=device)
    best = float("inf")
    for i in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        buf.sum().item()
        dt = time.perf_counter() - t0
        if i:
            best = min(best, dt)
    return buf.numel() * 4 / best


def last_level_cache(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Bytes of the CPU's last-level cache (the highest level sysfs lists for the first core: the L3 of an x86
    server), or None where sysfs does not say (not Linux)."""
    best: tuple[int, int] | None = None
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1].upper(), 1)
        n = int(size[:-1] if unit > 1 else size) * unit
        if best is None or level > best[0]:
            best = (level, n)
    return None if best is None else best[1]


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def decoder_bytes(model) -> int:
    """What one decoder call reads of the weights, whatever its number of new tokens: every decoder layer but
    the cross-attention's key/value projection (the source's keys and values are projected once per input),
    the final norm and p_1's vocabulary projection."""
    skip = set()
    for layer in model.dec_layers:
        skip |= {id(p) for p in layer.cross_attn.kv.parameters()}
    layers = [p for layer in model.dec_layers for p in layer.parameters() if id(p) not in skip]
    return _bytes(layers) + _bytes(model.dec_ln.parameters()) + _bytes(model.heads.output.parameters())


def chain_bytes(model, k: int) -> int:
    """What proposing slots 1..k-1 reads: their weights (one set for tied slots; int8 chains at a byte per
    weight) and the projection onto the proposal vocabulary when it is not p_1's own (read once: the slots
    share it)."""
    heads = model.heads
    if k <= 1 or not heads.n_learned:
        return 0
    out = 0
    ids = heads.proposal_ids
    if ids is not None:
        per = 1 if heads.proposal_precision == "int8" else heads.output.weight.element_size()
        out += len(ids) * heads.output.weight.shape[1] * per
    if heads.path_dependent:  # slots that run one after another (recurrent, attend): one weight set each
        sets = 1 if heads.tie_slots else min(k - 1, heads.n_learned)
        per_set = [heads.w_r_in[0], heads.w_r_out[0], heads.b_r_out[0]] + ([heads.w_q[0]] if heads.reads_source else [])
        n = sum(t.numel() for t in per_set)
        size = 1 if heads.proposal_precision == "int8" else heads.w_r_in.element_size()
        return out + sets * n * size + (k - 1) * heads.b_r_in[0].numel() * heads.b_r_in.element_size()
    params = list(heads.parameters())
    if heads.arch == "paper":  # one layer over all slots: read whole
        return out + _bytes(params)
    return out + _bytes(params) * min(k - 1, heads.n_learned) // heads.n_learned


def step_bytes(model, ks: list[int]) -> dict[str, int]:
    """Weight bytes a greedy step (``t1``) and a blockwise round at each k (``t<k>``: the verify call and the
    proposal chain) read."""
    dec = decoder_bytes(model)
    return {"t1": dec, **{f"t{k}": dec + chain_bytes(model, k) for k in ks}}


def floor_columns(costs: dict[str, float], nbytes: dict[str, int], bandwidth: float, step_key: str | None,
                  llc: int | None = None) -> dict[str, Any]:
    """A row's floors (ms) and how far its measured step costs are above them; ``llc``: the last-level cache's
    bytes (``last_level_cache``; None on a GPU or where unknown)."""
    floor1 = nbytes["t1"] / bandwidth * 1e3
    floork = nbytes[step_key] / bandwidth * 1e3 if step_key in nbytes else None
    t1, tk = costs.get("t1"), costs.get(step_key) if step_key else None
    return {
        "bandwidth_gbs": bandwidth / 1e9,
        "t1_bytes": nbytes["t1"],
        "tk_bytes": nbytes.get(step_key) if step_key else None,
        "t1_floor_ms": floor1,
        "tk_floor_ms": floork,
        "t1_vs_floor": t1 / floor1 if t1 else None,
        "tk_vs_floor": tk / floork if (tk and floork) else None,
        "llc_mb": None if llc is None else llc / 2**20,
    }
