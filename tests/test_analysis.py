"""The report layer (analysis/) on a small synthetic results folder: table values, files, missing inputs.

The synthetic rows have values chosen so that every cell can be checked by hand: the latest duplicate
wins, Table 1 cells equal the rows, differences are ours minus the paper's, and an empty folder yields a
report that names what to run instead of a crash.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from analysis import make_report  # noqa: E402
from analysis.load import PAPER_SOURCE, load_paper, load_rows, read_jsonl, result_files, table_setting  # noqa: E402
from analysis.tables import build_all, speedup_points  # noqa: E402

SETTINGS = {
    "regular": ("frozen", False),
    "distillation": ("frozen", True),
    "finetune": ("finetune", False),
    "both": ("finetune", True),
}


def mt_row(setting: str | None, k: int, bleu: float, block: float, *, training: str | None = None,
           distilled: bool | None = None, time: str = "2026-01-01T00:00:00", method: str = "blockwise",
           criterion: str | None = "exact", param: float | None = None, l: int | None = 1, n: int = 100,
           rates: list[float] | None = None, speedup: float = 1.0, experiment: str = "table1_small",
           split: str = "test") -> dict[str, Any]:
    tr, di = SETTINGS.get(setting or "", (training, distilled))
    return {
        "run_id": f"r-{setting}", "experiment": experiment, "task": "translation", "dataset": "ding_en_de",
        "split": split, "model": f"heads_k10_{setting}.pt", "model_preset": "tiny", "trained_k": 10,
        "heads_arch": "medusa", "identity_p1": True, "heads_training": training or tr,
        "heads_targets": "gold", "distilled": di if distilled is None else distilled, "setting": setting,
        "batch_size": 1, "dtype": "float32", "device": "cpu:test", "threads": 2, "seed": 0, "git_sha": "abc123",
        "command": f"python experiments/run.py experiment={experiment} setting={setting}", "time": time,
        "decoder": f"{method}_k{k}_{criterion}", "method": method, "k": k,
        "criterion": criterion if method == "blockwise" else None, "criterion_param": param,
        "min_block_size": l if method == "blockwise" else None, "beam_size": None, "n_examples": n,
        "mean_block_size": block, "identical_to_greedy": 1.0, "wallclock_s": 1.0 / speedup,
        "greedy_wallclock_s": 1.0, "speedup": speedup, "acceptance_rate_per_position": rates or [],
        "bleu": bleu,
    }


def sr_row(training: str, k: int, block: float, *, criterion: str | None = "exact", param: float | None = None,
           method: str = "blockwise", psnr: float = 20.0, rates: list[float] | None = None,
           speedup: float = 1.0, grid: str | None = None, agree: float = 0.9) -> dict[str, Any]:
    return {
        "run_id": f"sr-{training}", "experiment": "table2_small", "task": "image", "dataset": "faces_sr",
        "split": "test", "model": f"img_{training}.pt", "heads_training": training, "heads_targets": "gold",
        "distilled": False, "setting": "regular" if training == "frozen" else "finetune", "batch_size": 1,
        "device": "cpu:test", "git_sha": "def456", "command": f"python experiments/run.py experiment=table2_small "
        f"setting={training}", "time": "2026-01-02T00:00:00", "decoder": f"{method}_k{k}_{criterion}",
        "method": method, "k": k, "criterion": criterion if method == "blockwise" else None,
        "criterion_param": param, "min_block_size": 1 if method == "blockwise" else None, "n_examples": 16,
        "mean_block_size": block, "speedup": speedup, "psnr": psnr, "psnr_vs_greedy": 40.0,
        "pixel_agreement_with_greedy": agree, "acceptance_rate_per_position": rates or [], "grid_file": grid,
    }


def write_rows(path: Path, rows: list[dict[str, Any]], extra_lines: list[str] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in rows] + (extra_lines or [])
    path.write_text("\n".join(lines) + "\n")


def make_results(root: Path) -> Path:
    """A results folder with Table 1 (regular + both), top-n, minimum block size, SR and bench rows."""
    res = root / "results"
    mt = [
        mt_row("regular", 1, 10.0, 1.0, method="greedy"),
        mt_row("regular", 1, 10.0, 1.0),
        mt_row("regular", 2, 9.5, 1.4, speedup=1.1),
        mt_row("regular", 4, 9.0, 1.6, rates=[0.5, 0.4, 0.3], speedup=1.2),
        # setting not recorded: derived from finetune + distilled = both
        mt_row(None, 1, 11.0, 1.0, training="finetune", distilled=True),
        mt_row(None, 2, 10.5, 1.9, training="finetune", distilled=True, speedup=1.5),
        mt_row(None, 4, 10.0, 3.0, training="finetune", distilled=True, rates=[0.8, 0.7, 0.6], speedup=2.0,
               time="2026-01-05T00:00:00"),
        # an older run of the same configuration, later in the file: must lose to the newer one above
        mt_row(None, 4, 7.0, 2.0, training="finetune", distilled=True, speedup=0.5, time="2026-01-03T00:00:00"),
        # a newer re-run of regular k=2: must win
        mt_row("regular", 2, 9.6, 1.45, speedup=1.15, time="2026-01-04T00:00:00"),
        mt_row("both", 2, 10.2, 2.1, criterion="topk", param=2),
        mt_row("both", 4, 9.8, 3.3, criterion="topk", param=2),
        mt_row("both", 2, 8.0, 2.0, l=2),
        # our gentle recipe, newer than Both and as fine-tuned and distilled: its own rows, never the paper's column
        mt_row("both_gentle", 4, 12.0, 2.5, training="finetune", distilled=True, speedup=3.0,
               time="2026-01-06T00:00:00"),
        # not in Table 1: dev split, and another experiment (table1_small is preferred)
        mt_row("regular", 2, 99.0, 9.0, split="dev"),
        mt_row("finetune", 2, 55.0, 5.0, experiment="adhoc"),
    ]
    write_rows(res / "table1_small" / "rows.jsonl", mt, extra_lines=['{"run_id": "cut', "not json"])
    write_rows(res / "adhoc" / "rows.jsonl", [mt_row("finetune", 2, 55.0, 5.0, experiment="adhoc")])
    # A later re-run of the same experiment written to a side study (paths.results_dir=results/studies/<name>), on
    # another device: read, but not the sweep, so it must not replace the sweep's Both cell in the paper's tables.
    side = mt_row(None, 4, 77.0, 7.0, training="finetune", distilled=True, time="2026-01-09T00:00:00")
    write_rows(res / "studies" / "rerun_elsewhere" / "rows.jsonl", [{**side, "device": "cpu:other"}])
    # A study grouped one level deeper, in a folder named like the sweep, re-running a sweep cell on the same
    # device later: still a study (neither the sweep's folder nor a re-run that replaces its row).
    write_rows(res / "studies" / "levers" / "table1_small" / "rows.jsonl",
               [mt_row("regular", 2, 88.0, 8.0, time="2026-01-10T00:00:00")])

    grid = res / "table2_small" / "outputs" / "x" / "grid.png"
    grid.parent.mkdir(parents=True, exist_ok=True)
    import matplotlib.image

    matplotlib.image.imsave(grid, [[0.0, 0.5], [0.5, 1.0]], cmap="gray")
    rel_grid = str(grid.relative_to(root))
    sr = [
        sr_row("frozen", 1, 1.0, method="greedy", psnr=20.0),
        sr_row("frozen", 2, 1.1, agree=1.0),
        sr_row("frozen", 4, 1.2),
        sr_row("frozen", 2, 1.3, criterion="distance", param=2.0),
        sr_row("frozen", 4, 1.5, criterion="distance", param=2.0, psnr=19.5),
        sr_row("finetune", 1, 1.0, method="greedy", psnr=21.0),
        sr_row("finetune", 2, 1.6),
        sr_row("finetune", 4, 2.2),
        sr_row("finetune", 2, 2.0, criterion="distance", param=2.0),
        sr_row("finetune", 4, 3.5, criterion="distance", param=2.0, psnr=20.5, rates=[0.9, 0.8, 0.7], speedup=2.5,
               grid=rel_grid),
        {**sr_row("frozen", 0, 0.0, method="reference", psnr=15.0), "decoder": "nearest", "k": None},
        {**sr_row("frozen", 0, 0.0, method="reference", psnr=17.0), "decoder": "bicubic", "k": None},
    ]
    write_rows(res / "table2_small" / "rows.jsonl", sr)

    bench_common = {"experiment": "bench", "source_experiment": "demo", "task": "translation",
                    "dataset": "ding_en_de", "split": "test", "model": "m.pt", "heads_arch": "medusa",
                    "heads_training": "finetune", "device": "cpu:test", "dtype": "float32", "batch_size": 1,
                    "git_sha": "b1", "command": "python experiments/bench.py experiment=demo",
                    "time": "2026-01-06T00:00:00", "n_examples": 50, "t1_ms": 2.0, "peak_mem_mb": 300.0}
    bench = [
        {**bench_common, "decoder": "greedy", "method": "greedy", "k": 1, "mean_block_size": 1.0, "speedup": 1.0,
         "speedup_min": 1.0, "speedup_max": 1.0, "tk_ms": 2.0, "step_cost_ratio": 1.0, "ideal_speedup": 1.0,
         "efficiency": 1.0, "tokens_per_s": 100.0, "identical_to_greedy": 1.0},
        {**bench_common, "decoder": "blockwise_k4_exact", "method": "blockwise", "k": 4, "criterion": "exact",
         "min_block_size": 1, "mean_block_size": 2.5, "speedup": 1.8, "speedup_min": 1.7, "speedup_max": 1.9,
         "tk_ms": 2.5, "step_cost_ratio": 1.25, "ideal_speedup": 2.0, "efficiency": 0.9, "tokens_per_s": 180.0,
         "identical_to_greedy": 1.0, "acceptance_rate_per_position": [0.7, 0.6, 0.5], "efficiency_ceiling": 0.95},
        # The same configuration with a compiled decoder, run later: a separate row, not a re-run of the first.
        {**bench_common, "decoder": "blockwise_k4_exact", "method": "blockwise", "k": 4, "criterion": "exact",
         "min_block_size": 1, "mean_block_size": 2.5, "speedup": 0.9, "tk_ms": 2.5, "step_cost_ratio": 1.25,
         "ideal_speedup": 2.0, "efficiency": 0.45, "identical_to_greedy": 1.0, "compile": True,
         "time": "2026-01-07T00:00:00"},
        # Another experiment's model benchmarked on the same machine: its own Figure 4 line, not the demo's.
        {**bench_common, "source_experiment": "table1_small", "model": "t.pt", "decoder": "blockwise_k4_exact",
         "method": "blockwise", "k": 4, "criterion": "exact", "min_block_size": 1, "mean_block_size": 3.0,
         "speedup": 1.3, "tk_ms": 2.5, "identical_to_greedy": 1.0, "time": "2026-01-08T00:00:00",
         "heads_targets": "self"},
        # An earlier run of that model from before the bench recorded heads_targets: its line keeps the newest.
        {**bench_common, "source_experiment": "table1_small", "model": "t.pt", "decoder": "blockwise_k4_exact",
         "method": "blockwise", "k": 4, "criterion": "exact", "min_block_size": 1, "mean_block_size": 3.0,
         "speedup": 1.2, "tk_ms": 2.5, "identical_to_greedy": 1.0, "time": "2026-01-07T12:00:00"},
        # An older demo model on the same machine: the newer demo model's points alone make the demo's line.
        {**bench_common, "model": "old.pt", "decoder": "blockwise_k2_exact", "method": "blockwise", "k": 2,
         "criterion": "exact", "min_block_size": 1, "mean_block_size": 1.2, "speedup": 0.7, "tk_ms": 2.4,
         "identical_to_greedy": 1.0, "time": "2026-01-02T00:00:00"},
    ]
    write_rows(res / "bench" / "rows.jsonl", bench)
    # One run with a chain, a tree and a draft-model row (docs/beyond.md), and a chain-only run beside it.
    run = {"experiment": "demo", "run_id": "beyond-1", "time": "2026-01-11T00:00:00"}
    write_rows(res / "studies" / "beyond" / "rows.jsonl", [
        {**mt_row("regular", 4, 5.0, 1.7, speedup=1.0), **run},
        {**mt_row("regular", 4, 5.0, 2.2, speedup=0.7), **run, "method": "tree", "decoder": "tree_beam4_k4_exact",
         "tree": "beam4", "tree_nodes": 13},
        {**mt_row("regular", 4, 5.0, 2.6, speedup=1.2), **run, "method": "draft", "decoder": "draft_k4_exact"},
        {**mt_row("regular", 8, 5.0, 1.9, speedup=0.9), "experiment": "demo", "run_id": "chain-only"},
    ])
    return res


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Build the synthetic folder and run the CLI once; the tests below read its tables and files."""
    res = make_results(tmp_path_factory.mktemp("analysis"))
    # Its two malformed lines (test_reader_skips_malformed_lines_and_keeps_latest) are accepted and named.
    rc = make_report.main(["--results", str(res), "--out", str(res / "figures"), "--report", str(res / "REPORT.md"),
                           "--accept-damaged"])
    assert rc == 0
    rows = load_rows(res, accept_damaged=True)
    return res, rows, build_all(rows, load_paper())


