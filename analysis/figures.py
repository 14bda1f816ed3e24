"""Figures of the report (matplotlib, Agg backend), each saved as PNG (for REPORT.md) and PDF (for papers).

Every figure that has a paper counterpart is drawn even when our rows are missing, with the empty panel
saying so: the reader then sees what the run will be compared against.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from analysis.load import MT_ROWS, SR_SETTINGS  # noqa: E402
from bpd.config.methods import DECODE_METHODS, Role, methods_of  # noqa: E402

MARKERS = {"regular": "o", "distillation": "s", "approximate": "s", "finetune": "^", "both": "D",
           "finetune_gentle": "v", "both_gentle": "d", "finetune_anchored": "<", "both_anchored": ">"}
COLORS = {"regular": "tab:blue", "distillation": "tab:orange", "approximate": "tab:orange", "finetune": "tab:green",
          "both": "tab:red", "finetune_gentle": "tab:olive", "both_gentle": "tab:purple",
          "finetune_anchored": "tab:cyan", "both_anchored": "tab:brown"}
LABELS = {"regular": "Regular", "distillation": "Distillation", "approximate": "Approximate (eps 2)",
          "finetune": "Fine tuning", "both": "Both", "finetune_gentle": "Fine tuning, gentle",
          "both_gentle": "Both, gentle", "finetune_anchored": "Fine tuning, p_1 anchored",
          "both_anchored": "Both, p_1 anchored"}
TASK_TITLES = {"translation": "Translation (MT)", "image": "Super-resolution (SR)"}


def save(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf``; close the figure so that many reports in one process stay light."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None})  # unchanged data, unchanged file
    plt.close(fig)
    return paths


def _no_data(ax: plt.Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.4", wrap=True)


def _scatter_settings(ax: plt.Axes, df: pd.DataFrame, x: str, y: str, settings: tuple[str, ...]) -> bool:
    drawn = False
    for s in settings:
        d = df[df["setting"].eq(s)].dropna(subset=[x, y]).sort_values("k")
        if d.empty:
            continue
        ax.plot(d[x], d[y], marker=MARKERS.get(s, "o"), color=COLORS.get(s), label=LABELS.get(s, s), lw=0.8)
        for _, r in d.iterrows():
            ax.annotate(f"{r['k']:g}", (r[x], r[y]), textcoords="offset points", xytext=(3, 3), fontsize=7)
        drawn = True
    return drawn


def _frame(ax, xlabel: str, ylabel: str, title: str) -> None:
    """Axis labels, a small title and a light grid: the frame every panel of the report shares."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def table1_scatter(t1: pd.DataFrame, out_dir: Path) -> list[Path]:
    """The paper's Table 1 figure: BLEU against mean accepted block size, ours and the paper's side by side on
    shared axes. BLEU is shown relative to each side's own base model (Regular, k = 1), so that the two spreads
    (what each setting costs against what it gains in k̂) compare by eye despite the very different BLEU."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True, sharey=True)
    datasets = ", ".join(sorted(t1["dataset"].dropna().astype(str).unique())) if "dataset" in t1 else ""
    ours_title = f"Ours ({datasets}, test split)" if datasets else "Ours"
    for ax, who, title in ((axes[0], "ours", ours_title),
                           (axes[1], "paper", "Paper (WMT14 newstest2013)")):
        base = t1[t1["setting"].eq("regular") & t1["k"].eq(1)][f"bleu_{who}"].dropna()
        d = t1.assign(_dbleu=t1[f"bleu_{who}"] - (float(base.iloc[0]) if not base.empty else np.nan))
        if not _scatter_settings(ax, d, f"block_{who}", "_dbleu", MT_ROWS):
            _no_data(ax, "no rows yet: make reproduce-mt-small" if base.empty or who == "ours" else "no values")
        else:
            ax.legend(fontsize=8)
        ax.axhline(0.0, color="0.7", lw=0.8, ls=":")
        ref = f" (base {float(base.iloc[0]):.2f})" if not base.empty else ""
        _frame(ax, "mean accepted block size k̂", "BLEU − base BLEU" if who == "ours" else "", title + ref)
    fig.suptitle("BLEU change against mean accepted block size, relative to each side's base model "
                 "(numbers: k)", fontsize=11)
    return save(fig, out_dir, "table1_bleu_vs_block")


def table2_lines(t2: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Table 2 as lines: mean accepted block size against k per setting, ours solid, the paper's dashed."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for s in SR_SETTINGS:
        d = t2[t2["setting"].eq(s)].sort_values("k")
        ours = d.dropna(subset=["block_ours"])
        paper = d.dropna(subset=["block_paper"])
        if not ours.empty:
            ax.plot(ours["k"], ours["block_ours"], marker=MARKERS[s], color=COLORS[s], label=f"{LABELS[s]} (ours)")
        if not paper.empty:
            ax.plot(paper["k"], paper["block_paper"], marker=MARKERS[s], color=COLORS[s], ls="--", alpha=0.5,
                    mfc="none", label=f"{LABELS[s]} (paper)")
    if t2["block_ours"].notna().sum() == 0:
        _no_data(ax, "no rows of ours yet: make reproduce-sr-small")
    _frame(ax, "k", "mean accepted block size k̂", "Super-resolution: k̂ against k (solid: ours, dashed: paper)")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, out_dir, "table2_block_vs_k")


def _ideal_and_parity(ax: plt.Axes, xmax: float) -> None:
    """The speedup = k̂ diagonal (no round overhead) and the speedup = 1 line of a speedup-against-k̂ plot."""
    xs = np.linspace(1.0, xmax * 1.05, 50)
    ax.plot(xs, xs, color="0.5", ls=":", lw=1, label="ideal: speedup = k̂")
    ax.axhline(1.0, color="0.7", lw=0.8, ls=":")


def speedup_vs_block(points: pd.DataFrame, peaks: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Figure 4: wall-clock speedup against mean accepted block size for MT and SR, with the ideal speedup = k̂.
    One line per setting (sweep cells) or benchmarked configuration; approximate acceptance (top-n, distance,
    minimum block size) dashed and labelled so, exact solid, as the paper's peaks are; k written at each
    line's last point only, so that crowded lines stay readable."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, task in zip(axes, ("translation", "image")):
        pts = points[points["task"].eq(task)] if not points.empty else points
        xmax = 2.0
        for series, d in pts.groupby("series", sort=False) if not pts.empty else []:
            d = d.sort_values("k")
            bench = str(series).startswith("bench")
            approx = bool(d["approximate"].any()) if "approximate" in d else False
            name = str(series) if bench else f"{LABELS.get(series, series)} (ours)"
            ax.plot(d["mean_block_size"], d["speedup"], marker="x" if bench else MARKERS.get(series, "o"),
                    color=None if bench else COLORS.get(series), ls="--" if approx else "-", lw=0.9, ms=4,
                    label=name + (", approximate" if approx and "approx" not in name else ""))
            last = d.iloc[-1]
            ax.annotate(f"k={last['k']:g}", (last["mean_block_size"], last["speedup"]), textcoords="offset points",
                        xytext=(3, 2), fontsize=6)
            xmax = max(xmax, float(d["mean_block_size"].max()))
        pk = peaks[peaks["task"].eq(task)]
        for _, r in pk.iterrows():
            ax.plot([r["mean_block_size"]], [r["speedup"]], marker="*", ms=14, color="k", ls="none",
                    label=f"paper peak, exact (k={r['k']:g})")
            xmax = max(xmax, float(r["mean_block_size"]))
        _ideal_and_parity(ax, xmax)
        if pts.empty:
            _no_data(ax, "no rows of ours yet")
        _frame(ax, "mean accepted block size k̂", "wall-clock speedup over greedy", TASK_TITLES[task])
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.suptitle("Wall-clock speedup against mean accepted block size (solid: exact, dashed: approximate)",
                 fontsize=11)
    return save(fig, out_dir, "figure4_speedup_vs_block")


#: Marker, colour and label of the chain and of each method beyond it, in registry order (a new method takes the
#: next marker and colour).
BEYOND_STYLE = {name: ("o^sDvP<>"[i % 8], f"C{i}", DECODE_METHODS[name].label)
                for i, name in enumerate(methods_of(Role.CHAIN, Role.BEYOND))}


def beyond_speedup(data: pd.DataFrame, published: pd.DataFrame, peaks: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Speedup against k̂ for the chain, tree, rescored chain and draft model (ours, batch 1, exact), with the
    paper's Figure 4 peaks and Spec-Bench's published Medusa / Hydra / EAGLE / draft-model figures."""
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    ours = data[data["batch_size"].fillna(1).eq(1)] if not data.empty else data
    xmax = 2.0
    for method, (marker, color, label) in BEYOND_STYLE.items():
        d = ours[ours["method"].eq(method)] if not ours.empty else ours
        for task, fill in (("translation", color), ("image", "none")):
            dt = d[d["task"].eq(task)] if not d.empty else d
            if dt.empty:
                continue
            ax.plot(dt["mean_block_size"], dt["speedup"], marker=marker, ls="none", ms=6, color=color,
                    mfc=fill, label=f"{label}, ours ({'MT' if task == 'translation' else 'SR'})")
            xmax = max(xmax, float(dt["mean_block_size"].max()))
    for _, r in peaks.iterrows():
        ax.plot([r["mean_block_size"]], [r["speedup"]], marker="*", ms=13, color="k", ls="none")
        approx = "" if r["criterion"] == "exact" else f", {r['criterion']} {r['criterion_param']:g}"
        name = f"paper {'MT' if r['task'] == 'translation' else 'SR'} peak{approx}"
        ax.annotate(name, (r["mean_block_size"], r["speedup"]),
                    textcoords="offset points", xytext=(4, -10), fontsize=7)
        xmax = max(xmax, float(r["mean_block_size"]))
    for _, r in published.iterrows():
        marker = BEYOND_STYLE.get(r["family"], ("x",))[0]
        ax.plot([r["mean_accepted_tokens"]], [r["speedup"]], marker=marker, ms=7, color="0.45", ls="none")
        ax.annotate(f"{r['method']} (Spec-Bench)", (r["mean_accepted_tokens"], r["speedup"]),
                    textcoords="offset points", xytext=(4, 3), fontsize=7, color="0.35")
        xmax = max(xmax, float(r["mean_accepted_tokens"]))
    _ideal_and_parity(ax, xmax)
    if ours.empty:
        _no_data(ax, "no tree, rescored or draft rows of ours yet (docs/beyond.md)")
    _frame(ax, "mean accepted tokens per verify call (k̂)", "wall-clock speedup over greedy",
           "Chain, tree, rescored chain and draft model (exact, batch 1); grey: published, other models and GPUs")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    return save(fig, out_dir, "beyond_speedup_vs_block")


