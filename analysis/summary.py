"""The report's first screen: the paper's three claims, each with our figure from the rows beside the paper's,
and a scale caveat written from what the rows are (corpus, model, steps, hardware).

The paper's abstract claims iteration reductions "of up to 2x over a baseline greedy decoder with no loss in
quality, or up to 7x in exchange for a slight decrease in performance", and wall-clock speedups "of up to 4x".
Each claim is read here as one rule, applied alike to the paper's own tables (``analysis/paper_reference.csv``)
and to our tables (built from the rows), so the two figures in a line answer the same question:

1. no loss: the largest k̂ of a frozen base with exact acceptance (Regular, Distillation), whose outputs are the
   base's own greedy outputs;
2. a small loss: the largest k̂ of any Table 1 or top-n cell whose BLEU is within ``SMALL_LOSS`` of the base's
   greedy BLEU (Regular, k = 1), then the largest at any loss, and super-resolution's largest k̂;
3. wall clock: the Figure 4 peaks (our best paper-setting cell, as the report's Figure 4 section picks it), and our
   best paired benchmark speedup with exact acceptance at batch 1.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from analysis.cells import Table
from analysis.load import _is_missing

#: How much BLEU below the base's greedy BLEU claim 2 still calls a small loss (a definition, not a measurement).
SMALL_LOSS = 1.0
FROZEN = ("regular", "distillation")


def hardware(device: Any) -> str:
    """A row's device string as a reader wants it: the kind, the CPU's instruction set and the threads
    (``cpu:Intel(R) Xeon(R) Processor (AVX512+AMX) x2 threads`` -> ``CPU (AVX512+AMX), 2 threads``)."""
    if _is_missing(device):
        return "device not recorded"
    m = re.match(r"(\w+):.*?(?:\(([^()]*)\))?\s*x(\d+)\s*threads$", str(device))
    if not m:
        return f"`{device}`"
    kind, isa, threads = m.groups()
    return f"{kind.upper()}{f' ({isa})' if isa else ''}, {threads} thread{'s' if threads != '1' else ''}"


def _best(df: pd.DataFrame, value: str) -> pd.Series | None:
    df = df[df[value].notna()] if not df.empty and value in df else df.iloc[0:0]
    return None if df.empty else df.loc[df[value].idxmax()]


def _paper_cells(paper: pd.DataFrame) -> pd.DataFrame:
    cells = paper[paper["table"].isin(["table1", "topn"])].copy()
    cells["label"] = [s if t == "table1" else f"{s} top-{int(p)}"
                      for t, s, p in zip(cells["table"], cells["setting"], cells["criterion_param"])]
    return cells.rename(columns={"bleu": "b", "mean_block_size": "kh", "split": "dataset"})


def _our_cells(t1: pd.DataFrame, topn: pd.DataFrame) -> pd.DataFrame:
    ex = t1.assign(label=t1["setting"]) if not t1.empty else t1
    tn = topn.assign(label=[f"{s} top-{int(n)}" for s, n in zip(topn["setting"], topn["n"])]) if not topn.empty \
        else topn
    if not tn.empty and not ex.empty and "dataset" in ex:  # top-n rows come from the main sweep's Both model
        tn = tn.assign(dataset=ex["dataset"].dropna().iloc[0] if ex["dataset"].notna().any() else None)
    both = pd.concat([ex, tn], ignore_index=True) if not (ex.empty and tn.empty) else ex
    return both.rename(columns={"bleu_ours": "b", "block_ours": "kh"}) if not both.empty else \
        pd.DataFrame(columns=["label", "k", "b", "kh"])


def _cell(c: pd.Series | None, base: float | None, unit: str = "BLEU") -> str:
    if c is None:
        return "—"
    loss = "" if base is None or _is_missing(c.get("b")) else f", {c['b'] - base:+.2f}"
    quality = "" if _is_missing(c.get("b")) else f"; {unit} {c['b']:.2f}{loss}"
    corpus = "" if _is_missing(c.get("dataset")) else f"; {c['dataset']}"
    return f"k̂ **{c['kh']:.2f}** ({c['label']}, k = {int(c['k'])}{quality}{corpus})"


def _base_bleu(cells: pd.DataFrame) -> float | None:
    b = cells[cells["label"].eq("regular") & cells["k"].eq(1)]["b"]
    return None if b.empty or _is_missing(b.iloc[0]) else float(b.iloc[0])


def iteration_lines(t: dict[str, Table], paper: pd.DataFrame) -> list[str]:
    """Claims 1 and 2 for translation, and super-resolution's longest blocks."""
    ours, theirs = _our_cells(t["table1"].data, t["topn"].data), _paper_cells(paper)
    base_o, base_p = _base_bleu(ours), _base_bleu(theirs)

    def pick(cells: pd.DataFrame, base: float | None, rule: str) -> pd.Series | None:
        if rule == "frozen":
            return _best(cells[cells["label"].isin(FROZEN)], "kh")
        if rule == "small" and base is not None:
            return _best(cells[cells["b"] >= base - SMALL_LOSS], "kh")
        return _best(cells, "kh")

    lines = []
    for rule, claim in (("frozen", "**1. Fewer iterations, no loss in quality** (abstract: up to 2x): frozen base, "
                                    "exact acceptance, so the outputs are the base's greedy outputs"),
                        ("small", f"**2. More iterations, a small loss** (abstract: up to 7x): within {SMALL_LOSS:g} "
                                  "BLEU of the base's greedy BLEU, exact or top-n"),
                        ("any", "2, at any loss: the longest blocks of any exact or top-n cell")):
        lines.append(f"| {claim} | {_cell(pick(theirs, base_p, rule), base_p)} | "
                     f"{_cell(pick(ours, base_o, rule), base_o)} |")
    sr_p = _best(paper[paper["table"].eq("table2")].rename(columns={"mean_block_size": "kh", "split": "dataset"})
                 .assign(label=lambda d: d["setting"], b=float("nan")), "kh")
    t2 = t["table2"].data
    sr_o = _best(t2.rename(columns={"block_ours": "kh", "psnr": "b"}).assign(label=t2.get("setting")), "kh") \
        if not t2.empty else None
    lines.append(f"| 2, super-resolution: the longest blocks of Table 2 (the paper judged quality by a human study) "
                 f"| {_cell(sr_p, None)} | {_cell(sr_o, None, 'PSNR (dB)')} |")
    return lines


