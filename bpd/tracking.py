"""Where results go: tidy JSON-lines rows on disk and Weights & Biases (offline by default).

Every row records how it was made (config, commit, device) so a figure can be traced to a command.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from bpd.config.common import SCHEMA
from bpd.locks import FileLock
from bpd.runtime import REPO_ROOT, Runtime, resolve_path


def git_sha() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the architecture, with the vector instructions
    PyTorch uses on it (``AVX512``, ``AVX2``; ``+AMX`` where the CPU has AMX tiles). Recorded because
    step-cost ratios depend on it: small multi-row matrix products are relatively dearer on some CPUs, so
    the same model's blockwise round costs a different number of greedy steps on another CPU
    (docs/benchmark.md). The instructions are part of the name because a virtual machine may report the
    same bare "Intel(R) Xeon(R) Processor" for two CPUs of different speeds."""
    name, flags = "", set()
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name") and not name:
                name = " ".join(line.split(":", 1)[1].split())
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = torch.backends.cpu.get_cpu_capability()
    isa = "" if isa in ("", "DEFAULT") else isa + ("+AMX" if "amx_tile" in flags else "")
    name = name or platform.processor() or platform.machine()
    return f"{name} ({isa})" if isa else name


def device_name(device: str | torch.device) -> str:
    d = torch.device(device)
    if d.type == "cuda":
        return torch.cuda.get_device_name(d)
    return f"cpu:{cpu_model()} x{torch.get_num_threads()} threads"


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])


def append_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Append rows to a JSON-lines file (one flush per call, so a crash loses at most this call), under the
    file's lock (two jobs appending at once) and always on a fresh line: a damaged line (a partial last
    line after a crash) is first moved to ``<file>.damaged`` and reported. An append the disk refuses is
    undone: the file is as before and the error raised. Each row says the cache schema its ids were made under
    (``schema``), so that a schema bump's renaming knows which rows it re-keys."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = "".join(json.dumps({**r, "schema": r.get("schema", SCHEMA)}, default=_jsonable) + "\n" for r in rows)
    with FileLock(path.with_name(path.name + ".lock")):
        repair_rows(path)
        size = path.stat().st_size if path.exists() else 0
        try:
            with open(path, "a") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            # A full disk took part of the rows: cut them off again (truncating needs no space), so the file
            # holds no partial run that a re-run would take for a finished one.
            if path.exists():
                os.truncate(path, size)
            raise


def repair_rows(path: Path) -> int:
    """Move the lines of a JSON-lines file that do not parse to ``<file>.damaged`` (appended, so nothing is
    lost), end the file with a newline, and return how many lines moved."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    data = path.read_bytes()
    good, bad = [], []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            json.loads(line)
            good.append(line)
        except ValueError:
            bad.append(line)
    if bad:
        with open(path.with_name(path.name + ".damaged"), "ab") as f:
            f.write(b"\n".join(bad) + b"\n")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"\n".join(good) + b"\n" if good else b"")
        os.replace(tmp, path)
        print(f"warning: {len(bad)} damaged line(s) of {path} moved to {path.name}.damaged (the other rows are kept)")
    elif not data.endswith(b"\n"):
        with open(path, "ab") as f:  # a complete last row without its newline: the next row starts afresh
            f.write(b"\n")
    return len(bad)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash: skip it, keep the rest
    return rows


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    return str(o)


class Tracker:
    """Thin W&B wrapper: offline unless told otherwise, a no-op when disabled or when wandb is missing."""

    def __init__(
        self,
        enabled: bool,
        project: str = "bpd",
        name: str | None = None,
        group: str | None = None,
        config: dict[str, Any] | None = None,
        mode: str | None = None,
        dir: str | Path | None = None,
        job_type: str | None = None,
    ) -> None:
        self.run = None
        if not enabled or os.environ.get("WANDB_MODE") == "disabled":
            return
        try:
            import wandb
        except ImportError:
            return
        Path(dir or REPO_ROOT / "outputs").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project,
            name=name,
            group=group,
            job_type=job_type,
            config=config or {},
            mode=mode or os.environ.get("WANDB_MODE", "offline"),
            dir=str(dir or REPO_ROOT / "outputs"),
            reinit="finish_previous",
        )

    def log(self, data: dict[str, Any], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(data, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(columns=columns, data=rows)})

    def histogram(self, key: str, values: list[float]) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Histogram(values)})

    def image(self, key: str, path: str | Path, caption: str = "") -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Image(str(path), caption=caption)})

    def summary(self, data: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(data)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def make_tracker(runtime: Runtime, name: str, job_type: str, extra: dict | None = None) -> Tracker:
    """A W&B run for one stage of the experiment (grouped by the experiment's name)."""
    lg = runtime.logger
    return Tracker(
        enabled=lg.enabled,
        project=lg.project,
        name=name,
        group=lg.group or runtime.experiment,
        config={"experiment": runtime.experiment, **(extra or {})},
        mode=lg.mode,
        dir=resolve_path(lg.dir),
        job_type=job_type,
    )