def _cell(df: pd.DataFrame, **where: Any) -> pd.Series:
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    assert len(sel) == 1, f"expected one row for {where}, got {len(sel)}"
    return sel.iloc[0]


def test_paper_reference_csv() -> None:
    paper = load_paper()
    both8 = _cell(paper, table="table1", setting="both", k=8)
    assert both8["bleu"] == pytest.approx(26.11) and both8["mean_block_size"] == pytest.approx(4.69)
    assert _cell(paper, table="table2", setting="both", k=10)["mean_block_size"] == pytest.approx(6.79)
    assert _cell(paper, table="table4", k=8)["speedup"] == pytest.approx(3.31)
    assert _cell(paper, table="topn", k=10, criterion_param=3)["mean_block_size"] == pytest.approx(5.91)
    approx = _cell(paper, table="table2", setting="approximate", k=8)
    assert approx["criterion"] == "distance" and approx["criterion_param"] == 2
    peaks = paper[paper["table"] == "figure4_peak"].set_index("task")
    assert peaks.loc["translation", "speedup"] == 3.3 and peaks.loc["image", "mean_block_size"] == 5.3
    assert (paper["source"] == PAPER_SOURCE).all()
    t1 = paper[paper["table"] == "table1"]
    assert len(t1) == 22 and set(t1["setting"]) == {"regular", "distillation", "finetune", "both"}
    assert len(paper[paper["table"] == "table2"]) == 21 and len(paper[paper["table"] == "table4"]) == 6