def _device_of(points: pd.DataFrame, row: pd.Series) -> str:
    """The hardware of the Figure 4 point a row of that table came from (same task, setting, k; not a bench point),
    and its batch size when it is not 1."""
    if points.empty or "device" not in points:
        return "device not recorded"
    m = points[points["task"].eq(row["task"]) & points["table_setting"].eq(row["setting_ours"])
               & points["k"].eq(row["k_ours"]) & ~points["series"].astype(str).str.startswith("bench")]
    m = m[m["speedup"].eq(row["speedup_ours"])] if m["speedup"].eq(row["speedup_ours"]).any() else m
    if m.empty:
        return "device not recorded"
    # Figure 4 falls back to larger batches where a sweep has no batch-1 rows: say so beside the figure.
    batch = m["batch_size"].iloc[0] if "batch_size" in m else 1
    return hardware(m["device"].iloc[0]) + ("" if pd.isna(batch) or int(batch) == 1 else f", batch {int(batch)}")


def wallclock_lines(t: dict[str, Table]) -> list[str]:
    """Claim 3: the Figure 4 peaks, and our best paired benchmark speedup (exact, batch 1)."""
    f4 = t["figure4"].data
    cells = []
    for side in ("paper", "ours"):
        parts = []
        for _, r in f4.iterrows():
            if _is_missing(r.get(f"speedup_{side}")):
                continue
            who = "" if side == "paper" else f"{r['setting_ours']}, "
            where = "" if side == "paper" else f"; {_device_of(t['figure4'].source, r)}"
            parts.append(f"{'MT' if r['task'] == 'translation' else 'SR'} **{r[f'speedup_{side}']:.2f}x** "
                         f"({who}k = {int(r[f'k_{side}'])}, k̂ {r[f'block_{side}']:.2f}{where})")
        cells.append("; ".join(parts) or "—")
    lines = [f"| **3. Wall-clock speedup** (abstract: up to 4x): the best cell of the paper's settings, batch 1 "
             f"| {cells[0]} | {cells[1]} |"]
    b = t["bench"].source
    if not b.empty:
        b = b[b["method"].eq("blockwise") & b["criterion"].eq("exact") & b["min_block_size"].fillna(1).eq(1)
              & b["batch_size"].eq(1) & b["task"].eq("translation") & b["speedup_ci_low"].notna()
              & ~b.get("timing_busy", pd.Series(False, index=b.index)).fillna(False).astype(bool)]
    best = _best(b, "speedup")
    if best is not None:
        model = " ".join(str(x) for x in (best.get("source_experiment"), best.get("table_setting"))
                         if not _is_missing(x))
        lines.append("| 3, benchmarked: our best paired speedup, exact acceptance, batch 1 (`make bench` and variants) "
                     f"| — | **{best['speedup']:.2f}x** [{best['speedup_ci_low']:.2f}, {best['speedup_ci_high']:.2f}] "
                     f"({model}, {best['heads_arch']} heads, k = {int(best['k'])}, k̂ {best['mean_block_size']:.2f}; "
                     f"{hardware(best['device'])}) |")
    return lines


