"""Evaluation runs read back from Weights & Biases into the frame of ``rows.jsonl``: one row per decoder.

An evaluation logs one W&B run (``bpd.evaluate.log_to_wandb``): its config holds what a sweep varies (setting,
trained k, head architecture, corpus, decode path, ks, criteria) and the columns every row of the run shares, its
summary ``<decoder>/<figure>`` for each decoder (quality, k̂, speedup and its interval, identical_to_greedy).
Offline runs (W&B's default here) keep both only inside their binary ``run-<id>.wandb`` file until ``wandb sync``;
``offline_runs`` reads that file with wandb's own record format (its protobuf messages, in leveldb-log blocks), so
what the dashboard will show is checked before anything is uploaded. ``synced_runs`` reads the same from W&B's
servers (``wandb.Api``). ``run_records`` gives the whole rows each run also keeps (summary ``rows``), which
``make figures WANDB_RUNS=outputs/wandb`` draws from instead of ``results/``.

    python analysis/wandb_runs.py outputs/wandb            # the offline evaluation runs, as rows
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

#: The header every W&B run file starts with (ident, magic 0xBEE1, version 0), and its record framing: 32 KiB
#: blocks of records, each with a 7-byte header (checksum, length, kind); a record longer than its block's space
#: is split into a first, middle and last piece.
HEADER = b":W&B\xe1\xbe\x00"
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class Run:
    """One W&B run as the dashboard shows it."""

    name: str
    group: str
    job_type: str
    config: dict[str, Any]
    summary: dict[str, Any]


def records(path: str | Path) -> Iterator[bytes]:
    """The serialized records of a W&B run file, in order."""
    data = Path(path).read_bytes()
    if not data.startswith(HEADER):
        raise ValueError(f"{path} is not a W&B run file (no W&B header); give a run-<id>.wandb file.")
    pos, pending = len(HEADER), b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos: pos + 7])
        body, pos = data[pos + 7: pos + 7 + length], pos + 7 + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            pending = body
        elif kind == MIDDLE:
            pending += body
        elif kind == LAST:
            yield pending + body
        else:  # zeros: the unwritten end of a file still being written
            return


def _put(into: dict[str, Any], item) -> None:
    """A config or summary update: ``key`` or the path ``nested_key``, a JSON value."""
    path = [item.key] if item.key else list(item.nested_key)
    node = into
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = json.loads(item.value_json)


def read_offline_run(path: str | Path) -> Run:
    """The name, group, job type, config and summary of an offline run file (the last value of each key)."""
    from wandb.proto import wandb_internal_pb2 as pb

    run = Run("", "", "", {}, {})
    for body in records(path):
        record = pb.Record()
        record.ParseFromString(body)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.name, run.group, run.job_type = r.display_name, r.run_group, r.job_type
            for item in r.config.update:
                _put(run.config, item)
        elif kind == "config":
            for item in record.config.update:
                _put(run.config, item)
        elif kind == "summary":
            for item in record.summary.update:
                _put(run.summary, item)
    run.config.pop("_wandb", None)
    return run


def offline_runs(wandb_dir: str | Path) -> list[Run]:
    """Every offline run under ``wandb_dir`` (``outputs/wandb`` by default: ``offline-run-*/run-*.wandb``)."""
    return [read_offline_run(p) for p in sorted(Path(wandb_dir).glob("**/offline-run-*/run-*.wandb"))]


def synced_runs(project: str, filters: dict[str, Any] | None = None) -> list[Run]:
    """The runs of a W&B project (``entity/project``) as its server holds them."""
    import wandb

    return [Run(r.name, r.group or "", r.job_type or "", dict(r.config), dict(r.summary))
            for r in wandb.Api().runs(project, filters=filters)]


def run_records(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """The whole rows the evaluation runs hold (summary ``rows``), as ``analysis.load.rows_frame`` takes them."""
    out = []
    for run in runs:
        if run.job_type == "evaluate":
            for row in (run.summary.get("rows") or {}).values():
                out.append({**row, "source_file": f"wandb:{run.name}", "is_bench": False, "is_study": False})
    return out


def run_rows(runs: Iterable[Run]) -> pd.DataFrame:
    """The evaluation runs as the dashboard shows them: per run and decoder, the run's config and the decoder's
    summary figures."""
    out = []
    for run in runs:
        if run.job_type != "evaluate":
            continue
        decoders = dict.fromkeys(k.split("/", 1)[0] for k in run.summary if "/" in k)
        for decoder in decoders:
            # (a logged table, such as samples/<decoder>, is a dict in the summary: not a figure)
            figures = {k.split("/", 1)[1]: v for k, v in run.summary.items()
                       if k.startswith(f"{decoder}/") and not isinstance(v, dict)}
            if figures:
                out.append({**run.config, "wandb_group": run.group, "decoder": decoder, **figures})
    return pd.DataFrame.from_records(out)


if __name__ == "__main__":
    frame = run_rows(offline_runs(sys.argv[1] if len(sys.argv) > 1 else "outputs/wandb"))
    print(frame.to_string() if len(frame) else "no offline evaluation runs there")