def acceptance_by_position(acc: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Per-position acceptance rate per head (x = head index, 2..k), one line per setting; MT and SR panels."""
    tasks = [t for t in ("translation", "image") if not acc.empty and acc["task"].eq(t).any()]
    if not tasks:
        return []
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        d = acc[acc["task"].eq(task)]
        for s, g in d.groupby("setting", sort=False):
            g = g.sort_values("head")
            ax.plot(g["head"], g["rate"], marker=MARKERS.get(s, "o"), color=COLORS.get(s),
                    label=f"{LABELS.get(s, s)} (k={g['k'].iloc[0]:g}, {g['criterion'].iloc[0]})")
        ax.set_ylim(0, 1.05)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _frame(ax, "head position i (proposes token j+i)", "P(accept | earlier heads accepted)", TASK_TITLES[task])
        ax.legend(fontsize=7)
    fig.suptitle("Per-position acceptance rate per head", fontsize=11)
    return save(fig, out_dir, "acceptance_per_position")


def learning_curves(curves: pd.DataFrame, out_dir: Path, paper_bleu: float | None = None) -> list[Path]:
    """The shipped translation bases' dev BLEU against training steps, one line per checkpoint, coloured by corpus
    (so the effect of the data shows on one plot), styled by role; ``paper_bleu``: the paper's base on its WMT14 dev
    set (newstest2013, Table 1), a dotted line for scale (another corpus)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    colors = dict(zip(sorted(curves["task"].dropna().unique()), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    styles = {"base": "-", "teacher": "--", "distilled": ":"}
    for name, d in curves.groupby("checkpoint", sort=True):
        d = d.sort_values("step")
        task, role = d["task"].iloc[0], d["role"].iloc[0]
        ax.plot(d["step"], d["bleu"], marker="o", ms=3, color=colors.get(task), ls=styles.get(role, "-"), label=name)
    if curves.empty:
        _no_data(ax, "no shipped translation base with a learning curve: make pretrain, make pretrain-debian")
    else:
        ax.legend(fontsize=7)
    if paper_bleu is not None:
        ax.axhline(paper_bleu, color="0.5", lw=0.8, ls=":")
        ax.annotate(f"paper's base, WMT14 newstest2013: {paper_bleu:g}", (0.01, paper_bleu),
                    xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(0, 3), fontsize=7,
                    color="0.4")
    _frame(ax, "training step", "greedy dev BLEU", "Shipped bases: dev BLEU against training steps "
           "(each on its own corpus's dev set)")
    return save(fig, out_dir, "learning_curves")
