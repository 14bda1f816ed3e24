"""Where and how this process runs: repository paths, the device and its place in a distributed run
(the keys that name cached products are ``bpd.config.common.cache_key``).

An entry point builds one ``Runtime`` (``Runtime.build``) and passes it down: the library never reads the
process group, the device or the folders from the experiment config itself.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from bpd.config import ExperimentConfig, LoggerConfig
from bpd.training import distributed as dist

REPO_ROOT = Path(__file__).resolve().parents[1]


def resolve_path(p: str | Path) -> Path:
    """A path relative to the repository root (configs and rows store such paths), or an absolute one."""
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository root where it lies inside it (rows stay portable), else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(p)


def pick_device(name: str | None) -> torch.device:
    """``auto`` is CUDA when available, else the CPU; asking for CUDA without it is refused with the fix."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name} was requested but CUDA is not available; use device=cpu.")
    return torch.device(name)


@dataclass(frozen=True)
class Runtime:
    """This process and where its products go, built once per process at its entry point (``build``).

    ``device_setting`` is ``device`` as configured (``auto``, ``cpu``, ...): run ids hash it, not the device it
    resolved to, so a run's id is the same on any machine the setting picks. ``logger`` and ``experiment`` name
    the W&B runs a stage opens (``bpd.tracking.make_tracker``)."""

    info: dist.DistInfo
    device: torch.device
    device_setting: str
    cache_root: Path
    results_dir: Path
    shipped_dir: Path
    experiment: str
    logger: LoggerConfig

    @classmethod
    def build(cls, cfg: ExperimentConfig) -> Runtime:
        """Join the process group of a torchrun / multi-task SLURM run (one process: rank 0 of 1) and resolve
        the device and folders. Joining is idempotent, so a Hydra multirun builds one per job in the same group.

        The entry points' glue (with ``bpd.stages.Recipe.of``): it alone reads the process's sections of the
        whole config (``device``, ``dist``, ``paths``, ``logger``, the name), and the library takes the runtime."""
        info = dist.init_distributed(cfg.dist.backend, cfg.device, cfg.dist.timeout_min)
        return cls(info=info, device=info.device if info.distributed else pick_device(cfg.device),
                   device_setting=cfg.device, cache_root=resolve_path(cfg.paths.cache_dir),
                   results_dir=resolve_path(cfg.results_dir), shipped_dir=resolve_path(cfg.paths.shipped_dir),
                   experiment=cfg.name, logger=cfg.logger)

    @property
    def is_main(self) -> bool:
        """Rank 0: it alone logs, writes checkpoints and rows."""
        return self.info.is_main


class ResultsNotSaved(OSError):
    """Results the configured folder refused (a full disk): the message says where they went instead."""


#: Less free space than this in the results folder is refused before any work: the outputs would not fit.
MIN_FREE_MB = 16


def ensure_writable(folder: str | Path, what: str = "paths.results_dir") -> Path:
    """Create ``folder`` and check that files can be written there, before any long work whose results
    would otherwise be lost at the end."""
    folder = resolve_path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        rows = folder / "rows.jsonl"
        if rows.exists() and not os.access(rows, os.W_OK):
            raise PermissionError(f"{rows} is read-only")
        free_mb = shutil.disk_usage(folder).free / 2**20
    except OSError as e:
        raise ValueError(f"cannot write results to {folder} ({e.strerror or e}); point {what} at a writable "
                         "folder.") from e
    if free_mb < MIN_FREE_MB:
        raise ValueError(f"only {free_mb:.1f} MB free for results in {folder} (at least {MIN_FREE_MB} MB needed); "
                         f"free disk space or point {what} at a folder on another disk.")
    return folder
