"""One table from an evaluation run as chunks (``decode.first``, ``decode.n_examples``): ``make
reproduce-sr-photos`` decodes 1,024 photo test patches as eight chunks of 128, each its own run id and rows, so a
killed run resumes at its chunk; this pools each decoder's chunks into one row over all their examples.

Pooled as the figures are defined: k̂ is greedy's steps over the decoder's rounds summed over the chunks (a mean
per round, not per chunk), PSNR and pixel agreement are means per example (weighted by each chunk's examples).
Chunks must tile ``0 .. n`` without a gap or overlap; a chunk decoded twice counts once (its newest rows).

    python analysis/pool_chunks.py results/table2_photos/rows.jsonl --split photos:test
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

#: What names one pooled row: every chunk of it shares these.
GROUP = ("experiment", "setting", "split", "model", "decoder")
#: Means per example, pooled weighted by each chunk's examples.
PER_EXAMPLE = ("psnr", "pixel_agreement_with_greedy")


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def newest_per_chunk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (group, first example)'s newest row: a chunk redone replaces its earlier rows."""
    newest: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (*(r.get(c) for c in GROUP), r.get("first_example", 0))
        if key not in newest or str(r.get("time", "")) >= str(newest[key].get("time", "")):
            newest[key] = r
    return list(newest.values())


def pool(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One decoder's chunks as one row over all their examples; refused when the chunks leave a gap or overlap."""
    rows = sorted(rows, key=lambda r: r.get("first_example", 0))
    at = 0
    for r in rows:
        if r.get("first_example", 0) != at:
            raise ValueError(f"the chunks of {r['decoder']} ({r.get('setting')}) leave examples {at}.."
                             f"{r.get('first_example', 0) - 1} out or decode them twice: run the missing chunk.")
        at += r["n_examples"]
    n = at
    out: dict[str, Any] = {c: rows[0].get(c) for c in GROUP}
    out.update(n_examples=n, chunks=len(rows), k=rows[0].get("k"), criterion=rows[0].get("criterion"),
               criterion_param=rows[0].get("criterion_param"))
    for c in PER_EXAMPLE:
        if all(r.get(c) is not None for r in rows):
            out[c] = sum(r[c] * r["n_examples"] for r in rows) / n
    if all(r.get("iterations") for r in rows):
        out["mean_block_size"] = sum(r["greedy_iterations"] for r in rows) / sum(r["iterations"] for r in rows)
    return out


def pooled_rows(rows: list[dict[str, Any]], split: str | None = None, experiment: str | None = None
                ) -> list[dict[str, Any]]:
    """Every decoder's pooled row among ``rows`` (of ``split`` and ``experiment`` when given)."""
    keep = [r for r in rows if (split is None or r.get("split") == split)
            and (experiment is None or r.get("experiment") == experiment)]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in newest_per_chunk(keep):
        groups[tuple(r.get(c) for c in GROUP)].append(r)
    return [pool(g) for g in groups.values()]


def markdown(pooled: list[dict[str, Any]]) -> str:
    lines = ["| setting | decoder | examples (chunks) | k̂ | PSNR (dB) | pixels = greedy |", "|---|---|---|---|---|---|"]
    for r in sorted(pooled, key=lambda r: (str(r["setting"]), r["decoder"] not in ("greedy",), str(r["decoder"]))):
        kh = f"{r['mean_block_size']:.2f}" if r.get("mean_block_size") is not None else ""
        same = r.get("pixel_agreement_with_greedy")
        agree = f"{100 * same:.0f}%" if same is not None else ""
        lines.append(f"| {r['setting']} | {r['decoder']} | {r['n_examples']:,} ({r['chunks']}) | {kh} | "
                     f"{r.get('psnr', float('nan')):.2f} | {agree} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--split", default=None, help="only rows of this decode.split (e.g. photos:test)")
    ap.add_argument("--experiment", default=None)
    args = ap.parse_args()
    print(markdown(pooled_rows(read_rows(args.rows), args.split, args.experiment)))


if __name__ == "__main__":
    main()