def test_reader_skips_malformed_lines_and_keeps_latest(report) -> None:
    res, rows, _ = report
    assert len(read_jsonl(res / "table1_small" / "rows.jsonl")) == 15  # 2 malformed lines skipped
    assert "**Left out (2 damaged line(s), `--accept-damaged`):**" in (res / "REPORT.md").read_text()
    both4 = rows[(rows["experiment"] == "table1_small") & (rows["table_setting"] == "both") & (rows["k"] == 4)
                 & (rows["criterion"] == "exact") & ~rows["is_study"]]
    assert len(both4) == 1 and both4.iloc[0]["mean_block_size"] == 3.0  # newer run, earlier in the file
    reg2 = rows[(rows["task"] == "translation") & (rows["table_setting"] == "regular") & (rows["k"] == 2)
                & (rows["split"] == "test") & (rows["criterion"] == "exact")]
    # the sweep's newest run, and the study's later re-run of the same cell beside it (not in its place)
    assert sorted(reg2["bleu"]) == [9.6, 88.0] and list(reg2.loc[reg2["is_study"], "bleu"]) == [88.0]


def test_result_files_layout(report, tmp_path) -> None:
    """Sweeps and bench one level down, studies at any depth under studies/; nothing else nested is read."""
    res, rows, _ = report
    found = {f.relative_to(res).as_posix() for f in result_files(res)}
    assert found == {"table1_small/rows.jsonl", "adhoc/rows.jsonl", "table2_small/rows.jsonl", "bench/rows.jsonl",
                     "studies/rerun_elsewhere/rows.jsonl", "studies/levers/table1_small/rows.jsonl",
                     "studies/beyond/rows.jsonl"}
    other = tmp_path / "results"
    write_rows(other / "bench" / "ab_check" / "before.jsonl", [{"experiment": "bench", "t1_ms": 1.0}])
    write_rows(other / "demo" / "outputs" / "x" / "rows.jsonl", [{"experiment": "stray"}])
    write_rows(other / "studies" / "a" / "b" / "rows.jsonl", [{"experiment": "deep"}])
    for folder in ("scale", "train-step"):  # measurements, not decoding rows
        write_rows(other / folder / "rows.jsonl", [{"bench": folder}])
    assert [f.relative_to(other).as_posix() for f in result_files(other)] == ["studies/a/b/rows.jsonl"]
    studies = rows[rows["is_study"]]
    assert len(studies) == 6 and set(studies["source_file"].map(lambda f: Path(f).parts[-2])) == {
        "rerun_elsewhere", "table1_small", "beyond"}
    assert not rows.loc[~rows["is_study"], "source_file"].str.contains("studies").any()


