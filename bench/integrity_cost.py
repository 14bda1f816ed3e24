"""What the open-time integrity checks cost (issue 84): the zip CRC check and sha256 of every shipped checkpoint
beside its ``torch.load``, and ``check_store`` on token stores (a copy of a given store, with the digests a store
built now records; and synthetic stores of given line counts).

    python bench/integrity_cost.py [--store PATH] [--lines 500000 4500000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bpd.data.store import INDEX_FILES, PairStore, check_store, write_store  # noqa: E402
from bpd.integrity import check_zip, file_digest  # noqa: E402


def best(fn: Callable[[], object], n: int = 7) -> tuple[float, float]:
    """The best and median of ``n`` timings, in ms."""
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return min(ts), sorted(ts)[n // 2]


def checkpoints() -> None:
    total = np.zeros(3)
    for pt in sorted((REPO / "checkpoints").glob("*.pt")):
        file_digest(pt)  # in the page cache, as after the first read
        costs = [best(partial(check_zip, pt))[0], best(partial(file_digest, pt))[0],
                 best(partial(torch.load, pt, map_location="cpu", weights_only=False), 3)[0]]
        total += costs
        print(f"{pt.name:28s} {pt.stat().st_size / 2**20:5.1f} MB  CRC {costs[0]:5.1f} ms  sha256 {costs[1]:5.1f} ms  "
              f"torch.load {costs[2]:5.1f} ms")
    print(f"all shipped: CRC {total[0]:.0f} ms, sha256 {total[1]:.0f} ms, torch.load {total[2]:.0f} ms")


def with_digests(store: Path, into: Path) -> Path:
    """A copy of ``store`` whose manifest records what ``_publish`` records now (sizes, index digests)."""
    copy = into / store.name
    shutil.copytree(store, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["files"] = {f.name: f.stat().st_size for f in sorted(copy.iterdir()) if f.name != "manifest.json"}
    m["index_sha256"] = {n: file_digest(copy / n) for n in INDEX_FILES}
    (copy / "manifest.json").write_text(json.dumps(m, indent=1))
    return copy


def store_cost(path: Path, label: str) -> None:
    m = json.loads((path / "manifest.json").read_text())
    b, med = best(lambda: check_store(path, m), 9)
    bare = best(lambda: PairStore(path, check=False))[0]
    print(f"{label}: {m['lines']} lines, {sum(f.stat().st_size for f in path.iterdir()) / 2**20:.0f} MB; "
          f"check_store best {b:.1f} ms, median {med:.1f} ms (open without it {bare:.2f} ms)")


def synthetic(lines: int, into: Path) -> Path:
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 29, size=lines)
    toks = rng.integers(3, 8000, size=int(lens.sum()), dtype=np.uint16)
    ends = np.concatenate([[0], np.cumsum(lens)])
    pairs = ((toks[ends[i]:ends[i + 1]],) * 2 for i in range(lines))
    return write_store(into / f"synthetic_{lines}.store", pairs, 8000, {}).path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, action="append", default=[], help="a built token store to measure a copy of")
    p.add_argument("--lines", type=int, nargs="*", default=[], help="synthetic stores of these line counts")
    args = p.parse_args()
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads")
    checkpoints()
    with tempfile.TemporaryDirectory() as tmp:
        for store in args.store:
            store_cost(store, f"{store.name} as built (sizes and ends only)")
            store_cost(with_digests(store, Path(tmp)), f"{store.name} with digests")
        for n in args.lines:
            store_cost(synthetic(n, Path(tmp)), "synthetic")


if __name__ == "__main__":
    main()
