"""The peers' table of the report: `make bench-peers` rows (``results/bench-peers/rows.jsonl``), our greedy and
exact blockwise decoders beside Hugging Face transformers and CTranslate2 on the same weights, sentences and
threads, rebuilt from the rows without rerunning anything (docs/export.md).

The peers' rows are kept out of the other tables (``split_rows``): their speedups are against the greedy of
their own paired run, and their decoders are not all ``make bench``'s. A row says what its decoder is in columns
(bpd/bench/peers.py): ours their ``method`` (asked for its role), ``k`` and ``criterion_label``, a peer its
``library``, ``peer_mode`` and ``peer_quantization``; no decoder name is parsed here.
"""

from __future__ import annotations

import pandas as pd

from analysis.cells import Table
from bpd.config.methods import Role, role_of

EXPERIMENT = "bench-peers"
NO_ROWS = "No peer rows yet: run `make export` and `make bench-peers` (docs/export.md)."
#: One run per group: a later run on the same model, machine, threads and batch size replaces the earlier one
#: whole (a peer left out of the later run is not carried over from an older run's timings).
RUN_KEY = ["source_experiment", "model", "device", "threads", "batch_size"]
#: The peers in the order the table lists them, by (library, peer_mode), each with what a reader calls it;
#: CTranslate2's rows then by their weights.
PEER_LABELS: dict[tuple[str, str], str] = {
    ("transformers", "greedy"): "HF generate greedy",
    ("transformers", "blockwise"): "HF blockwise",
    ("transformers", "assisted"): "HF assisted generation",
    ("transformers", "prompt_lookup"): "HF prompt lookup",
    ("ctranslate2", "greedy"): "CTranslate2 greedy",
}
PEER_ORDER = list(PEER_LABELS)
QUANTIZATION_ORDER = ["float32", "int8"]
COLUMNS = [
    "source_experiment",
    "device",
    "threads",
    "batch_size",
    "decoder",
    "decoder_label",
    "library",
    "tokens_per_s",
    "speedup",
    "speedup_ci",
    "bleu",
    "identical_to_greedy",
    "best_vs_peer",
    "best_vs_peer_ci",
    "n_examples",
    "repeats",
    "load_other_cores",
    "timing_busy",
]
SPEC: list[tuple[str, str, str]] = [
    ("source_experiment", "Model of", "s"),
    ("device", "device", "s"),
    ("threads", "threads", "d"),
    ("batch_size", "batch", "d"),
    ("decoder_label", "decoder", "s"),
    ("tokens_per_s", "tokens/s", "f1"),
    ("speedup", "speedup", "x"),
    ("speedup_ci", "95% CI", "s"),
    ("bleu", "BLEU", "f2"),
    ("identical_to_greedy", "= greedy", "pct"),
    ("best_vs_peer", "ours best / peer", "x"),
    ("best_vs_peer_ci", "95% CI", "s"),
    ("n_examples", "n", "d"),
    ("load_other_cores", "others' cores", "f2"),
]


def split_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every other row, the peers' rows)."""
    if rows.empty or "experiment" not in rows.columns:
        return rows, rows.iloc[0:0]
    peer = rows["experiment"].eq(EXPERIMENT)
    return rows[~peer], rows[peer]


def _given(v) -> bool:
    return v is not None and not (isinstance(v, float) and pd.isna(v))


def label(row: pd.Series) -> str:
    """What a reader calls the row's decoder, from the columns that say what it is."""
    role = role_of(row.get("method"))
    # our decoders on the compiled path say so: the table holds each decoder on both paths
    path = f" ({row['engine']})" if _given(row.get("engine")) and row.get("engine") != "eager" else ""
    if role is Role.REFERENCE:
        return f"ours: greedy{path}"
    if role is Role.CHAIN:
        return f"ours: blockwise k={int(row['k'])} {row['criterion_label']}{path}"
    if role is not None:
        return f"ours: {row['decoder']}{path}"
    name = PEER_LABELS.get((row.get("library"), row.get("peer_mode")))
    if name is None:
        return str(row["decoder"])
    if row.get("peer_mode") == "blockwise" and _given(row.get("k")):
        name += f" k={int(row['k'])} exact"
    n = row.get("prompt_lookup_num_tokens")
    if row.get("peer_mode") == "prompt_lookup" and _given(n):
        name += f" ({int(n)})"
    q = row.get("peer_quantization")
    return f"{name} {q}" if _given(q) else name


