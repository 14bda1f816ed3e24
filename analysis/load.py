"""Reading result rows and the paper's reference numbers into tidy DataFrames.

Rows are appended by several processes over days, so the reader names a line cut by a crash (refused unless
the caller accepts leaving it out), tolerates columns that older code did not write, and keeps the latest run of a
configuration decoded more than once (it is the one the code now produces).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

ANALYSIS_DIR = Path(__file__).resolve().parent
REPO_ROOT = ANALYSIS_DIR.parent
PAPER_CSV = ANALYSIS_DIR / "paper_reference.csv"
PUBLISHED_CSV = ANALYSIS_DIR / "published_reference.csv"  # other methods' published figures (docs/beyond.md)
PAPER_SOURCE = "paper (Stern et al. 2018)"
SHIPPED_DIR = REPO_ROOT / "checkpoints"  # the shipped base models and their manifests (docs/pretrained.md)

#: Side studies live in ``results/studies/<name>/`` (at any depth): read, but never a sweep's own folder.
STUDIES_DIR = "studies"

MT_SETTINGS = ("regular", "distillation", "finetune", "both")
#: Our labelled recipes beside the paper's columns (conf/setting/*_gentle.yaml, *_anchored.yaml): shown as their own
#: rows with no paper value, never merged into the paper's fine-tuning columns whose recipe they are not.
MT_VARIANTS = ("finetune_gentle", "both_gentle", "finetune_anchored", "both_anchored")
MT_ROWS = MT_SETTINGS + MT_VARIANTS  # Table 1's rows: the paper's columns, then our labelled recipes
SR_SETTINGS = ("regular", "approximate", "finetune", "both")
#: The epsilon of the paper's "approximate" (distance) acceptance for images.
PAPER_EPS = 2.0

#: Columns every later step reads; missing ones are added as empty so that old or partial rows still load.
EXPECTED_COLUMNS = (
    "run_id experiment task dataset split model model_preset trained_k heads_arch heads_tied identity_p1 "
    "heads_training heads_targets distilled setting batch_size dtype device threads seed git_sha command time "
    "decoder method k criterion criterion_param min_block_size beam_size n_examples output_tokens iterations "
    "mean_block_size identical_to_greedy wallclock_s greedy_wallclock_s speedup acceptance_rate_per_position bleu "
    "psnr psnr_vs_greedy pixel_agreement_with_greedy grid_file grid_columns source_experiment t1_ms tk_ms "
    "step_cost_ratio ideal_speedup efficiency predicted_speedup efficiency_vs_predicted efficiency_ceiling "
    "tokens_per_s speedup_min speedup_max peak_mem_mb compile tree tree_nodes rescore_beam rescore_weight "
    "draft_model speedup_ci_low speedup_ci_high speedup_vs_chain speedup_vs_chain_ci_low speedup_vs_chain_ci_high "
    "train_steps timing_busy timing_note load_other_cores load_self_cores proposal_precision proposal_vocab engine"
).split()

NUMERIC_COLUMNS = (
    "tree_nodes speedup_ci_low speedup_ci_high speedup_vs_chain speedup_vs_chain_ci_low speedup_vs_chain_ci_high "
    "k trained_k batch_size min_block_size beam_size n_examples criterion_param bleu psnr psnr_vs_greedy "
    "pixel_agreement_with_greedy mean_block_size identical_to_greedy speedup wallclock_s greedy_wallclock_s "
    "t1_ms tk_ms step_cost_ratio ideal_speedup efficiency predicted_speedup efficiency_vs_predicted efficiency_ceiling "
    "tokens_per_s speedup_min speedup_max peak_mem_mb train_steps load_other_cores load_self_cores proposal_vocab"
).split()

#: What makes two rows "the same configuration": re-runs of it differ only in run_id, git_sha and time. The model
#: file name carries a hash of its training config, so differently trained models never collapse into one. A
#: study's re-run (``is_study``) never replaces a sweep's row.
CONFIG_KEY = (
    "experiment source_experiment task dataset split table_setting model heads_arch trained_k model_preset identity_p1 "
    "heads_targets batch_size dtype device compile engine decoder method k criterion criterion_param min_block_size "
    "beam_size "
    "n_examples is_bench is_study"
).split()


def _mark_arch(df: pd.DataFrame, rows: pd.Series, suffix: str | pd.Series) -> None:
    """Append ``suffix`` to the head architecture of ``rows``: the label every table and figure line, and the
    configuration key, read, so that marked rows neither replace nor read as the unmarked ones."""
    df.loc[rows, "heads_arch"] = df.loc[rows, "heads_arch"].fillna("?").astype(str) + suffix


class DamagedRows(ValueError):
    """A rows file with lines that do not parse as rows, read without ``accept_damaged``."""


def read_jsonl(path: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Parse one JSON-lines file line by line.

    ``pandas.read_json(lines=True)`` rejects the whole file when one line is malformed (a writer killed
    mid-line); parsing each line keeps every good row. Each line left out (and an unreadable file) is named
    with why in ``skipped`` (``<file> line <n>: <why>``): the caller decides whether that fails the report.
    """
    rows: list[dict[str, Any]] = []
    skipped = [] if skipped is None else skipped
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        skipped.append(f"{path}: unreadable ({e.strerror or e})")
        return rows
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            skipped.append(f"{path} line {lineno}: not JSON ({e.msg}, column {e.colno})")
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            skipped.append(f"{path} line {lineno}: not a row (a JSON {type(obj).__name__})")
    return rows


