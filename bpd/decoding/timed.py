"""Decode a list of sources with several decoders, batch by batch, interleaved and timed in one process.

Fair timing: every batch of inputs is decoded by every configuration back to back, so slow drift of the
machine (thermal, other processes) hits all of them alike, and the order rotates from batch to batch
(``Passes.rotate``), so that no configuration always runs first, on the caches the previous one left; a warm-up
batch runs first, untimed. Each batch's time is kept per configuration (``batch_wall_s``): the bench pairs
them (``bpd.bench.speedup_ci``). With ``Passes.repeats`` > 1 each batch is decoded that many times by every
configuration before the next batch, the order rotating each time: a load that comes and goes for a few
seconds then falls on greedy and on the method alike, and the per-batch repeats (``repeat_wall_s``) are what
the evaluation's paired intervals resample.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from bpd.data.batches import pad_rows
from bpd.decoding.method import NOTHING, Prepared
from bpd.decoding.result import DecodeResult
from bpd.decoding.spec import DecodeSpec
from bpd.progress import progress_interval


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
    # Each repeat's batch times, (repeats, batches): batch_wall_s is their per-batch median.
    repeat_wall_s: list[list[float]] = field(default_factory=list)
    # The static path's compilation before timing (``precompile``), not in any wall time above: building compiled
    # steps, and loading those an earlier process built (``bpd.decoding.step_store``).
    compile_s: float = 0.0
    load_s: float = 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass(frozen=True)
class Passes:
    """How ``decode_and_time`` goes over the batches: ``warmup`` batches first, untimed; each batch then timed
    ``repeats`` times by every spec, the order rotating by ``rotate`` (None: the given order); a progress bar
    labelled ``desc`` while ``progress``."""

    warmup: int = 1
    repeats: int = 1
    rotate: int | None = None
    progress: bool = True
    desc: str = "decode"

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1 (got {self.repeats}).")


def decode_and_time(
    model,
    sources: list[list[int]],
    specs: list[DecodeSpec],
    max_len: Callable[[torch.Tensor], int],
    batch_size: int = 1,
    device: str | torch.device = "cpu",
    prepared: Prepared = NOTHING,
    passes: Passes | None = None,
) -> dict[str, RunOutput]:
    """Decode ``sources`` with every spec, batch by batch, interleaved; outputs in input order. ``passes``
    (default ``Passes()``): with ``rotate`` set, the j-th timed call of a batch's specs (batch b, repeat r:
    j = b * repeats + r) starts at spec ``(j + rotate) % len(specs)``; else in the given order. ``repeats``: timed
    decodes of each batch per spec (outputs from the first; ``wallclock_s`` and ``batch_wall_s`` from the per-batch
    medians).
    ``prepared``: the task's criterion options and what the specs' methods built beside the model
    (``bpd.decoding.spec.prepare``, on ``device`` already), handed to each ``Method.decode``. Outputs are keyed by
    ``spec.key`` (the decoder's name, with its decode path off the eager one); a spec on the static path first
    compiles every shape the batches need (``precompile``), untimed."""
    passes = Passes() if passes is None else passes
    warmup, repeats, rotate = passes.warmup, passes.repeats, passes.rotate
    device = torch.device(device)
    model = model.to(device).eval()
    # Batches of similar length waste less on padding; the original order is restored at the end.
    order = sorted(range(len(sources)), key=lambda i: len(sources[i])) if batch_size > 1 else list(range(len(sources)))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    n = len(sources)
    out = {s.key: RunOutput([[]] * n, [0] * n, [[]] * n, example_wall_s=[0.0] * n, example_batch_size=[0] * n)
           for s in specs}
    compiled = precompile(model, [pad_rows([sources[i] for i in idx], model.pad_id, min_width=1).to(device)
                                  for idx in batches], specs, max_len, prepared, passes.progress)
    for key, (built, loaded) in compiled.items():
        out[key].compile_s, out[key].load_s = built, loaded
    for idx in batches[: min(warmup, len(batches))]:  # warm-up: allocator, kernels, caches
        src = pad_rows([sources[i] for i in idx], model.pad_id, min_width=1).to(device)
        for spec in specs:
            spec.entry.decode(model, src, max_len(src), spec.options, prepared)
    times = {s.key: [[0.0] * len(batches) for _ in range(repeats)] for s in specs}
    for bi, idx in enumerate(tqdm(batches, desc=passes.desc, disable=not passes.progress, leave=False,
                                  mininterval=progress_interval())):
        src = pad_rows([sources[i] for i in idx], model.pad_id, min_width=1).to(device)
        limit = max_len(src)
        for r in range(repeats):
            first = 0 if rotate is None else (bi * repeats + r + rotate) % len(specs)
            for spec in specs[first:] + specs[:first]:
                res, times[spec.key][r][bi] = _timed_call(spec, model, src, limit, device, prepared)
                if r == 0:
                    _record(out[spec.key], res, idx)
    for name, o in out.items():
        o.repeat_wall_s = times[name]
        o.batch_wall_s = [statistics.median(col) for col in zip(*times[name])]
        o.wallclock_s = sum(o.batch_wall_s)
        for idx, dt in zip(batches, o.batch_wall_s):
            for i in idx:
                o.example_wall_s[i] = dt
    return out


def precompile(model, batches: list[torch.Tensor], specs: list[DecodeSpec], max_len, prepared: Prepared = NOTHING,
               progress: bool = False) -> dict[str, tuple[float, float]]:
    """Decode one batch of every shape the static path will see (batch size, padded source length, capacity)
    with every spec on that path, so that no timed call compiles; returns the seconds each spec spent building
    compiled steps and loading stored ones (only for specs on the static path). ``progress``: a bar over the
    (spec, shape) pairs, since building takes minutes on a CPU and prints nothing of its own."""
    from bpd.decoding.engine import engine_for

    todo: list[tuple[DecodeSpec, torch.Tensor, int]] = []
    capacity = 0
    for spec in specs:
        if spec.path == "eager":
            continue
        engine, seen = engine_for(model, spec.path), set()
        for src in batches:
            limit = max_len(src)
            if (shape := engine.shape_key(src, limit)) not in seen:
                seen.add(shape)
                todo.append((spec, src, limit))
                capacity = max(capacity, shape[2])
    # The position table grows to the largest capacity first: grown later, it would void the graphs traced before.
    if todo:
        model.cover_positions(capacity)
    seconds: dict[str, tuple[float, float]] = {}
    bar = tqdm(todo, desc="compile", unit="shape", disable=not (progress and todo), leave=False,
               mininterval=progress_interval())
    for spec, src, limit in bar:
        bar.set_postfix_str(spec.key, refresh=False)
        engine = engine_for(model, spec.path)
        before = engine.compile_seconds, engine.load_seconds
        spec.entry.decode(model, src, limit, spec.options, prepared)
        engine = engine_for(model, spec.path)  # (the same engine unless the call replaced it)
        built, loaded = seconds.get(spec.key, (0.0, 0.0))
        seconds[spec.key] = (built + engine.compile_seconds - before[0], loaded + engine.load_seconds - before[1])
    return seconds


def _timed_call(spec: DecodeSpec, model, src: torch.Tensor, limit: int, device: torch.device, prepared: Prepared
                ) -> tuple[DecodeResult, float]:
    """One decoder call on one batch and its wall time (the device's queued work finished on both sides)."""
    _sync(device)
    t0 = time.perf_counter()
    res = spec.entry.decode(model, src, limit, spec.options, prepared)
    _sync(device)
    return res, time.perf_counter() - t0


def _record(o: RunOutput, res: DecodeResult, idx: list[int]) -> None:
    """A batch's outputs and counts into its decoder's ``RunOutput`` (example order)."""
    o.invocations += res.invocations
    for j, i in enumerate(idx):
        o.tokens[i], o.iterations[i], o.block_sizes[i] = res.tokens[j], res.iterations[j], res.block_sizes[j]
        o.example_batch_size[i] = len(idx)
    if res.position_reached:
        if not o.position_reached:
            o.position_reached = [0] * len(res.position_reached)
            o.position_accepted = [0] * len(res.position_reached)
        for p, (r, a) in enumerate(zip(res.position_reached, res.position_accepted)):
            o.position_reached[p] += r
            o.position_accepted[p] += a