def test_wandb_tables_hold_one_type_per_column() -> None:
    """A column mixing text and numbers (a dash among figures) becomes text: W&B refused such tables, and
    the report's W&B copy was skipped."""
    df = pd.DataFrame({"k_hat": [1.5, "—", None], "n": [1, 2, 3], "cell": [[1, 2], None, {"a": 1}]})
    out = make_report._wandb_frame(df)
    assert out["k_hat"].tolist() == ["1.5", "—", None] and out["n"].tolist() == [1, 2, 3]
    assert out["cell"].tolist() == ["[1, 2]", None, "{'a': 1}"]


def test_setting_derivation() -> None:
    assert table_setting({"task": "translation", "setting": None, "heads_training": "frozen",
                          "distilled": True}) == "distillation"
    assert table_setting({"task": "translation", "setting": "both-self", "heads_training": "finetune",
                          "distilled": False}) == "finetune"
    assert table_setting({"task": "translation", "setting": "both_gentle", "heads_training": "finetune",
                          "distilled": True}) == "both_gentle"
    assert table_setting({"task": "image", "heads_training": "frozen", "criterion": "distance"}) == "approximate"
    assert table_setting({"task": "image", "heads_training": "finetune", "criterion": "distance"}) == "both"
    assert table_setting({"task": "image", "heads_training": "finetune", "criterion": None}) == "finetune"


def test_table1_values(report) -> None:
    _, _, t = report
    d = t["table1"].data
    reg2 = _cell(d, setting="regular", k=2)
    assert reg2["bleu_ours"] == 9.6 and reg2["block_ours"] == 1.45
    assert reg2["bleu_diff"] == pytest.approx(9.6 - 25.81) and reg2["block_diff"] == pytest.approx(1.45 - 1.51)
    both4 = _cell(d, setting="both", k=4)
    assert both4["bleu_ours"] == 10.0 and both4["block_ours"] == 3.0
    assert both4["block_diff"] == pytest.approx(3.0 - 3.27)
    assert _cell(d, setting="regular", k=1)["block_ours"] == 1.0
    gentle = _cell(d, setting="both_gentle", k=4)  # a row of its own, after the paper's settings, no paper value
    assert gentle["bleu_ours"] == 12.0 and math.isnan(gentle["bleu_paper"]) and math.isnan(gentle["block_diff"])
    assert list(d["setting"].drop_duplicates()) == ["regular", "distillation", "finetune", "both", "both_gentle"]
    # cells we have no rows for keep the paper's value and leave ours empty
    both8 = _cell(d, setting="both", k=8)
    assert math.isnan(both8["bleu_ours"]) and both8["bleu_paper"] == 26.11 and math.isnan(both8["bleu_diff"])
    assert d["setting"].isin(["finetune"]).sum() == 5 and d.loc[d["setting"] == "finetune", "bleu_ours"].isna().all()
    assert t["table1"].missing is None
    assert set(t["table1"].source["experiment"]) == {"table1_small"}
    assert not t["table1"].source["is_study"].any()  # studies are read but stay out of the paper's tables
    for key in ("topn", "min_block", "table4", "acceptance"):
        assert not t[key].source.get("is_study", pd.Series(dtype=bool)).fillna(False).astype(bool).any(), key


def test_topn_and_min_block(report) -> None:
    _, _, t = report
    top = _cell(t["topn"].data, setting="both", k=2, n=2)
    assert top["bleu_ours"] == 10.2 and top["dbleu_ours"] == pytest.approx(10.2 - 10.5)
    assert top["dblock_ours"] == pytest.approx(2.1 - 1.9)
    assert top["dbleu_paper"] == pytest.approx(26.49 - 26.58) and top["bleu_diff"] == pytest.approx(10.2 - 26.49)
    mb = _cell(t["min_block"].data, setting="both", k=2, l=2)
    assert mb["dbleu_ours"] == pytest.approx(8.0 - 10.5) and mb["dblock_ours"] == pytest.approx(2.0 - 1.9)


