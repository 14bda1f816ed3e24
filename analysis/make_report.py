"""`make figures`: rebuild the paper's tables and figures from ``results/`` and write ``results/REPORT.md``.

    python analysis/make_report.py                                   # results/ -> results/figures, REPORT.md
    python analysis/make_report.py --results R --out R/figures --report R/REPORT.md --wandb

Reads only the JSON-lines rows under ``--results`` and ``analysis/paper_reference.csv`` (no torch, no
models), so it runs offline in seconds on any machine holding the result files. Missing inputs are reported
per table with the command that produces them; they never stop the report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from analysis import figures, peers, summary  # noqa: E402
from analysis.cells import PREFER_MT, PREFER_SR, Table, provenance  # noqa: E402
from analysis.load import (  # noqa: E402
    PAPER_CSV,
    PAPER_SOURCE,
    PUBLISHED_CSV,
    REPO_ROOT,
    SHIPPED_DIR,
    DamagedRows,
    _is_missing,
    load_learning_curves,
    load_paper,
    load_rows,
    paper_value,
    result_files,
    rows_frame,
)
from analysis.tables import build_all, speedup_points  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# Markdown formatting
# ---------------------------------------------------------------------------------------------------------------


_missing = _is_missing  # one definition of "no value", shared with the loader


FORMATS: dict[str, Callable[[Any], str]] = {
    "s": str,
    "g": lambda v: f"{float(v):g}",
    "d": lambda v: f"{int(v)}",
    "f1": lambda v: f"{float(v):.1f}",
    "f2": lambda v: f"{float(v):.2f}",
    "f3": lambda v: f"{float(v):.3f}",
    "+f2": lambda v: f"{float(v):+.2f}",
    "x": lambda v: f"{float(v):.2f}x",
    "+x": lambda v: f"{float(v):+.2f}x",
    "pct": lambda v: f"{100 * float(v):.1f}%",
}


def fmt(v: Any, kind: str) -> str:
    """One table cell; an em dash where there is no value (a cell the paper or our runs do not have)."""
    if _missing(v):
        return "—"
    try:
        return FORMATS[kind](v)
    except (TypeError, ValueError):
        return str(v)


def md_table(df: pd.DataFrame, spec: Sequence[tuple[str, str, str]]) -> str:
    """A GitHub markdown table from (column, header, format) triples; absent columns print as dashes."""
    head = "| " + " | ".join(h for _, h, _ in spec) + " |"
    rule = "|" + "|".join("---" for _ in spec) + "|"
    lines = [head, rule]
    for _, r in df.iterrows():
        cells = [fmt(r.get(c), kind).replace("|", "\\|") for c, _, kind in spec]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), Path(start).resolve())).as_posix()


# ---------------------------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------------------------

SPECS: dict[str, list[tuple[str, str, str]]] = {
    "table1": [
        ("setting", "Setting", "s"), ("k", "k", "g"),
        ("bleu_ours", "BLEU ours", "f2"), ("bleu_paper", "BLEU paper", "f2"), ("bleu_diff", "ΔBLEU", "+f2"),
        ("block_ours", "k̂ ours", "f2"), ("block_paper", "k̂ paper", "f2"), ("block_diff", "Δk̂", "+f2"),
        ("identical_to_greedy", "= greedy", "pct"), ("speedup", "speedup", "x"), ("n_examples", "n", "d"),
        ("bleu_ood", "BLEU on ding test", "f2"), ("bleu_small", "BLEU ding", "f2"), ("block_small", "k̂ ding", "f2"),
    ],
    "topn": [
        ("setting", "Setting", "s"), ("k", "k", "g"), ("n", "top-n", "g"),
        ("bleu_ours", "BLEU ours", "f2"), ("block_ours", "k̂ ours", "f2"),
        ("dbleu_ours", "ΔBLEU vs exact (ours)", "+f2"), ("dblock_ours", "Δk̂ vs exact (ours)", "+f2"),
        ("bleu_paper", "BLEU paper", "f2"), ("block_paper", "k̂ paper", "f2"),
        ("dbleu_paper", "ΔBLEU vs exact (paper)", "+f2"),
        ("bleu_diff", "BLEU ours − paper", "+f2"), ("block_diff", "k̂ ours − paper", "+f2"),
    ],
    "min_block": [
        ("setting", "Setting", "s"), ("k", "k", "g"), ("l", "l", "g"),
        ("bleu_ours", "BLEU", "f2"), ("block_ours", "k̂", "f2"),
        ("dbleu_ours", "ΔBLEU vs l=1", "+f2"), ("dblock_ours", "Δk̂ vs l=1", "+f2"),
        ("identical_to_greedy", "= greedy", "pct"),
    ],
    "table2": [
        ("setting", "Setting", "s"), ("k", "k", "g"),
        ("block_ours", "k̂ ours", "f2"), ("block_paper", "k̂ paper", "f2"), ("block_diff", "Δk̂", "+f2"),
        ("psnr", "PSNR (dB)", "f2"), ("psnr_vs_greedy", "PSNR vs greedy (dB)", "f2"),
        ("pixel_agreement_with_greedy", "pixels = greedy", "pct"), ("speedup", "speedup", "x"),
        ("n_examples", "n", "d"), ("block_small", "k̂ five photos", "f2"), ("psnr_small", "PSNR five photos", "f2"),
    ],
    "sr_reference": [("decoder", "Decoder", "s"), ("psnr", "PSNR (dB)", "f2"), ("n_examples", "n", "d")],
    "figure4": [
        ("task", "Task", "s"), ("setting_ours", "setting (ours)", "s"), ("k_ours", "k ours", "g"),
        ("block_ours", "k̂ ours", "f2"), ("speedup_ours", "speedup ours", "x"),
        ("k_paper", "k paper", "g"), ("block_paper", "k̂ paper", "f2"), ("speedup_paper", "speedup paper", "x"),
        ("block_diff", "Δk̂", "+f2"), ("speedup_diff", "Δspeedup", "+x"),
    ],
    "table4": [
        ("setting", "Setting (ours)", "s"), ("k", "k", "g"),
        ("bleu_ours", "BLEU ours", "f2"), ("bleu_paper", "BLEU paper", "f2"), ("bleu_diff", "ΔBLEU", "+f2"),
        ("speedup_ours", "speedup ours", "x"), ("speedup_paper", "speedup paper", "x"),
        ("speedup_diff", "Δspeedup", "+x"), ("block_ours", "k̂ ours", "f2"),
    ],
    "bench": [
        ("source_experiment", "Model of", "s"), ("heads_arch", "heads", "s"),
        # The same heads trained longer are another model: without the steps its rows read as repeats.
        ("train_steps", "head steps", "g"), ("device", "device", "s"),
        ("dtype", "dtype", "s"), ("compiled", "compiled", "s"), ("engine", "engine", "s"), ("batch_size", "batch", "d"),
        ("decoder", "decoder", "s"),
        ("mean_block_size", "k̂", "f2"), ("tokens_per_s", "tokens/s", "f1"), ("speedup", "speedup", "x"),
        ("speedup_range", "95% CI (older rows: [min, max])", "s"), ("step_cost_ratio", "t_k/t_1", "f2"),
        ("ideal_speedup", "ideal", "x"), ("efficiency", "efficiency", "pct"), ("efficiency_ceiling", "ceiling", "pct"),
        ("predicted_speedup", "predicted", "x"), ("efficiency_vs_predicted", "vs predicted", "pct"),
        ("identical_to_greedy", "= greedy", "pct"), ("peak_mem_mb", "peak MB", "f1"),
    ],
    "beyond": [
        ("study", "results", "s"), ("task", "task", "s"), ("timing", "timing", "s"), ("run", "run", "s"),
        ("batch_size", "batch", "d"),
        ("decoder", "decoder", "s"), ("tree_nodes", "nodes", "g"), ("mean_block_size", "k̂", "f2"),
        ("speedup", "speedup", "x"), ("speedup_ci_low", "95% low", "x"), ("speedup_ci_high", "95% high", "x"),
        ("speedup_vs_chain", "vs chain", "x"), ("speedup_vs_chain_ci_low", "95% low", "x"),
        ("speedup_vs_chain_ci_high", "95% high", "x"),
        ("identical_to_greedy", "= greedy", "pct"), ("quality", "BLEU / PSNR", "f2"),
    ],
}

def bench_md(bench: pd.DataFrame) -> str:
    """The benchmark table's markdown, with each row's interval and compiled flag spelled out."""
    bench = bench.assign(speedup_range=speedup_intervals(bench),
                         compiled=["yes" if c else "no" for c in bench["compile"]])
    return md_table(bench, SPECS["bench"])


def acceptance_wide(acc: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str, str]]]:
    """The per-position rates as one row per (task, setting), one column per head."""
    spec: list[tuple[str, str, str]] = [
        ("task", "Task", "s"), ("setting", "Setting", "s"), ("k", "k", "g"), ("criterion", "criterion", "s")
    ]
    if acc.empty:
        return acc, spec
    wide = acc.pivot_table(index=["task", "setting", "k", "criterion"], columns="head", values="rate",
                           aggfunc="first", sort=False).reset_index()
    heads = sorted(int(h) for h in acc["head"].unique())
    wide.columns = [f"head_{c}" if isinstance(c, int | float) else c for c in wide.columns]
    spec += [(f"head_{h}", f"head {h}", "f2") for h in heads]
    return wide, spec


def provenance_md(source: pd.DataFrame) -> str:
    """The deduplicated experiments, commands, commits and devices behind a table."""
    prov = provenance(source)
    if not any(prov.values()):
        return ""
    lines = ["<details><summary>Provenance: rows from "
             + ", ".join(f"`{e}`" for e in prov["experiments"]) + "</summary>", ""]
    lines.append("- commands:")
    lines += [f"  - `{c}`" for c in prov["commands"]] or ["  - (not recorded)"]
    lines.append("- commits: " + (", ".join(f"`{c}`" for c in prov["commits"]) or "(not recorded)"))
    lines.append("- devices: " + (", ".join(f"`{d}`" for d in prov["devices"]) or "(not recorded)"))
    lines += ["", "</details>"]
    return "\n".join(lines)


def _figure_md(paths: list[Path], report_dir: Path, alt: str) -> str:
    if not paths:
        return ""
    png = next((p for p in paths if p.suffix == ".png"), paths[0])
    pdf = next((p for p in paths if p.suffix == ".pdf"), None)
    link = f"![{alt}]({_rel(png, report_dir)})"
    if pdf is not None:
        link += f"  \n[PDF]({_rel(pdf, report_dir)})"
    return link


def speedup_intervals(bench: pd.DataFrame) -> list[str]:
    """Each benchmark row's bracket: the paired speedup's 95% interval where the row has one (the number
    docs/benchmark.md quotes), else the spread over repeats that rows before 2026-12-01 recorded."""
    out = []
    for _, r in bench.iterrows():
        lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
        if _missing(lo):
            lo, hi = r.get("speedup_min"), r.get("speedup_max")
        out.append("—" if _missing(lo) else f"[{lo:.2f}, {hi:.2f}]")
    return out


def _missing_md(t: Table) -> str:
    return f"> **Missing:** {t.missing}." if t.missing else ""


def _section(t: Table, body: list[str], report_dir: Path, figs: list[tuple[list[Path], str]] | None = None) -> str:
    parts = [f"## {t.title}", ""]
    if t.missing:
        parts += [_missing_md(t), ""]
    if any(body):
        parts += body
    for paths, alt in figs or []:
        md = _figure_md(paths, report_dir, alt)
        if md:
            parts += ["", md]
    for note in t.notes:
        parts += ["", note]
    prov = provenance_md(t.source)
    if prov:
        parts += ["", prov]
    return "\n".join(parts)


def _resolve(path_str: Any, results_dir: Path) -> Path | None:
    """Rows store output paths relative to the repository root; accept absolute and results-relative too."""
    if _missing(path_str):
        return None
    p = Path(str(path_str))
    candidates = [p] if p.is_absolute() else [Path.cwd() / p, results_dir.parent / p, results_dir / p, REPO_ROOT / p]
    return next((c for c in candidates if c.is_file()), None)


def copy_best_grid(t2: Table, results_dir: Path, out_dir: Path) -> tuple[Path | None, str]:
    """Copy the image grid of the Table 2 cell with the largest mean accepted block size into the figures."""
    src = t2.source
    if src.empty or "grid_file" not in src.columns:
        return None, ""
    cand = src.dropna(subset=["grid_file"]).sort_values("mean_block_size", ascending=False)
    for _, r in cand.iterrows():
        grid = _resolve(r["grid_file"], results_dir)
        if grid is None:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        dest = out_dir / "sr_sample_grid.png"
        shutil.copyfile(grid, dest)
        # The caption says what the grid shows (its own columns), not the cell that led to the run: a grid
        # holds the run's largest-k decoders, which need not be the cell with the largest k̂.
        columns = r.get("grid_columns")
        shown = ", ".join(columns) if isinstance(columns, list) else \
            "low-res input, greedy, blockwise exact and approximate at the run's largest k, ground truth"
        caption = (f"Sample grid of a {r['table_setting']} run (the one holding the largest k̂ of Table 2); "
                   f"columns: {shown}; source `{r['grid_file']}`.")
        return dest, caption
    if not cand.empty:
        return None, f"(grid file `{cand.iloc[0]['grid_file']}` not found)"
    return None, ""


# ---------------------------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Report:
    tables: dict[str, Table]
    figures: dict[str, list[Path]] = field(default_factory=dict)
    path: Path | None = None
    n_rows: int = 0


HEADER = """# Blockwise parallel decoding: our measurements beside the paper's

