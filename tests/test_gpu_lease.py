"""bench/gpu_lease.sh, dry-run on a CPU: a GPU lease is minutes long, so its script must not fail on plumbing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_lease_trains_heads_evaluates_them_and_packs_them(tmp_path):
    """HEADS trains a heads model per setting (here the ding demo's, 2 steps, on the CPU), evaluates it, and the
    tar that comes back holds the model in ship/ and its evaluation rows in rows/."""
    env = {**os.environ, "DEVICE": "cpu", "MODELS": "", "BENCH": "0", "HEADS": "finetune", "HEADS_EXPERIMENT": "demo",
           "HEADS_STEPS": "2", "EVAL_N": "3", "TRAIN_SECONDS": "400", "TOTAL_SECONDS": "600",
           "HEADS_EXTRA": "threads=1 heads_train.eval_every=1000 decode.ks=[2] decode.timing_repeats=1",
           "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(["bash", "bench/gpu_lease.sh"], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parts = sorted((tmp_path / "out").glob("lease.tar.part-*"))
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        names = tar.getnames()
        shipped = [n for n in names if n.startswith("./ship/heads_") and n.endswith(".pt")]
        rows = [json.loads(line) for n in names if n.startswith("./rows/") and n.endswith("rows.jsonl")
                for line in tar.extractfile(n).read().decode().splitlines()]
    assert len(shipped) == 1, names
    assert {r["method"] for r in rows} >= {"greedy", "blockwise"}, rows[:2]
    assert all(r["n_examples"] == 3 for r in rows)