def test_table2_and_references(report) -> None:
    _, _, t = report
    d = t["table2"].data
    both4 = _cell(d, setting="both", k=4)
    assert both4["block_ours"] == 3.5 and both4["psnr"] == 20.5
    assert both4["block_diff"] == pytest.approx(3.5 - 3.75)
    assert _cell(d, setting="approximate", k=2)["block_ours"] == 1.3
    assert _cell(d, setting="regular", k=4)["block_ours"] == 1.2
    # Outputs identical to greedy's are reported as such, not as the capped PSNR against greedy.
    assert _cell(d, setting="regular", k=2)["psnr_vs_greedy"] == "identical"
    assert _cell(d, setting="regular", k=4)["psnr_vs_greedy"] == 40.0
    assert _cell(d, setting="finetune", k=2)["block_ours"] == 1.6
    assert _cell(d, setting="regular", k=1)["psnr"] == 20.0  # greedy stands in for k = 1
    ref = t["sr_reference"].data.set_index("decoder")["psnr"]
    assert ref["bicubic"] == 17.0 and ref["nearest"] == 15.0 and ref["greedy (finetune)"] == 21.0


def test_table4_figure4_acceptance_bench(report) -> None:
    _, rows, t = report
    t4 = t["table4"].data
    assert set(t4["setting"].dropna()) == {"both"}  # largest k̂ at the largest k we have (4)
    row = _cell(t4, k=4)
    assert row["speedup_ours"] == 2.0 and row["speedup_diff"] == pytest.approx(2.0 - 2.69)
    assert row["bleu_diff"] == pytest.approx(10.0 - 28.54)
    f4 = t["figure4"].data.set_index("task")
    assert f4.loc["translation", "speedup_ours"] == 2.0 and f4.loc["translation", "speedup_paper"] == 3.3
    assert f4.loc["image", "speedup_ours"] == 2.5 and f4.loc["image", "k_paper"] == 6
    acc = t["acceptance"].data
    both = acc[(acc["task"] == "translation") & (acc["setting"] == "both")].sort_values("head")
    assert list(both["head"]) == [2, 3, 4] and list(both["rate"]) == [0.8, 0.7, 0.6]
    img = acc[(acc["task"] == "image") & (acc["setting"] == "both")]
    assert list(img["rate"]) == [0.9, 0.8, 0.7]
    bench = t["bench"].data
    assert len(bench) == 6 and t["bench"].missing is None
    pts = speedup_points(rows)
    lines = pts[pts["series"].str.startswith("bench")].groupby("series")["speedup"].apply(list).to_dict()
    assert lines == {"bench demo medusa exact": [1.8], "bench table1_small medusa exact": [1.3]}
    eager = _cell(bench, k=4, compile=False, source_experiment="demo")
    assert eager["efficiency"] == 0.9 and eager["efficiency_ceiling"] == 0.95  # rows without the field ran eagerly
    assert _cell(bench, k=4, compile=True, source_experiment="demo")["efficiency"] == 0.45


def test_beyond_table_sets_new_decoders_beside_their_runs_chain(report) -> None:
    """The tree and draft rows with the chain row of the same run; a run without them stays out."""
    res, _, t = report
    d = t["beyond"].data
    assert list(d["decoder"]) == ["blockwise_k4_exact", "tree_beam4_k4_exact", "draft_k4_exact"]
    assert list(d["mean_block_size"]) == [1.7, 2.2, 2.6] and d["tree_nodes"].iloc[1] == 13
    assert set(d["study"]) == {"beyond"} and set(d["timing"]) == {"evaluation run"}
    assert set(d["run"]) == {"2026-01-11 00:00"}  # which run each row is from: a folder may hold reruns
    assert (res / "figures" / "beyond_speedup_vs_block.png").stat().st_size > 1000
    assert "every row's output is greedy's" in t["beyond"].notes[0]


def test_beyond_note_names_rows_that_differ_from_greedy() -> None:
    """The identity claim under the table holds only when every row has it; otherwise the note names them."""
    from analysis.extra_tables import _identity_note

    def rows(ident: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"source_file": ["results/studies/b/bench_bf16/rows.jsonl"] * len(ident),
                             "identical_to_greedy": ident, "dtype": ["bfloat16"] * len(ident)})

    assert "every row's output is greedy's" in _identity_note(rows([1.0, 1.0]))
    note = _identity_note(rows([1.0, 0.96, 0.99]))
    assert "every row's output" not in note
    assert "except 2 of b/bench_bf16 (bfloat16; 96%–99%" in note


def test_files_and_report(report) -> None:
    res, _, _ = report
    figs = res / "figures"
    for stem in ("table1_bleu_vs_block", "table2_block_vs_k", "figure4_speedup_vs_block", "acceptance_per_position"):
        for ext in ("png", "pdf"):
            p = figs / f"{stem}.{ext}"
            assert p.is_file() and p.stat().st_size > 1000, p
    assert (figs / "sr_sample_grid.png").is_file()
    md = (res / "REPORT.md").read_text()
    assert "reference values copied from the paper" in md
    for title in ("Table 1 analog", "Top-n acceptance", "Minimum block size", "Table 2 analog", "Figure 4 analog",
                  "Table 4 analog", "Per-position acceptance", "Wall-clock benchmark"):
        assert f"## {title}" in md
    assert "](figures/table1_bleu_vs_block.png)" in md and "](figures/sr_sample_grid.png)" in md
    assert "| regular | 2 | 9.60 | 25.81 | -16.21 | 1.45 | 1.51 | -0.06 |" in md
    assert "python experiments/run.py experiment=table1_small setting=regular" in md
    assert "`abc123`" in md and "`cpu:test`" in md
    assert "**Missing" not in md  # every table has rows here
    inputs = md.split("## Inputs", 1)[1]
    assert "studies/levers/table1_small/rows.jsonl`" in inputs and "studies/rerun_elsewhere/rows.jsonl`" in inputs
    assert "88.00" not in md and "77.00" not in md  # the studies' BLEU appears in no table