def scale_caveat(t: dict[str, Table], paper: pd.DataFrame) -> str:
    """What our rows are, against the paper's setup: corpora, model sizes, steps, test sets, hardware."""
    src = pd.concat([t["table1"].source, t["table2"].source], ignore_index=True)
    if src.empty:
        return "No Table 1 or Table 2 rows yet: the comparison below has only the paper's side."
    parts = []
    for (exp, data), g in src.groupby(["experiment", "dataset"], sort=False):
        steps = sorted({int(s) for s in g["train_steps"].dropna()})
        parts.append(f"`{exp}`: {data}, base preset {'/'.join(sorted(set(g['model_preset'].dropna())))}, "
                     f"{'/'.join(sorted(set(g['heads_arch'].dropna().astype(str))))} heads trained "
                     f"{'/'.join(f'{s:,}' for s in steps)} steps, {int(g['n_examples'].max()):,} test "
                     f"{'sentences' if g['task'].iloc[0] == 'translation' else 'patches'}, timed on "
                     f"{', '.join(sorted({hardware(d) for d in g['device']}))}")
    base, base_p = _base_bleu(_our_cells(t["table1"].data, t["topn"].data)), _base_bleu(_paper_cells(paper))
    theirs = f" (the paper's: {base_p:.2f} on newstest2013)" if base_p is not None else ""
    base_txt = f" Our main base scores BLEU {base:.2f} on its own test set{theirs};" if base is not None else ""
    return ("**What our rows are.** " + "; ".join(parts) + "." + base_txt +
            " the corpora, test sets and model sizes differ from the paper's (WMT14, `transformer_base`, "
            "1M steps on 8 GPUs), so compare trends and ratios (k̂ against k and setting, BLEU lost against "
            "blocks gained), not absolute BLEU; our wall clock is on CPUs, where a round costs more greedy steps "
            "than on the accelerators the paper's speedups imply (its hardware is not reported).")


def summary_md(t: dict[str, Table], paper: pd.DataFrame) -> str:
    """The report's first screen."""
    lines = ["## Summary: the paper's three claims, and ours", "",
             "| claim, and the rule that picks the figure | the paper (its tables) | ours (our rows) |",
             "|---|---|---|"]
    lines += iteration_lines(t, paper) + wallclock_lines(t)
    lines += ["", "k̂: mean accepted block size, the factor by which blockwise decoding cuts decoding iterations. "
              "Each figure is picked by the rule in its line from the tables below (paper: "
              "`analysis/paper_reference.csv`); the BLEU change is against the base's greedy BLEU (Regular, k = 1).",
              "", scale_caveat(t, paper)]
    return "\n".join(lines)
