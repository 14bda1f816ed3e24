"""Several processes, one training run: torchrun / SLURM environments, DDP, and the few collectives we need.

Everything here is a no-op for a single process, so library code calls it unconditionally and a plain
``python experiments/train.py`` behaves exactly as before. Under ``torchrun --nproc_per_node=N`` (any
number of nodes), or inside a submitit SLURM job with several tasks, the same code joins one process group:
NCCL on GPUs, gloo on CPUs.

How a distributed step stays equal to a single-process step (see ``bpd.training.loop.train``):

- the token-bucket batches of an epoch are one list whatever the world size; rank r takes every
  world_size-th batch (``bpd.data.batches.make_batches``), so N ranks with one micro-batch each see
  the same batches as one process accumulating N micro-batches;
- each rank weights its micro-batch losses by their share of the *global* token count (one all-reduce of a
  scalar) times world_size, because DDP averages gradients over ranks;
- ``grad_accum_for`` keeps the global batch fixed across world sizes (``dist.reference_world_size``).

This module has no Hydra in it; ``experiments/`` passes the ``dist:`` config section in.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bpd.training.losses import LossModule

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the run: its rank, the number of processes, and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs, writes checkpoints and result rows."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _export_submitit_env() -> None:
    """Inside a multi-task submitit job (SLURM or local), export torchrun's variables from the job environment.

    hydra-submitit-launcher starts one task per GPU (``tasks_per_node``) but sets only SLURM/submitit
    variables; ``TorchDistributedEnvironment`` derives RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT (a port seeded by the job id, so every task agrees) from them.
    """
    try:
        import submitit
        from submitit.helpers import TorchDistributedEnvironment
    except ImportError:
        return
    if submitit.JobEnvironment().num_tasks > 1:
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def _env_rank() -> tuple[int, int, int]:
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        return rank, world, int(os.environ.get("LOCAL_RANK", rank))
    if "RANK" not in os.environ and os.environ.get("SUBMITIT_EXECUTOR"):
        _export_submitit_env()
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    return rank, world, int(os.environ.get("LOCAL_RANK", rank))


def _device(name: str | None, local_rank: int) -> torch.device:
    """One GPU per process: ``cuda:<local_rank>`` (modulo the visible GPUs, for jobs that see only their own)."""
    cuda = torch.cuda.is_available()
    if name in (None, "auto"):
        name = "cuda" if cuda else "cpu"
    if name.startswith("cuda"):
        if not cuda:
            raise RuntimeError(f"device={name} was requested but CUDA is not available; use device=cpu.")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(name)


def init_distributed(
    backend: str | None = None, device: str | None = None, timeout_min: float | None = None
) -> DistInfo:
    """Join the process group that torchrun (or a multi-task submitit job) set up; nothing for one process.

    Idempotent: each job of a Hydra multirun under torchrun (every rank runs the sweep's jobs in the same order)
    builds its runtime (``bpd.runtime.Runtime.build``) and gets the same answer: one process group for all its
    jobs. ``backend`` defaults
    to NCCL when the device is a GPU and gloo otherwise; ``timeout_min`` bounds how long a rank waits for the
    others in a collective (rank 0 alone prepares data and decodes dev sets meanwhile, hence the generous
    default of 60 minutes). The group is torn down at exit.
    """
    rank, world, local = _env_rank()
    if world <= 1:
        return DistInfo()
    dev = _device(device, local)
    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        backend = backend or ("nccl" if dev.type == "cuda" else "gloo")
        dist.init_process_group(backend, timeout=timedelta(minutes=timeout_min or 60))
        atexit.register(cleanup)
    return DistInfo(rank, world, local, dev)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    """Wait for every rank (no-op for one process): e.g. before reading a checkpoint that rank 0 writes."""
    if world_size() > 1:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def cleanup() -> None:
    """Tear the process group down (at exit). Gloo ranks first wait for each other, for a minute at most: a
    rank that tears down while a peer still talks to it (rank 0 writing the rows of a sharded evaluation,
    say) can abort that peer, which a test saw once. A rank that failed goes on after the minute."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if dist.get_backend() == "gloo" and dist.get_world_size() > 1:
        try:
            dist.monitored_barrier(timeout=timedelta(minutes=1))
        except RuntimeError:
            pass
    dist.destroy_process_group()


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Sum a few numbers over ranks (float64: token counts stay exact); the identity for one process."""
    if world_size() <= 1:
        return [float(v) for v in values]
    t = torch.tensor(list(values), dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return t.tolist()


def all_gather_object(obj: T) -> list[T]:
    """Every rank's ``obj`` (any picklable value) in rank order, on every rank: used to merge sharded evaluation."""
    if world_size() <= 1:
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank."""
    if world_size() <= 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def main_first(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0, then on the others, which find what rank 0 cached (data, tokenizer, dev outputs).

    The cached products are written atomically, so concurrent calls would be safe, only wasteful: N ranks
    training the same tokenizer or decoding the same dev set N times.
    """
    if world_size() <= 1:
        return fn()
    if dist.get_rank() == 0:
        out = fn()
        barrier()
        return out
    barrier()
    return fn()


def wait_for_files(paths: Iterable[Path], poll_s: float = 5.0) -> None:
    """Block until every path exists: ranks wait for the shards other ranks decode.

    A file poll, not a collective: decoding a WMT-sized training set takes hours, longer than any sensible
    collective timeout; if a rank dies, torchrun / SLURM ends the others.
    """
    pending = [Path(p) for p in paths]
    while pending:
        pending = [p for p in pending if not p.exists()]
        if pending:
            time.sleep(poll_s)


def grad_accum_for(grad_accum: int, world: int, reference_world_size: int | None) -> int:
    """Micro-batches per rank and step that keep the global batch of ``reference_world_size`` processes.

    The global batch is ``max_tokens x grad_accum x reference_world_size``; at ``world`` processes each rank
    accumulates ``grad_accum x reference_world_size / world`` micro-batches. With no reference the per-rank
    ``grad_accum`` is used as is and the global batch grows with the world size.
    """
    if grad_accum < 1:
        raise ValueError(f"grad_accum must be >= 1 (got {grad_accum}).")
    if not reference_world_size:
        return grad_accum
    total = grad_accum * int(reference_world_size)
    if total % world:
        raise ValueError(
            f"dist.reference_world_size={reference_world_size} x grad_accum={grad_accum} = {total} micro-batches per "
            f"step cannot be split evenly over {world} processes; use a world size that divides {total}, or set "
            "dist.reference_world_size=null."
        )
    return total // world


def shard_batches(order: Sequence[int], batch_size: int, rank: int, world: int) -> list[int]:
    """The example indices rank ``rank`` decodes: whole batches of ``order``, dealt round-robin.

    ``order`` is the order in which a single process would batch the examples; dealing whole batches keeps
    every batch's composition (and padding) identical, so sharded decoding yields the same outputs. The
    concatenation of a rank's batches stays in ``order``'s order, so re-sorting it by length is a no-op.
    """
    batches = [list(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
    return [i for b in batches[rank::world] for i in b]


def wrap_ddp(model: torch.nn.Module, info: DistInfo, find_unused_parameters: bool = False):
    """DistributedDataParallel around ``LossModule(model)``, or None for a single process.

    DDP must see every trainable parameter inside its forward, and the proposal heads sit *after* the
    decoder states, so the wrapped module computes the head losses too. Build it after the stage has frozen
    what it freezes (``configure_params``): DDP registers gradient hooks only for parameters that require
    grad at construction. ``find_unused_parameters`` is needed when a step may leave trainable parameters
    without a gradient (``heads.loss=sampled`` drawing p_1 while the heads train), and then those
    parameters are left untouched, as in a single process.
    """
    if not info.distributed:
        return None
    module = LossModule(model.to(info.device))
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=find_unused_parameters)


__all__ = [
    "DistInfo",
    "all_gather_object",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "cleanup",
    "grad_accum_for",
    "init_distributed",
    "main_first",
    "shard_batches",
    "wait_for_files",
    "world_size",
    "wrap_ddp",
]