def test_empty_results_report_says_what_is_missing(tmp_path, monkeypatch) -> None:
    """An empty results folder (with --wandb, W&B disabled) gives a report naming what to run, not a crash."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    res = tmp_path / "results"
    res.mkdir()
    rc = make_report.main(["--results", str(res), "--out", str(res / "figures"), "--report", str(res / "REPORT.md"),
                           "--wandb"])
    assert rc == 0
    md = (res / "REPORT.md").read_text()
    assert "no rows yet for Table 1" in md and "make reproduce-mt-small" in md
    assert "no rows yet for Table 2" in md and "make reproduce-sr-small" in md
    assert "no benchmark rows yet: run `make bench`" in md
    assert "| both | 8 | — | 26.11 | — | — | 4.69 |" in md  # the paper's cell, ours empty
    assert (res / "figures" / "table1_bleu_vs_block.png").is_file()


def test_bench_brackets_show_the_paired_interval_where_a_row_has_one() -> None:
    """The report's bracket is the 95% interval that docs/benchmark.md quotes, not the spread over repeats;
    rows from before the interval existed keep their [min, max]."""
    bench = pd.DataFrame([
        {"speedup_ci_low": 1.2808, "speedup_ci_high": 1.3061, "speedup_min": 1.2882, "speedup_max": 1.2984},
        {"speedup_ci_low": math.nan, "speedup_ci_high": math.nan, "speedup_min": 0.93, "speedup_max": 1.30},
        {"speedup_ci_low": math.nan, "speedup_ci_high": math.nan, "speedup_min": math.nan, "speedup_max": math.nan},
    ])
    assert make_report.speedup_intervals(bench) == ["[1.28, 1.31]", "[0.93, 1.30]", "—"]


def _bench_k4_row(**fields: object) -> dict[str, object]:
    """One batch-1 exact k = 4 bench row of a table1_small model, with ``fields`` set on top."""
    return {"experiment": "bench", "source_experiment": "table1_small", "task": "translation", "split": "test",
            "device": "cpu:test", "dtype": "float32", "batch_size": 1, "t1_ms": 2.0, "decoder": "blockwise_k4_exact",
            "method": "blockwise", "k": 4, "criterion": "exact", "min_block_size": 1, "identical_to_greedy": 1.0,
            **fields}


def test_tied_heads_are_their_own_architecture_in_tables_and_figure(tmp_path) -> None:
    """A tied-slot model benchmarked after an untied one of the same architecture gets its own Figure 4 line
    and bench-table label; before rows carried the mark it replaced the untied line and read as untied."""
    common = _bench_k4_row(heads_arch="recurrent", mean_block_size=2.2)
    write_rows(tmp_path / "bench" / "rows.jsonl", [
        {**common, "model": "untied.pt", "speedup": 1.0, "time": "2026-01-01T00:00:00"},
        {**common, "model": "tied.pt", "heads_tied": True, "speedup": 1.1, "time": "2026-01-02T00:00:00"},
    ])
    rows = load_rows(tmp_path)
    pts = speedup_points(rows)
    assert pts.set_index("series")["speedup"].to_dict() == {
        "bench table1_small recurrent exact": 1.0, "bench table1_small recurrent tied exact": 1.1}
    assert sorted(build_all(rows, load_paper())["bench"].data["heads_arch"]) == ["recurrent", "recurrent tied"]


def test_int8_proposal_runs_are_their_own_line(tmp_path) -> None:
    """An int8-chain bench run of a model, made after its float run, keeps both lines (labelled), as tied slots do."""
    common = _bench_k4_row(heads_arch="attend", mean_block_size=2.0, model="m.pt")
    write_rows(tmp_path / "bench" / "rows.jsonl", [
        {**common, "speedup": 1.0, "time": "2026-01-01T00:00:00"},
        {**common, "proposal_precision": "float32", "speedup": 0.98, "time": "2026-01-02T00:00:00"},
        {**common, "proposal_precision": "int8", "speedup": 1.04, "time": "2026-01-03T00:00:00"},
    ])
    rows = load_rows(tmp_path)
    assert speedup_points(rows).set_index("series")["speedup"].to_dict() == {
        "bench table1_small attend exact": 0.98, "bench table1_small attend int8 exact": 1.04}


def test_a_narrower_decode_proposal_vocabulary_is_its_own_line(tmp_path) -> None:
    """A later bench run of a model proposing among fewer tokens than it usually does neither replaces its usual
    run nor reads as it; rows from before the field existed stay with the usual line."""
    common = _bench_k4_row(heads_arch="attend", mean_block_size=2.0, model="m.pt")
    write_rows(tmp_path / "bench" / "rows.jsonl", [
        {**common, "speedup": 1.0, "time": "2026-01-01T00:00:00"},
        {**common, "proposal_vocab": 4000, "speedup": 1.2, "time": "2026-01-02T00:00:00"},
        {**common, "proposal_vocab": 4000, "speedup": 1.3, "time": "2026-01-03T00:00:00"},
        {**common, "proposal_vocab": 2000, "speedup": 1.1, "time": "2026-01-04T00:00:00"},
    ])
    rows = load_rows(tmp_path)
    assert speedup_points(rows).set_index("series")["speedup"].to_dict() == {
        "bench table1_small attend exact": 1.3, "bench table1_small attend vocab 2000 exact": 1.1}


def test_bench_table_tells_the_same_heads_trained_longer_apart(tmp_path) -> None:
    """Two bench runs of one architecture whose heads trained for different step budgets are two models; the
    report's bench table shows each row's head steps, so they do not read as a repeat of one configuration."""
    common = _bench_k4_row(heads_arch="attend")
    write_rows(tmp_path / "bench" / "rows.jsonl", [
        {**common, "model": "long.pt", "train_steps": 2400, "mean_block_size": 2.4, "speedup": 1.1,
         "time": "2026-01-02T00:00:00"},
        {**common, "model": "short.pt", "train_steps": 1200, "mean_block_size": 2.3, "speedup": 1.0,
         "time": "2026-01-01T00:00:00"},
    ])
    data = build_all(load_rows(tmp_path), load_paper())["bench"].data
    assert data["train_steps"].tolist() == [1200, 2400]
    md = make_report.bench_md(data)
    assert "| head steps |" in md and "| 1200 |" in md and "| 2400 |" in md


def test_figure4_draws_each_settings_newest_model_and_each_model_once(tmp_path) -> None:
    """A Table 1 regular model benchmarked after a Both model of the same architecture gets its own Figure 4
    line instead of replacing the Both line; an older row of the Both model that did not record its setting
    joins that model's line rather than drawing it twice."""
    common = _bench_k4_row(heads_arch="recurrent", mean_block_size=2.2)
    write_rows(tmp_path / "bench" / "rows.jsonl", [
        {**common, "model": "both.pt", "speedup": 1.1, "time": "2026-01-01T00:00:00"},
        {**common, "model": "both.pt", "setting": "both", "speedup": 1.2, "time": "2026-01-02T00:00:00"},
        {**common, "model": "regular.pt", "setting": "regular", "speedup": 0.8, "time": "2026-01-03T00:00:00"},
    ])
    pts = speedup_points(load_rows(tmp_path))
    assert pts.set_index("series")["speedup"].to_dict() == {
        "bench table1_small both recurrent exact": 1.2, "bench table1_small regular recurrent exact": 0.8}


