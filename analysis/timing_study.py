"""Two runs of one command, on a quiet and on a busy machine: is every busy speedup within a tolerance of the
quiet one, or flagged?

``python analysis/timing_study.py QUIET_ROWS BUSY_ROWS [--tolerance 0.10]`` prints one line per decoder of the
newest run in each file: both speedups, their relative difference, the busy row's ``timing_note`` and a verdict
(``ok``: within the tolerance; ``flagged``: outside it but marked unreliable, as the issue asks; ``SILENT``:
outside it and printed as a clean number). It exits 1 when any row is SILENT.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from analysis.readme_table import newest_run  # noqa: E402
from bpd.config.methods import Role, role_of  # noqa: E402


def verdict(quiet: float, busy: float, note: str | None, tolerance: float) -> tuple[float, str]:
    rel = busy / quiet - 1
    if abs(rel) <= tolerance:
        return rel, "ok"
    return rel, "flagged" if note else "SILENT"


def compare(quiet_rows: list[dict[str, Any]], busy_rows: list[dict[str, Any]], tolerance: float) -> list[dict]:
    quiet = {r["decoder"]: r for r in quiet_rows}
    out = []
    for b in busy_rows:
        q = quiet.get(b["decoder"])
        # greedy is every speedup's reference, and rows of no decoding method (upsampling baselines) have none
        if q is None or role_of(b.get("method")) in (None, Role.REFERENCE) or b.get("speedup") is None:
            continue
        rel, v = verdict(q["speedup"], b["speedup"], b.get("timing_note"), tolerance)
        out.append({"decoder": b["decoder"], "quiet": q["speedup"], "quiet_note": q.get("timing_note"),
                    "busy": b["speedup"], "busy_note": b.get("timing_note"), "rel": rel, "verdict": v})
    return out


def load_line(rows: list[dict[str, Any]]) -> str:
    r = next((r for r in rows if r.get("load_self_cores") is not None), rows[0])
    return (f"other processes {r.get('load_other_cores')} cores, this one {r.get('load_self_cores')}, "
            f"load average {r.get('loadavg_1m')}, {r.get('device')}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("quiet", type=Path)
    p.add_argument("busy", type=Path)
    p.add_argument("--tolerance", type=float, default=0.10)
    args = p.parse_args(argv)
    q, b = newest_run(args.quiet), newest_run(args.busy)
    print(f"quiet: {args.quiet} run {q[0]['run_id']}: {load_line(q)}")
    print(f"busy:  {args.busy} run {b[0]['run_id']}: {load_line(b)}")
    print(f"{'decoder':<28} {'quiet':>7} {'busy':>7} {'diff':>7}  verdict  busy note")
    rows = compare(q, b, args.tolerance)
    for r in rows:
        print(f"{r['decoder']:<28} {r['quiet']:6.2f}x {r['busy']:6.2f}x {r['rel']:+6.1%}  {r['verdict']:<8} "
              f"{r['busy_note'] or ''}")
    silent = sum(r["verdict"] == "SILENT" for r in rows)
    print(f"{len(rows)} speedups: {sum(r['verdict'] == 'ok' for r in rows)} within {args.tolerance:.0%}, "
          f"{sum(r['verdict'] == 'flagged' for r in rows)} outside and flagged, {silent} outside and unflagged")
    return 1 if silent else 0


if __name__ == "__main__":
    raise SystemExit(main())