def _interval(lo, hi) -> str:
    return "—" if pd.isna(lo) or pd.isna(hi) else f"[{lo:.2f}, {hi:.2f}]"


def _order(row: pd.Series) -> tuple[int, int, int]:
    """Ours first, by role and k; then the peers in ``PEER_ORDER``, CTranslate2's by their weights."""
    role = role_of(row.get("method"))
    if role is not None:
        return 0, int(role), int(row["k"])
    peer = (row.get("library"), row.get("peer_mode"))
    q = row.get("peer_quantization")
    k = int(row["k"]) if row.get("peer_mode") == "blockwise" and _given(row.get("k")) else 0
    return (1, PEER_ORDER.index(peer) if peer in PEER_ORDER else len(PEER_ORDER),
            QUANTIZATION_ORDER.index(q) if q in QUANTIZATION_ORDER else len(QUANTIZATION_ORDER) + k)


def latest_runs(peer_rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the latest run in each (model, machine, threads, batch size) group."""
    if peer_rows.empty:
        return peer_rows
    r = peer_rows.copy()
    for c in RUN_KEY:
        if c not in r.columns:
            r[c] = None
    t = pd.to_datetime(r["time"], errors="coerce")
    keys = r[RUN_KEY].astype(str).agg("|".join, axis=1)
    newest = t.groupby(keys).transform("max")
    return r[t.eq(newest)]


def peers_table(peer_rows: pd.DataFrame) -> Table:
    """Our decoders beside the peers: tokens/s, speedup over our greedy with its 95% interval, BLEU,
    identical-to-greedy, and our best exact decoder's paired speedup over each peer."""
    title = "Peers: Hugging Face transformers and CTranslate2 on the same weights (ours only)"
    if peer_rows.empty:  # an optional section: said in its body, not among the report's missing inputs
        t = Table("peers", title, pd.DataFrame(columns=COLUMNS), peer_rows)
        t.notes.append(NO_ROWS)
        return t
    src = latest_runs(peer_rows)
    data = src.copy()
    for c in COLUMNS + ["speedup_ci_low", "speedup_ci_high", "best_vs_peer_ci_low", "best_vs_peer_ci_high"]:
        if c not in data.columns:
            data[c] = None
    data["decoder_label"] = [label(r) for _, r in data.iterrows()]
    data["speedup_ci"] = [_interval(lo, hi) for lo, hi in zip(data["speedup_ci_low"], data["speedup_ci_high"])]
    data["best_vs_peer_ci"] = [
        _interval(lo, hi) for lo, hi in zip(data["best_vs_peer_ci_low"], data["best_vs_peer_ci_high"])
    ]
    data["_o"] = [_order(r) for _, r in data.iterrows()]
    data = data.sort_values(["source_experiment", "device", "threads", "batch_size", "_o"], kind="mergesort")
    t = Table("peers", title, data[COLUMNS].reset_index(drop=True), src)
    t.notes.append(
        "Each group (model, machine, threads, batch size) is one paired round-robin run (`make bench-peers`, "
        "bpd/bench/peers.py): speedup = our greedy's time over the decoder's with its 95% bootstrap interval; "
        "ours best / peer = our best exact decoder's paired speedup over that peer (> 1: ours is faster); "
        "= greedy: outputs token-identical to our greedy's. The peers decode the base model (p_1) exported "
        "to transformers (Pegasus layout) and converted by CTranslate2; the proposal heads stay ours."
    )
    drafts = (
        sorted({str(d) for d in src.loc[src["peer_mode"].eq("assisted"), "draft_model"].dropna()})
        if "draft_model" in src.columns and "peer_mode" in src.columns
        else []
    )
    if drafts:
        t.notes.append(
            "HF assisted generation's draft: "
            + ", ".join(f"`{d}`" for d in drafts)
            + " (our draft model exported the same way; transformers' default draft schedule)."
        )
    if (src["batch_size"] > 1).any():
        t.notes.append(
            "Batch > 1 has no assisted or prompt-lookup rows: transformers' `generate` runs both at batch size 1 only."
        )
    if "timing_busy" in src.columns and src["timing_busy"].fillna(False).astype(bool).any():
        t.notes.append(
            "Some groups were timed while other processes took CPU the decoders' threads needed "
            "(others' cores: the CPU, in cores, other processes used on average; bpd/machine_load.py). "
            "Pairing cancels a load that comes and goes, not a steady one."
        )
    return t