def test_speedups_timed_on_a_busy_machine_are_left_out_of_figure4(tmp_path) -> None:
    """A row whose timing saw other processes take the decoder's cores (timing_busy) is no Figure 4 point; the
    same configuration timed quietly is, and rows from before the flag count as quiet."""
    write_rows(tmp_path / "table1_small" / "rows.jsonl", [
        mt_row("both", 2, 10.0, 1.5, speedup=1.2),
        {**mt_row("both", 4, 10.0, 1.15, speedup=1.68), "timing_busy": True, "timing_note": "busy"},
    ])
    pts = speedup_points(load_rows(tmp_path))
    assert list(pts["k"]) == [2] and list(pts["speedup"]) == [1.2]


def test_table1_shows_the_main_corpus_beside_the_small_one(tmp_path) -> None:
    """With a Debian-corpus sweep (table1_debian) the main Table 1 is that sweep, with its BLEU on the ding test
    (decode.split=ding:test) and the ding sweep (table1_small) beside it; without one, the ding sweep alone."""
    res = tmp_path / "results"
    debian = dict(experiment="table1_debian")
    write_rows(res / "table1_debian" / "rows.jsonl", [
        {**mt_row("regular", 2, 20.0, 1.4, **debian), "dataset": "debian_en_de"},
        {**mt_row("both", 8, 19.0, 3.6, **debian), "dataset": "debian_en_de"},
        {**mt_row("regular", 2, 6.5, 1.3, split="ding:test", **debian), "dataset": "debian_en_de"},
    ])
    write_rows(res / "table1_small" / "rows.jsonl", [mt_row("regular", 2, 5.5, 1.5), mt_row("finetune", 4, 2.4, 2.0),
                                                     mt_row("both", 8, 2.0, 2.5), mt_row("both", 8, 1.5, 3.0,
                                                                                         criterion="topk", param=2)])
    tables = build_all(load_rows(res), load_paper())
    t = tables["table1"]
    # The Debian sweep has no top-n rows yet: that table comes from the ding sweep, against its own exact cells.
    topn = _cell(tables["topn"].data, setting="both", k=8, n=2)
    assert (topn["bleu_ours"], topn["dbleu_ours"]) == (1.5, pytest.approx(1.5 - 2.0))
    assert set(tables["topn"].source["experiment"]) == {"table1_small"} and tables["topn"].missing is None
    reg2 = _cell(t.data, setting="regular", k=2)
    assert (reg2["bleu_ours"], reg2["block_ours"], reg2["bleu_ood"]) == (20.0, 1.4, 6.5)
    assert (reg2["bleu_small"], reg2["block_small"]) == (5.5, 1.5)
    assert reg2["bleu_diff"] == pytest.approx(20.0 - 25.81)
    both8 = _cell(t.data, setting="both", k=8)
    assert both8["block_ours"] == 3.6 and math.isnan(both8["bleu_ood"]) and both8["bleu_small"] == 2.0
    fine4 = _cell(t.data, setting="finetune", k=4)  # a ding cell without a Debian one: shown, ours empty
    assert fine4["bleu_small"] == 2.4 and math.isnan(fine4["bleu_ours"])
    assert set(t.source["split"]) == {"test", "ding:test"} and set(t.source["experiment"]) == {
        "table1_debian", "table1_small"}
    assert any("ding:test" in n for n in t.notes)

    write_rows(tmp_path / "ding_only" / "table1_small" / "rows.jsonl", [mt_row("regular", 2, 5.5, 1.5)])
    only_ding = build_all(load_rows(tmp_path / "ding_only"), load_paper())["table1"]
    assert "bleu_small" not in only_ding.data.columns and set(only_ding.source["experiment"]) == {"table1_small"}


