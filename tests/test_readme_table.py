"""The README's demo table is the run it names, printed from its rows as the demo prints it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # analysis/ is not a package of the install: alone, this file needs the root
    sys.path.insert(0, str(REPO_ROOT))

from analysis import readme_table  # noqa: E402


def test_readme_table_matches_its_rows():
    text = readme_table.README.read_text(encoding="utf-8")
    assert readme_table.agrees(text), "run: python analysis/readme_table.py"


def test_block_is_rewritten_from_the_newest_run(tmp_path, monkeypatch):
    rows = tmp_path / "rows.jsonl"
    base = {"time": "2026-01-01T00:00:00", "device": "cpu", "command": "python experiments/run.py experiment=demo",
            "method": "greedy", "decoder": "greedy", "bleu": 1.0, "mean_block_size": 1.0, "identical_to_greedy": 1.0,
            "iterations": 10, "wallclock_s": 1.0, "speedup": 1.0}
    rows.write_text("\n".join(json.dumps({**base, "run_id": r, "bleu": b}) for r, b in (("a", 1.0), ("b", 2.5))) + "\n")
    monkeypatch.setattr(readme_table, "REPO_ROOT", tmp_path)
    readme = "intro\n<!-- demo-table: rows.jsonl -->\nstale\n<!-- /demo-table -->\nend\n"
    out = readme_table.updated(readme)
    assert "stale" not in out and out.startswith("intro\n") and out.endswith("<!-- /demo-table -->\nend\n")
    assert "Run `b`" in out and " 2.50 " in out and " 1.00 " not in out.split("Run `b`")[0]
    assert readme_table.updated(out) == out
    # The same run id redone later: only the later run's rows, labeled with its time.
    again = {**base, "run_id": "b", "bleu": 3.5, "time": "2026-01-02T09:30:00"}
    rows.write_text(rows.read_text() + json.dumps(again) + "\n")
    out = readme_table.updated(readme)
    assert "(2026-01-02 09:30, cpu)" in out and " 3.50 " in out and " 2.50 " not in out
    # A run appended after the one a block names (make demo on a user's machine) leaves the block's check
    # green; a block whose table no longer matches its run, or that names no run in the rows, fails it.
    assert readme_table.agrees(out)
    rows.write_text(rows.read_text() + json.dumps({**base, "run_id": "c", "time": "2026-01-03T10:00:00"}) + "\n")
    assert readme_table.agrees(out) and not readme_table.agrees(out.replace(" 3.50 ", " 3.60 "))
    assert not readme_table.agrees(out.replace("Run `b`", "Run `z`"))
    assert "Run `c`" in readme_table.updated(out)


def test_timing_study_verdicts():
    from analysis.timing_study import compare, verdict

    assert verdict(1.00, 1.08, None, 0.10)[1] == "ok"
    assert verdict(1.00, 1.30, "busy", 0.10)[1] == "flagged"
    assert verdict(1.00, 0.80, None, 0.10)[1] == "SILENT"
    quiet = [{"decoder": "greedy", "method": "greedy", "speedup": 1.0},
             {"decoder": "b4", "method": "blockwise", "speedup": 1.2}]
    busy = [{"decoder": "greedy", "method": "greedy", "speedup": 1.0},
            {"decoder": "b4", "method": "blockwise", "speedup": 1.5, "timing_note": "busy"}]
    (row,) = compare(quiet, busy, 0.10)
    assert row["decoder"] == "b4" and row["verdict"] == "flagged" and abs(row["rel"] - 0.25) < 1e-9