def refuse_damaged(skipped: list[str], accept_damaged: bool, log=print) -> None:
    """Rows files must parse whole: a damaged line (a run killed mid-write, a bad merge) would change a cell of
    the report without a word. Refused in one sentence naming the first line and the fix; ``accept_damaged``
    builds the report without them, naming each one."""
    if not skipped:
        return
    if not accept_damaged:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise DamagedRows(f"{skipped[0]}{more}; mend or delete the damaged line, or accept leaving it out "
                          "(make figures ACCEPT_DAMAGED=1, or --accept-damaged).")
    for s in skipped:
        log(f"skipped {s}")


#: Result folders whose rows are not decoding rows (data-path and training-step measurements).
NOT_DECODING = ("scale", "train-step")


def result_files(results_dir: Path) -> list[Path]:
    """``results/<experiment>/rows.jsonl``, any ``results/<dir>/bench*.jsonl`` (benchmark rows) and every
    ``rows.jsonl`` under ``results/studies/`` (side studies, grouped in subfolders as needed).

    Other nested files are not read: ``results/bench/<ab>/*.jsonl`` or ``results/<x>/outputs/`` stay out, and
    so do ``results/scale/`` (data-path measurements of ``make scale-check``) and ``results/train-step/``
    (``bench/train_step.py``): not decoding rows.
    """
    if not results_dir.is_dir():
        return []
    files = set(results_dir.glob("*/rows.jsonl")) | set(results_dir.glob("*/bench*.jsonl"))
    files -= {f for name in NOT_DECODING for f in results_dir.glob(f"{name}/*")}
    studies = results_dir / STUDIES_DIR
    if studies.is_dir():
        files |= set(studies.rglob("rows.jsonl"))
    return sorted(files)


def _is_study_file(path: Path, results_dir: Path) -> bool:
    return path.relative_to(results_dir).parts[0] == STUDIES_DIR


def _is_bench_file(path: Path) -> bool:
    return path.parent.name.startswith("bench") or path.name.startswith("bench")


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _flag(v: Any) -> bool:
    """A yes/no column; rows from before it was recorded count as no."""
    return not _is_missing(v) and bool(v)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def table_setting(row: pd.Series | dict[str, Any]) -> str | None:
    """The paper's column a row belongs to.

    Translation: the recorded ``setting`` when it is one of the paper's four or one of our labelled variants
    (``MT_VARIANTS``), else derived from ``heads_training`` and ``distilled`` (ad-hoc runs record none or their
    own label). Images: the paper's
    Table 2 columns are frozen/fine-tuned crossed with exact/distance acceptance, so they are derived from
    ``heads_training`` and ``criterion`` (greedy rows, which have no criterion, count as exact).
    """
    training = row.get("heads_training")
    training = None if _is_missing(training) else str(training)
    if row.get("task") == "image":
        if training not in ("frozen", "finetune"):
            return None
        crit = row.get("criterion")
        crit = "exact" if _is_missing(crit) else str(crit)
        if crit == "exact":
            return "regular" if training == "frozen" else "finetune"
        if crit == "distance":
            return "approximate" if training == "frozen" else "both"
        return None
    setting = row.get("setting")
    if not _is_missing(setting) and str(setting) in MT_ROWS:
        return str(setting)
    if training not in ("frozen", "finetune"):
        return None
    distilled = row.get("distilled")
    distilled = False if _is_missing(distilled) else bool(distilled)
    return {
        ("frozen", False): "regular",
        ("frozen", True): "distillation",
        ("finetune", False): "finetune",
        ("finetune", True): "both",
    }[(training, distilled)]


def _hashable(v: Any) -> Any:
    """Dicts and lists cannot be compared by drop_duplicates; a JSON string of them can."""
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True)
    return v


def dedupe_latest(df: pd.DataFrame) -> pd.DataFrame:
    """Keep one row per configuration, the one with the latest ``time`` (file order breaks ties)."""
    if df.empty:
        return df
    key = [c for c in CONFIG_KEY if c in df.columns]
    keyed = df[key].map(_hashable)
    order = df.assign(_t=pd.to_datetime(df["time"], errors="coerce"), _line=range(len(df)))
    order = order.sort_values(["_t", "_line"], na_position="first", kind="mergesort")
    keep = ~keyed.loc[order.index].duplicated(keep="last")
    return df.loc[order.index[keep.to_numpy()]].sort_index()


