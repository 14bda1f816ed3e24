"""The folder every translation corpus is written as: ``{train,dev,test}.{src,tgt}``, one sentence a line, read
in one of two directions; ``bpd`` reads it the same way whichever corpus wrote it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

DIRECTIONS = ("en-de", "de-en")
SPLITS = ("train", "dev", "test")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write one line per item via a temp file + rename: readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line.replace("\n", " ") + "\n")
    os.replace(tmp, path)


def split_files(folder: Path) -> list[Path]:
    return [folder / f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]


def check_direction(direction: str) -> tuple[str, str]:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'en-de' or 'de-en', got {direction!r}")
    src, tgt = direction.split("-")
    return src, tgt


def count_lines(path: Path) -> int:
    """Number of lines of a text file (counts newlines in binary chunks: fast on WMT-sized files)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")