The **paper's numbers are reference values copied from the paper** (Stern, Shazeer & Uszkoreit,
*Blockwise Parallel Decoding for Deep Autoregressive Models*, NeurIPS 2018; `analysis/paper_reference.csv`,
source column "{source}"): WMT14 En-De and CelebA, `transformer_base`-size models trained for a million steps
on 8 GPUs, inference hardware not reported. **Ours are what this repository's code measured**, read from the
rows under `results/`, on the hardware each table names. Δ = ours − paper; — = no value (not reported by the
paper, or no row of ours yet).
"""


def build_report(results_dir: Path, out_dir: Path, report_path: Path, paper_csv: Path = PAPER_CSV,
                 prefer_mt: tuple[str, ...] = PREFER_MT, prefer_sr: tuple[str, ...] = PREFER_SR,
                 shipped_dir: Path = SHIPPED_DIR, wandb_runs: Path | None = None, accept_damaged: bool = False
                 ) -> Report:
    """Read the rows (those of the W&B runs under ``wandb_runs`` instead, where given), build every table and
    figure, and write the markdown report. A rows line that does not parse is refused (``DamagedRows``) unless
    ``accept_damaged``: then it is left out and named, here and in the report."""
    results_dir, out_dir, report_path = Path(results_dir), Path(out_dir), Path(report_path)
    if wandb_runs is not None:
        from analysis.wandb_runs import offline_runs, run_records

        every = rows_frame(run_records(offline_runs(wandb_runs)))
    else:
        every = load_rows(results_dir, accept_damaged)
    skipped = every.attrs.get("skipped", [])
    rows, peer_rows = peers.split_rows(every)
    paper = load_paper(paper_csv)
    tables = build_all(rows, paper, prefer_mt, prefer_sr)
    tables["peers"] = peers.peers_table(peer_rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    rd = report_path.parent

    figs: dict[str, list[Path]] = {
        "table1_bleu_vs_block": figures.table1_scatter(tables["table1"].data, out_dir),
        "table2_block_vs_k": figures.table2_lines(tables["table2"].data, out_dir),
        "figure4_speedup_vs_block": figures.speedup_vs_block(
            speedup_points(rows, prefer_mt, prefer_sr), paper[paper["table"].eq("figure4_peak")], out_dir
        ),
    }
    figs["beyond_speedup_vs_block"] = figures.beyond_speedup(
        tables["beyond"].data, pd.read_csv(PUBLISHED_CSV), paper[paper["table"].eq("figure4_peak")], out_dir
    )
    curves = load_learning_curves(shipped_dir)
    figs["learning_curves"] = figures.learning_curves(curves, out_dir, paper_value(paper, "table1", "regular", 1,
                                                                                   "bleu"))
    acc_paths = figures.acceptance_by_position(tables["acceptance"].data, out_dir)
    if acc_paths:
        figs["acceptance_per_position"] = acc_paths
    grid, grid_caption = copy_best_grid(tables["table2"], results_dir, out_dir)
    if grid is not None:
        figs["sr_sample_grid"] = [grid]

    t = tables
    sections = []
    t1_spec = [c for c in SPECS["table1"] if c[0] in t["table1"].data.columns]  # the other corpora's, when present
    sections.append(_section(t["table1"], [md_table(t["table1"].data, t1_spec)], rd,
                             [(figs["table1_bleu_vs_block"], "BLEU against mean accepted block size")]))
    sections.append(_curves_md(curves, figs["learning_curves"], shipped_dir, rd))
    sections.append(_section(t["topn"], [md_table(t["topn"].data, SPECS["topn"])], rd))
    sections.append(_section(t["min_block"], [md_table(t["min_block"].data, SPECS["min_block"])]
                             if not t["min_block"].data.empty else [], rd))
    t2_body = [md_table(t["table2"].data, SPECS["table2"])]
    ref = t["sr_reference"]
    t2_body += ["", f"**{ref.title}**", ""]
    t2_body += [md_table(ref.data, SPECS["sr_reference"])] if not ref.data.empty else [f"_{ref.missing}._"]
    t2_figs = [(figs["table2_block_vs_k"], "SR mean accepted block size against k")]
    if grid is not None:
        t2_figs.append(([grid], "sample super-resolution grid"))
    elif grid_caption:
        t2_body += ["", grid_caption]
    if grid is not None:
        t["table2"].notes.append(grid_caption)
    sections.append(_section(t["table2"], t2_body, rd, t2_figs))
    sections.append(_section(t["figure4"], [md_table(t["figure4"].data, SPECS["figure4"])], rd,
                             [(figs["figure4_speedup_vs_block"], "wall-clock speedup against mean block size")]))
    sections.append(_section(t["table4"], [md_table(t["table4"].data, SPECS["table4"])], rd))
    wide, spec = acceptance_wide(t["acceptance"].data)
    sections.append(_section(t["acceptance"], [md_table(wide, spec)] if not wide.empty else [], rd,
                             [(figs.get("acceptance_per_position", []), "per-position acceptance rates")]))
    bench = t["bench"].data
    sections.append(_section(t["bench"], [bench_md(bench)] if not bench.empty else [], rd))
    sections.append(_section(t["beyond"], [md_table(t["beyond"].data, SPECS["beyond"])]
                             if not t["beyond"].data.empty else [], rd,
                             [(figs["beyond_speedup_vs_block"], "speedup against k̂: chain, tree, rescored, draft")]))
    sections.append(_section(t["peers"], [md_table(t["peers"].data, peers.SPEC)] if not t["peers"].data.empty
                             else [], rd))

    files = result_files(results_dir) if wandb_runs is None else []
    where = (f"{len(files)} file(s) under `{_display(results_dir)}`" if wandb_runs is None
             else f"the W&B evaluation runs under `{_display(Path(wandb_runs))}`")
    missing = [tb.missing for tb in tables.values() if tb.missing]
    lines = [HEADER.format(source=PAPER_SOURCE), summary.summary_md(tables, paper), ""]
    lines.append(
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S')} by `python analysis/make_report.py` from {len(rows)} "
        f"rows (latest run of each configuration) in {where}."
    )
    if skipped:
        lines += ["", f"**Left out ({len(skipped)} damaged line(s), `--accept-damaged`):** "
                  + "; ".join(f"`{s}`" for s in skipped)]
    lines += ["", "**Contents:** " + " · ".join(
        f"[{tb.title.split(':')[0]}](#{_anchor(tb.title)})" for tb in tables.values() if tb.key != "sr_reference"
    )]
    if missing:
        lines += ["", "**Missing inputs:**", ""] + [f"- {m}" for m in dict.fromkeys(missing)]
    lines += ["", *[s + "\n" for s in sections]]
    lines += ["## Inputs", ""]
    if files:
        lines += [f"- `{_display(f)}`" for f in files]
    else:
        lines.append(f"- none: `{results_dir}` holds no `*/rows.jsonl`, `*/bench*.jsonl` or `studies/**/rows.jsonl` "
                     "files yet")
    report_path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return Report(tables=tables, figures=figs, path=report_path, n_rows=len(rows))


def _curves_md(curves: pd.DataFrame, paths: list[Path], shipped_dir: Path, report_dir: Path) -> str:
    """The base models' learning curves: the figure, and each curve's last and best dev BLEU."""
    parts = ["## The base models: dev BLEU against training steps", ""]
    for name, d in curves.groupby("checkpoint", sort=True):
        best = d.loc[d["bleu"].idxmax()]
        parts.append(f"- `{name}`: {d['bleu'].iloc[-1]:.2f} at step {int(d['step'].iloc[-1]):,} "
                     f"(best {best['bleu']:.2f} at {int(best['step']):,})")
    parts += ["", _figure_md(paths, report_dir, "dev BLEU against training steps"), "",
              f"From the manifests in `{_display(Path(shipped_dir))}` (`learning_curve`); each base on its own "
              "corpus's dev set, so the lines compare how far each corpus lets the same recipe go, not one test."]
    return "\n".join(parts)


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    keep = [c for c in title.lower() if c.isalnum() or c in " -_"]
    return "".join(keep).replace(" ", "-")


def _display(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------------------------
# Weights & Biases
# ---------------------------------------------------------------------------------------------------------------


def _wandb_frame(df: pd.DataFrame) -> pd.DataFrame:
    """W&B tables want plain scalars of one type per column: NaN to None, lists and dicts to strings, and a
    column that mixes text with numbers (a "—" cell among figures) all text, else W&B refuses the table."""

    def plain(v: Any) -> Any:
        return str(v) if isinstance(v, list | dict) else None if pd.isna(v) else v

    columns = {}
    for col in df.columns:
        values = [plain(v) for v in df[col]]
        if len({isinstance(v, str) for v in values if v is not None}) > 1:
            values = [None if v is None else str(v) for v in values]
        columns[col] = pd.Series(values, index=df.index, dtype=object)
    return pd.DataFrame(columns, index=df.index)


def log_wandb(report: Report, wandb_dir: Path, project: str = "bpd") -> str | None:
    """Log every table and figure as one offline W&B run (job_type "report"); None when W&B is unavailable."""
    if os.environ.get("WANDB_MODE", "").lower() == "disabled":
        return None
    try:
        import wandb
    except ImportError:
        return None
    try:
        wandb_dir.mkdir(parents=True, exist_ok=True)
        run = wandb.init(project=os.environ.get("WANDB_PROJECT", project), job_type="report", mode="offline",
                         dir=str(wandb_dir), name=f"report-{time.strftime('%Y%m%d-%H%M%S')}",
                         config={"rows": report.n_rows, "report": str(report.path)})
        for key, t in report.tables.items():
            if not t.data.empty:
                run.log({f"tables/{key}": wandb.Table(dataframe=_wandb_frame(t.data))})
        for stem, paths in report.figures.items():
            png = next((p for p in paths if p.suffix == ".png"), None)
            if png is not None and png.exists():
                run.log({f"figures/{stem}": wandb.Image(str(png))})
        if report.path is not None and report.path.exists():
            run.summary["report_md"] = report.path.read_text(encoding="utf-8")[:100_000]
        run_dir = str(Path(run.dir).parent) if getattr(run, "dir", None) else ""
        run.finish()
        return run_dir
    except Exception as e:  # noqa: BLE001 - the report on disk matters more than the W&B copy
        print(f"warning: W&B logging skipped ({type(e).__name__}: {e})", file=sys.stderr)
        return None


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", type=Path, default=REPO_ROOT / "results",
                    help="folder of <experiment>/rows.jsonl (and studies/**/rows.jsonl)")
    ap.add_argument("--out", type=Path, default=None, help="figures folder (default: <results>/figures)")
    ap.add_argument("--report", type=Path, default=None, help="markdown report (default: <results>/REPORT.md)")
    ap.add_argument("--paper", type=Path, default=PAPER_CSV, help="the paper's numbers (paper_reference.csv)")
    ap.add_argument("--mt-experiment", action="append", default=None,
                    help=f"experiment(s) preferred for Table 1 (default: {', '.join(PREFER_MT)}; else any)")
    ap.add_argument("--sr-experiment", action="append", default=None,
                    help=f"experiment(s) preferred for Table 2 (default: {', '.join(PREFER_SR)}; else any)")
    ap.add_argument("--shipped", type=Path, default=SHIPPED_DIR,
                    help="shipped base models whose manifests' learning curves are drawn (checkpoints/)")
    ap.add_argument("--wandb-runs", type=Path, default=None,
                    help="draw from the evaluation runs' rows in this W&B folder (offline runs) instead of --results")
    ap.add_argument("--accept-damaged", action="store_true",
                    help="leave out (and name) rows lines that do not parse instead of failing")
    ap.add_argument("--wandb", action="store_true", help="also log all tables and figures to W&B (offline run)")
    ap.add_argument("--wandb-dir", type=Path, default=REPO_ROOT / "outputs", help="W&B offline directory")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out if args.out is not None else args.results / "figures"
    report_path = args.report if args.report is not None else args.results / "REPORT.md"
    try:
        report = build_report(
            args.results, out, report_path, args.paper,
            tuple(args.mt_experiment) if args.mt_experiment else PREFER_MT,
            tuple(args.sr_experiment) if args.sr_experiment else PREFER_SR, args.shipped, args.wandb_runs,
            args.accept_damaged,
        )
    except DamagedRows as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n_missing = sum(1 for t in report.tables.values() if t.missing)
    n_figs = sum(len(p) for p in report.figures.values())
    print(f"wrote {report_path} ({report.n_rows} rows, {n_figs} figure files in {out}, "
          f"{n_missing} table(s) missing inputs)")
    if args.wandb:
        run_dir = log_wandb(report, args.wandb_dir)
        if run_dir:
            print(f"W&B offline run: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