def load_rows(results_dir: Path, accept_damaged: bool = False) -> pd.DataFrame:
    """All result rows under ``results_dir``, with derived columns, deduplicated; a line that does not parse is
    refused (``DamagedRows``), or with ``accept_damaged`` left out and named (``df.attrs["skipped"]``).

    Added columns: ``table_setting`` (the paper's column), ``is_bench`` (benchmark rows, kept out of the
    paper's tables), ``is_study`` (rows under ``results/studies/``, never a sweep's own folder),
    ``source_file`` and ``time_parsed``.
    """
    records: list[dict[str, Any]] = []
    results_dir = Path(results_dir)
    skipped: list[str] = []
    for path in result_files(results_dir):
        bench = _is_bench_file(path)
        study = _is_study_file(path, results_dir)
        for r in read_jsonl(path, skipped):
            r = dict(r)
            r["source_file"] = str(path)
            r["is_bench"] = bool(bench or not _is_missing(r.get("t1_ms")))
            r["is_study"] = study
            records.append(r)
    refuse_damaged(skipped, accept_damaged)
    df = rows_frame(records)
    df.attrs["skipped"] = skipped
    return df


def rows_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """``load_rows``' frame of rows from anywhere (``analysis.wandb_runs``: W&B runs), each with ``source_file``,
    ``is_bench`` and ``is_study`` set."""
    df = pd.DataFrame.from_records(records)
    for c in EXPECTED_COLUMNS:
        if c not in df.columns:
            df[c] = None
    for c in NUMERIC_COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    # Decoding rows carry compile, engine, proposal_precision, timing_busy and heads_tied; rows of other kinds (a
    # training step's) have none of them.
    df["compile"] = df["compile"].map(_flag).astype(bool)
    df["engine"] = df["engine"].astype(str)
    # Timed while other processes took the decoder's cores (bpd.machine_load): figures leave those speedups out.
    df["timing_busy"] = df["timing_busy"].map(_flag).astype(bool)
    # Tied slots are another head architecture to every table and figure line: without the mark a tied model's
    # bench rows read as (and, in Figure 4, replace) the untied model's.
    _mark_arch(df, df["heads_tied"].map(_flag).astype(bool), " tied")
    # int8 proposal chains (decode.proposal_precision) are the same heads run another way: the same mark, so that an
    # int8 run of a model neither replaces its float run nor reads as it.
    _mark_arch(df, df["proposal_precision"] == "int8", " int8")
    # So is a decode-time proposal vocabulary other than the one a model usually runs with (decode.proposal_vocab;
    # rows name no training vocabulary, so "usually" is the most frequent value among that model file's rows; rows
    # from before the field existed, or naming no model file, count as usual).
    vocab = df["proposal_vocab"]
    usual = vocab.groupby(df["model"]).transform(lambda v: v.mode().min() if v.notna().any() else None)
    other = vocab.notna() & usual.notna() & (vocab != usual)
    _mark_arch(df, other, " vocab " + vocab[other].astype(int).astype(str))
    if df.empty:
        for c in ("table_setting", "source_file"):
            df[c] = pd.Series(dtype=object)
        df["is_bench"] = pd.Series(dtype=bool)
        df["is_study"] = pd.Series(dtype=bool)
        df["time_parsed"] = pd.Series(dtype="datetime64[ns]")
        return df
    df["table_setting"] = df.apply(table_setting, axis=1)
    df = dedupe_latest(df.reset_index(drop=True)).reset_index(drop=True)
    df["time_parsed"] = pd.to_datetime(df["time"], errors="coerce")
    return df


def load_paper(path: Path = PAPER_CSV) -> pd.DataFrame:
    """The paper's numbers (``analysis/paper_reference.csv``), typed."""
    df = pd.read_csv(path)
    for c in ("k", "criterion_param", "bleu", "mean_block_size", "speedup"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def paper_value(paper: pd.DataFrame, table: str, setting: str | None, k: float | None, column: str,
                criterion_param: float | None = None) -> float | None:
    """One cell of the paper's tables, or None where the paper reports nothing."""
    sel = paper[paper["table"] == table]
    if setting is not None:
        sel = sel[sel["setting"] == setting]
    if k is not None:
        sel = sel[sel["k"] == k]
    if criterion_param is not None:
        sel = sel[sel["criterion_param"] == criterion_param]
    if sel.empty:
        return None
    return _num(sel.iloc[0][column])


def load_learning_curves(shipped_dir: Path = SHIPPED_DIR) -> pd.DataFrame:
    """The shipped translation bases' learning curves from their manifests (``learning_curve``: greedy dev BLEU
    every ``train.score_every`` steps): one row per checkpoint and step, with its corpus (``task``) and role."""
    rows = []
    for path in sorted(Path(shipped_dir).glob("*.json")):
        m = json.loads(path.read_text(encoding="utf-8"))
        for point in m.get("learning_curve") or []:
            if "dev/bleu" in point:
                rows.append({"checkpoint": path.stem, "task": m.get("task"), "role": m.get("role"),
                             "step": int(point["step"]), "bleu": float(point["dev/bleu"])})
    return pd.DataFrame(rows, columns=["checkpoint", "task", "role", "step", "bleu"])
