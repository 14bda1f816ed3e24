"""Decode a test set with several decoders, interleaved and timed in one process, and make result rows.

Fair timing: every batch of inputs is decoded by every configuration in turn (greedy first), so slow
drift of the machine (thermal, other processes) hits all of them alike; a warm-up batch runs first,
untimed. ``speedup`` is greedy's wall-clock over the configuration's, on the same inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from bpd.decoding import (
    DecodeResult,
    beam_decode,
    blockwise_decode,
    greedy_decode,
    make_criterion,
    naive_greedy_decode,
)
from bpd.metrics import block_histogram, mean_block_size, per_example_block_means, summarize
from bpd.tracking import progress_interval


@dataclass(frozen=True)
class DecodeSpec:
    method: str  # greedy | beam | blockwise | naive_greedy
    k: int = 1
    criterion: str = "exact"
    criterion_param: float | None = None
    min_block_size: int = 1
    beam_size: int = 4
    alpha: float = 0.6

    def __post_init__(self) -> None:
        if self.method not in ("greedy", "beam", "blockwise", "naive_greedy"):
            raise ValueError(f"unknown decoding method {self.method!r}; use greedy, beam, blockwise or naive_greedy.")
        if self.method == "blockwise":
            make_criterion(self.criterion, self.criterion_param, self.min_block_size)  # validates early

    def columns(self) -> dict[str, Any]:
        """The row columns that identify this decoder (None where a field does not apply)."""
        bw = self.method == "blockwise"
        return {
            "decoder": self.name,
            "method": self.method,
            "k": self.k if bw else 1,
            "criterion": self.criterion if bw else None,
            "criterion_param": self.criterion_param if bw else None,
            "min_block_size": self.min_block_size if bw else None,
            "beam_size": self.beam_size if self.method == "beam" else None,
        }

    @property
    def name(self) -> str:
        if self.method == "beam":
            return f"beam{self.beam_size}_a{self.alpha:g}"
        if self.method != "blockwise":
            return self.method
        p = "" if self.criterion == "exact" else f"{self.criterion_param:g}"
        m = "" if self.min_block_size == 1 else f"_l{self.min_block_size}"
        return f"blockwise_k{self.k}_{self.criterion}{p}{m}"


@dataclass
class RunOutput:
    tokens: list[list[int]]
    iterations: list[int]
    block_sizes: list[list[int]]
    invocations: int = 0
    wallclock_s: float = 0.0
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    example_wall_s: list[float] = field(default_factory=list)  # wall time of the batch each example was in


def decoder_fn(spec: DecodeSpec, criterion_kwargs: dict[str, Any] | None = None) -> Callable:
    if spec.method == "greedy":
        return lambda m, s, n: greedy_decode(m, s, max_len=n)
    if spec.method == "naive_greedy":
        return lambda m, s, n: naive_greedy_decode(m, s, max_len=n)
    if spec.method == "beam":
        return lambda m, s, n: beam_decode(m, s, beam_size=spec.beam_size, alpha=spec.alpha, max_len=n)
    crit = make_criterion(spec.criterion, spec.criterion_param, spec.min_block_size, **(criterion_kwargs or {}))
    return lambda m, s, n: blockwise_decode(m, s, k=spec.k, criterion=crit, max_len=n)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pad_rows(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    n = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), n), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


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
) -> dict[str, RunOutput]:
    """Decode ``sources`` with every spec, batch by batch, interleaved; outputs in input order."""
    device = torch.device(device)
    model = model.to(device).eval()
    fns = {s.name: decoder_fn(s, criterion_kwargs) for s in specs}
    # Batches of similar length waste less on padding; the original order is restored at the end.
    order = sorted(range(len(sources)), key=lambda i: len(sources[i])) if batch_size > 1 else list(range(len(sources)))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    n = len(sources)
    out = {s.name: RunOutput([[]] * n, [0] * n, [[]] * n, example_wall_s=[0.0] * n) for s in specs}
    for idx in batches[: min(warmup, len(batches))]:  # warm-up: allocator, kernels, caches
        src = pad_rows([sources[i] for i in idx], model.pad_id).to(device)
        for fn in fns.values():
            fn(model, src, max_len(src))
    for idx in tqdm(batches, desc=desc, disable=not progress, leave=False, mininterval=progress_interval()):
        src = pad_rows([sources[i] for i in idx], model.pad_id).to(device)
        limit = max_len(src)
        for spec in specs:
            _sync(device)
            t0 = time.perf_counter()
            res: DecodeResult = fns[spec.name](model, src, limit)
            _sync(device)
            dt = time.perf_counter() - t0
            o = out[spec.name]
            o.wallclock_s += dt
            o.invocations += res.invocations
            for j, i in enumerate(idx):
                o.tokens[i], o.iterations[i], o.block_sizes[i] = res.tokens[j], res.iterations[j], res.block_sizes[j]
                o.example_wall_s[i] = dt
            if res.position_reached:
                if not o.position_reached:
                    o.position_reached = [0] * len(res.position_reached)
                    o.position_accepted = [0] * len(res.position_reached)
                for p, (r, a) in enumerate(zip(res.position_reached, res.position_accepted)):
                    o.position_reached[p] += r
                    o.position_accepted[p] += a
    return out


class Scorer(Protocol):
    """Task-specific quality: BLEU for text, PSNR for images; also writes the outputs to files."""

    def score(self, tokens: list[list[int]], greedy_tokens: list[list[int]]) -> dict[str, Any]: ...

    def write(self, tokens: list[list[int]], stem: Path) -> dict[str, str]: ...


def make_rows(
    outputs: dict[str, RunOutput],
    specs: list[DecodeSpec],
    scorer: Scorer,
    common: dict[str, Any],
    out_dir: Path,
    repo_root: Path,
) -> list[dict[str, Any]]:
    """One tidy row per decoding configuration (columns as in DESIGN.md)."""
    g = outputs["greedy"]
    g_iters = sum(g.iterations)
    rows = []
    for spec in specs:
        o = outputs[spec.name]
        iters = sum(o.iterations)
        identical = sum(a == b for a, b in zip(o.tokens, g.tokens)) / max(1, len(g.tokens))
        rates = [a / r if r else None for a, r in zip(o.position_accepted, o.position_reached)]
        row = {
            **common,
            **spec.columns(),
            "n_examples": len(o.tokens),
            "output_tokens": sum(len(t) for t in o.tokens),
            "iterations": iters,
            "invocations": o.invocations,
            "greedy_iterations": g_iters,
            "mean_block_size": mean_block_size(g_iters, iters) if spec.method == "blockwise" else 1.0,
            "tokens_per_iteration": sum(len(t) for t in o.tokens) / max(1, iters),
            "identical_to_greedy": identical,
            "wallclock_s": o.wallclock_s,
            "greedy_wallclock_s": g.wallclock_s,
            "speedup": g.wallclock_s / o.wallclock_s if o.wallclock_s > 0 else None,
            "acceptance_rate_per_position": rates,
            "block_size_histogram": {str(k): v for k, v in block_histogram(o.block_sizes).items()},
            "block_size_per_example": summarize(per_example_block_means(o.tokens, o.iterations)),
            "spec": asdict(spec),
        }
        row.update(scorer.score(o.tokens, g.tokens))
        files = scorer.write(o.tokens, out_dir / spec.name)
        row.update({k: _rel(v, repo_root) for k, v in files.items()})
        rows.append(row)
    return rows


def _rel(path: str | Path, root: Path) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(root.resolve()))
    except ValueError:
        return str(p)


def format_table(rows: list[dict[str, Any]], quality: str = "bleu") -> str:
    """A readable fixed-width table of the key columns."""
    head = f"{'decoder':<30} {quality:>7} {'k_hat':>6} {'=greedy':>7} {'iters':>7} {'time_s':>8} {'speedup':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("method") == "reference":  # upsampling baselines: quality only
            lines.append(f"{r['decoder']:<30} {r[quality]:7.2f}   (reference, no model)")
            continue
        q = r.get(quality)
        q_s = f"{q:7.2f}" if isinstance(q, int | float) else f"{'-':>7}"
        sp = r.get("speedup")
        lines.append(
            f"{r['decoder']:<30} {q_s} {r['mean_block_size']:6.2f} {r['identical_to_greedy']:7.2f} "
            f"{r['iterations']:7d} {r['wallclock_s']:8.2f} {(sp or float('nan')):6.2f}x"
        )
    return "\n".join(lines)
