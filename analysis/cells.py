"""Which result rows a table reads: one row per cell (the latest, fullest run), from the sweep's own folder
and one dataset, and the provenance lines printed under each table. Every table builder returns a ``Table``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

#: The Table 1 sweeps in order of preference: the paper's scale (WMT14), the Debian corpus (the main embedded
#: reproduction), the ding corpus (the small one). The first with rows is the main Table 1; the small one is
#: shown beside it.
PREFER_MT = ("table1", "table1_debian", "table1_small")
SMALL_MT = ("table1_small",)
#: The out-of-domain test a main sweep is also scored on (``decode.split=ding:test``), beside its own.
OOD_SPLIT = "ding:test"
#: The Table 2 sweeps in order of preference: CelebA at the paper's scale, the Debian photo corpus, the five
#: photographs bundled with scikit-image (the small set, shown beside a larger main sweep).
PREFER_SR = ("table2", "table2_photos", "table2_small")
SMALL_SR = ("table2_small",)
MAKE_MT = "make reproduce-mt-small"
MAKE_SR = "make reproduce-sr-small"


@dataclass
class Table:
    """One section of the report: numbers, the rows behind them, and what is missing."""

    key: str
    title: str
    data: pd.DataFrame
    source: pd.DataFrame
    missing: str | None = None
    notes: list[str] = field(default_factory=list)


def empty_like(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.iloc[0:0]


def pick_latest(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per table cell.

    Preference: the most examples (the full evaluation beats a quick check), then batch size 1 (the
    paper's timing setup), then blockwise over plain greedy (a k=1 blockwise row is the paper's k=1 cell;
    the greedy row stands in when it is absent), then the latest run.
    """
    if rows.empty:
        return rows
    r = rows.assign(
        _n=rows["n_examples"].fillna(0),
        _bs1=rows["batch_size"].fillna(1).eq(1),
        _blockwise=rows["method"].eq("blockwise"),
        _t=pd.to_datetime(rows["time"], errors="coerce"),
    )
    r = r.sort_values(["_n", "_bs1", "_blockwise", "_t"], na_position="first", kind="mergesort")
    out = r.groupby(keys, dropna=False, sort=False).tail(1)
    return out.drop(columns=["_n", "_bs1", "_blockwise", "_t"])


def restrict(rows: pd.DataFrame, prefer: tuple[str, ...], dataset_pref: str) -> pd.DataFrame:
    """The first preferred experiment that has rows (else all), from its own folder ``results/<name>/`` when
    that has rows, then one dataset so cells are comparable. Runs of the experiment written elsewhere
    (``paths.results_dir=results/studies/<study>``: reruns on another machine, levers) are side studies;
    letting their later rows win would put two sweeps, with different base models, in one table. A folder
    under ``results/studies/`` is never a sweep's own, whatever its name."""
    for name in prefer:
        if rows["experiment"].eq(name).any():
            rows = rows[rows["experiment"].eq(name)]
            home = rows["source_file"].map(lambda f, name=name: Path(str(f)).parent.name == name)
            if "is_study" in rows.columns:
                home &= ~rows["is_study"].fillna(False).astype(bool)
            if home.any():
                rows = rows[home]
            break
    if rows.empty:
        return rows
    datasets = rows["dataset"].dropna()
    if datasets.nunique() > 1:
        chosen = dataset_pref if datasets.eq(dataset_pref).any() else datasets.value_counts().index[0]
        rows = rows[rows["dataset"].eq(chosen)]
    return rows


def mt_candidates(rows: pd.DataFrame, prefer: tuple[str, ...] = PREFER_MT, split: str = "test") -> pd.DataFrame:
    """Translation rows (not benchmark rows) of the preferred experiment on ``split`` (the test split, or
    another corpus's, ``OOD_SPLIT``)."""
    if rows.empty:
        return rows
    mt = rows[rows["task"].eq("translation") & rows["split"].eq(split) & ~rows["is_bench"].astype(bool)]
    return restrict(mt, prefer, "wmt14_en_de")


def sr_candidates(rows: pd.DataFrame, prefer: tuple[str, ...] = PREFER_SR) -> pd.DataFrame:
    """Super-resolution rows (not benchmark rows) of the preferred experiment, test split first."""
    if rows.empty:
        return rows
    sr = rows[rows["task"].eq("image") & ~rows["is_bench"].astype(bool)]
    if sr["split"].eq("test").any():
        sr = sr[sr["split"].eq("test")]
    return restrict(sr, prefer, "celeba_sr")


def provenance(source: pd.DataFrame) -> dict[str, list[str]]:
    """Deduplicated commands, commits and devices of the rows behind a table, in first-seen order."""
    out: dict[str, list[str]] = {}
    for col, label in (("command", "commands"), ("git_sha", "commits"), ("device", "devices"),
                       ("experiment", "experiments")):
        if source is None or source.empty or col not in source.columns:
            out[label] = []
            continue
        vals = [str(v) for v in source[col].tolist() if v is not None and not (isinstance(v, float) and np.isnan(v))]
        out[label] = list(dict.fromkeys(vals))
    return out
