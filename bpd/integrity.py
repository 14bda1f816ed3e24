"""Integrity of the files the harness writes and reads back: a digest to record when an artifact is written and
check when it is opened, an atomic write that never leaves a half-written file looking valid, and the two errors
those raise, each one sentence naming the file.

Torch-free, so that any layer (checkpoints, token stores, compiled-step caches, the report) can use it:

- ``file_digest(path)``: the sha256 of a file (hex), read in blocks.
- ``write_atomic(path, writer, size_hint=None)``: ``writer(tmp)`` writes a temporary file beside ``path``, which
  is then renamed over it; on any failure the temporary file is removed and ``path`` is as it was. A full disk
  (``OSError`` ENOSPC/EDQUOT, or torch's zip writer's ``RuntimeError`` "unexpected pos") becomes ``DiskFull``.
- ``check_zip(path, what)``: the CRC of every entry of a zip file (a torch checkpoint is one), before it is read.
- ``DamagedArtifact`` (a ``ValueError``): a file that fails its check; ``DiskFull`` (an ``OSError``, errno ENOSPC):
  where the disk filled and about how much space the write needs.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

#: The errors of a full disk or quota.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: What torch's zip writer (``inline_container.cc``) says when a write comes back short: the disk filled.
_TORCH_SHORT_WRITE = ("unexpected pos", "failed writing file")


class DamagedArtifact(ValueError):
    """A file the harness wrote that fails its check when opened (damaged bytes, cut short, another file)."""


class DiskFull(OSError):
    """A write the disk refused for want of space; ``strerror`` says how much is needed, ``filename`` where."""


def file_digest(path: str | os.PathLike, block: int = 1 << 20) -> str:
    """The sha256 of the file at ``path``, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def check_zip(path: str | os.PathLike, what: str = "file") -> None:
    """Raise ``DamagedArtifact`` unless every entry of the zip file ``path`` matches its recorded CRC (``torch.load``
    does not check them: damaged weights would load as NaNs). A file that is not a zip is left to its reader."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
        raise DamagedArtifact(f"the {what} {path} is damaged ({e})") from None
    if bad is not None:
        raise DamagedArtifact(f"the {what} {path} is damaged (its entry {bad} fails its CRC check)")


def is_disk_full(e: BaseException) -> bool:
    """Whether ``e`` is a full disk: an ``OSError`` ENOSPC/EDQUOT, or torch's writer's short write."""
    if isinstance(e, OSError):
        return e.errno in DISK_FULL_ERRNOS
    return isinstance(e, RuntimeError) and any(s in str(e) for s in _TORCH_SHORT_WRITE)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def disk_full(path: Path, need: int | None) -> DiskFull:
    """The ``DiskFull`` error of a write of about ``need`` bytes to ``path`` (None: unknown)."""
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    parts = [f"about {_mb(need)} needed" if need else None, f"{_mb(free)} free" if free is not None else None]
    said = ", ".join(p for p in parts if p)
    return DiskFull(errno.ENOSPC, f"No space left on device ({said})" if said else "No space left on device",
                    str(path))


def write_atomic(path: str | os.PathLike, writer: Callable[[Path], object], size_hint: int | None = None) -> Path:
    """Write ``path`` through ``writer(tmp)`` (``tmp``: a temporary file in the same folder) and rename it into
    place: readers see the old file or the new one, never half of one. On failure the temporary file is removed
    (freeing what it took) and ``path`` is left as it was; a full disk raises ``DiskFull`` saying where and about
    how much is needed (``size_hint`` bytes, else the size of the file it replaces, else what was written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        written = tmp.stat().st_size if tmp.exists() else 0
        tmp.unlink(missing_ok=True)
        if isinstance(e, Exception) and is_disk_full(e):
            old = path.stat().st_size if path.exists() else 0
            raise disk_full(path, size_hint or old or written) from e
        raise
    return path