def test_learning_curves_of_the_shipped_bases_are_drawn_and_listed(tmp_path) -> None:
    """The report draws every shipped translation base's dev BLEU curve (from its manifest) on one plot and
    lists each one's last and best point; a manifest without a curve (or without BLEU) adds nothing."""
    from analysis.load import load_learning_curves

    shipped = tmp_path / "checkpoints"
    shipped.mkdir()
    curve = [{"step": 1000, "dev/bleu": 2.5}, {"step": 2000, "dev/bleu": 14.0}, {"step": 3000, "dev/bleu": 13.0}]
    (shipped / "big_base.json").write_text(json.dumps({"task": "big", "role": "base", "learning_curve": curve}))
    (shipped / "small_base.json").write_text(json.dumps(
        {"task": "small", "role": "base", "learning_curve": [{"step": 500, "dev/bleu": 1.0}]}))
    (shipped / "images.json").write_text(json.dumps({"task": "sr", "learning_curve": [{"step": 1, "dev/psnr": 20}]}))
    curves = load_learning_curves(shipped)
    assert sorted(set(curves["checkpoint"])) == ["big_base", "small_base"] and len(curves) == 4
    res = tmp_path / "results"
    res.mkdir()
    rc = make_report.main(["--results", str(res), "--out", str(res / "figures"), "--report", str(res / "REPORT.md"),
                           "--shipped", str(shipped)])
    assert rc == 0
    assert (res / "figures" / "learning_curves.png").stat().st_size > 1000
    md = (res / "REPORT.md").read_text()
    assert "- `big_base`: 13.00 at step 3,000 (best 14.00 at 2,000)" in md
    assert "- `small_base`: 1.00 at step 500 (best 1.00 at 500)" in md and "](figures/learning_curves.png)" in md


def test_report_opens_with_the_three_claims_computed_from_the_rows(report) -> None:
    """The first screen (40 lines) holds the paper's three claims, each with our figure picked from the tables by
    the rule its line states, the paper's beside it, and a scale caveat written from what the rows are."""
    from analysis import summary

    res, _, tables = report
    head = "\n".join((res / "REPORT.md").read_text().splitlines()[:40])
    assert "## Summary: the paper's three claims" in head
    for claim in ("**1. Fewer iterations, no loss in quality**", "**2. More iterations, a small loss**",
                  "**3. Wall-clock speedup**", "**What our rows are.**"):
        assert claim in head
    t1 = tables["table1"].data
    frozen = t1[t1["setting"].isin(summary.FROZEN)]
    best = frozen.loc[frozen["block_ours"].idxmax()]
    assert f"k̂ **{best['block_ours']:.2f}** ({best['setting']}, k = {int(best['k'])}" in head
    assert "k̂ **1.91** (distillation, k = 8; BLEU 26.25" in head  # the paper's, by the same rule
    assert "ding_en_de, base preset tiny" in head and "small models, minutes of training" not in head


def test_hardware_names_the_instruction_set_and_threads() -> None:
    from analysis.summary import hardware

    assert hardware("cpu:Intel(R) Xeon(R) Processor (AVX512+AMX) x2 threads") == "CPU (AVX512+AMX), 2 threads"
    assert hardware("cpu:AMD EPYC (AVX2) x1 threads") == "CPU (AVX2), 1 thread"
    assert hardware("cpu:Intel(R) Xeon(R) Processor x2 threads") == "CPU, 2 threads"
    assert hardware("cuda:NVIDIA H200") == "`cuda:NVIDIA H200`" and hardware(None) == "device not recorded"


def test_committed_report_is_the_committed_rows(tmp_path):
    """results/REPORT.md is what `make figures RECORD=1` makes from the rows committed beside it (only the time it
    was generated may differ): rows committed without their report make this fail."""
    import re

    rc = make_report.main(["--out", str(tmp_path / "figures"), "--report", str(tmp_path / "REPORT.md")])
    assert rc == 0

    def timeless(text: str) -> str:
        return re.sub(r"^Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "Generated ", text, flags=re.M)

    fresh = timeless((tmp_path / "REPORT.md").read_text(encoding="utf-8"))
    committed = timeless((REPO_ROOT / "results" / "REPORT.md").read_text(encoding="utf-8"))
    assert fresh == committed, "results/REPORT.md is stale against results/**/rows.jsonl: run make figures RECORD=1"
