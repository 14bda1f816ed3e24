"""The report's peers table (analysis/peers.py): `make bench-peers` rows rebuilt by `make figures` beside our
decoders, kept out of the benchmark table, one run per (model, machine, threads, batch size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pandas as pd  # noqa: E402

from analysis import make_report, peers  # noqa: E402
from analysis.load import load_rows  # noqa: E402

#: What each decoder of these rows is, in the columns bpd/bench/peers.py writes (ours: a spec's; a peer: its
#: library, mode and weights); the report reads these, not the names.
NOT_OURS = {"method": None, "k": None, "criterion": None, "criterion_label": None}
NOT_A_PEER = {"peer_mode": None, "peer_quantization": None}
KINDS = {
    "greedy": {"method": "greedy", "k": 1, "criterion": None, "criterion_label": None, "library": "bpd",
               **NOT_A_PEER},
    "blockwise_k4_exact": {"method": "blockwise", "k": 4, "criterion": "exact", "criterion_label": "exact",
                           "library": "bpd", **NOT_A_PEER},
    "hf_greedy": {**NOT_OURS, "library": "transformers", "peer_mode": "greedy", "peer_quantization": None},
    "hf_assisted": {**NOT_OURS, "library": "transformers", "peer_mode": "assisted", "peer_quantization": None},
    "hf_prompt_lookup": {**NOT_OURS, "library": "transformers", "peer_mode": "prompt_lookup",
                         "peer_quantization": None},
    "ct2_float32": {**NOT_OURS, "library": "ctranslate2", "peer_mode": "greedy", "peer_quantization": "float32"},
    "ct2_int8": {**NOT_OURS, "library": "ctranslate2", "peer_mode": "greedy", "peer_quantization": "int8"},
}


def peer_row(decoder: str, batch: int, time: str, speedup: float, **extra) -> dict:
    is_peer = KINDS[decoder]["method"] is None
    return {
        "experiment": "bench-peers",
        "source_experiment": "demo",
        "task": "translation",
        "dataset": "ding_en_de",
        "split": "test",
        "model": "heads.pt",
        "device": "cpu:test x2 threads",
        "threads": 2,
        "batch_size": batch,
        "time": time,
        "command": "python experiments/bench_peers.py experiment=demo",
        "git_sha": "abc",
        "decoder": decoder,
        **KINDS[decoder],
        "n_examples": 16,
        "repeats": 3,
        "tokens_per_s": 100 * speedup,
        "speedup": speedup,
        "speedup_ci_low": speedup - 0.01,
        "speedup_ci_high": speedup + 0.01,
        "bleu": 5.0,
        "identical_to_greedy": 1.0,
        "best_exact": "blockwise_k4_exact",
        "prompt_lookup_num_tokens": 10,
        "best_vs_peer": 1.2 / speedup if is_peer else None,
        "best_vs_peer_ci_low": 1.1 / speedup if is_peer else None,
        "best_vs_peer_ci_high": 1.3 / speedup if is_peer else None,
        "draft_model": "draft.pt",
        "load_other_cores": 0.1,
        "timing_busy": False,
        **extra,
    }


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_peers_table_in_the_report(tmp_path) -> None:
    res = tmp_path / "results"
    old = "2026-12-01T10:00:00"
    new = "2026-12-04T10:00:00"
    write(
        res / "bench-peers" / "rows.jsonl",
        [
            # an older batch-1 run with a CTranslate2 row the newer run does not have: not carried over
            peer_row("greedy", 1, old, 1.0),
            peer_row("ct2_int8", 1, old, 3.0),
            peer_row("greedy", 1, new, 1.0),
            peer_row("blockwise_k4_exact", 1, new, 1.2),
            peer_row("hf_greedy", 1, new, 0.7),
            peer_row("hf_assisted", 1, new, 0.5),
            peer_row("hf_prompt_lookup", 1, new, 0.65),
            peer_row("ct2_float32", 1, new, 1.6),
            peer_row("greedy", 8, new, 1.0, peers_batch_one_only="hf_assisted, hf_prompt_lookup"),
            peer_row("hf_greedy", 8, new, 0.8, timing_busy=True, load_other_cores=0.9),
        ],
    )
    write(
        res / "bench" / "rows.jsonl",
        [
            {
                "experiment": "bench",
                "source_experiment": "demo",
                "task": "translation",
                "dataset": "ding_en_de",
                "split": "test",
                "model": "heads.pt",
                "batch_size": 1,
                "decoder": "greedy",
                "method": "greedy",
                "k": 1,
                "speedup": 1.0,
                "time": new,
                "device": "cpu:test x2 threads",
                "t1_ms": 1.0,
                "n_examples": 16,
            }
        ],
    )
    rc = make_report.main(["--results", str(res), "--out", str(res / "figures"), "--report", str(res / "REPORT.md")])
    assert rc == 0
    md = (res / "REPORT.md").read_text()
    section = md[md.index("## Peers") : md.index("## Inputs")]
    assert "| demo | cpu:test x2 threads | 2 | 1 | ours: greedy | 100.0 | 1.00x |" in section
    assert "| HF prompt lookup (10) |" in section and "| HF assisted generation |" in section
    assert (
        "| CTranslate2 greedy float32 | 160.0 | 1.60x | [1.59, 1.61] | 5.00 | 100.0% | 0.75x | [0.69, 0.81] |"
        in section
    )
    assert "CTranslate2 greedy int8" not in section  # the older run's row does not come back
    assert "batch size 1 only" in section and "`draft.pt`" in section and "timed while other processes" in section
    # our decoders come first in each group, then the peers in a fixed order
    order = [line.split(" | ")[4] for line in section.splitlines() if line.startswith("| demo |")]
    assert order == [
        "ours: greedy",
        "ours: blockwise k=4 exact",
        "HF generate greedy",
        "HF assisted generation",
        "HF prompt lookup (10)",
        "CTranslate2 greedy float32",
        "ours: greedy",
        "HF generate greedy",
    ]
    # the ordinary benchmark table keeps only make bench's rows
    bench = md[md.index("## Wall-clock benchmark") : md.index("## Beyond the paper")]
    assert "hf_greedy" not in bench and "ct2_float32" not in bench


def test_labels_and_order_come_from_columns_not_names() -> None:
    """A row is labelled and placed by what its columns say it is, whatever its decoder is called."""
    ours = pd.Series({"decoder": "renamed", "method": "blockwise", "k": 6, "criterion_label": "topk 2"})
    peer = pd.Series({"decoder": "renamed", "method": None, "library": "ctranslate2", "peer_mode": "greedy",
                      "peer_quantization": "int8"})
    lookup = pd.Series({"decoder": "renamed", "method": None, "library": "transformers", "peer_mode": "prompt_lookup",
                        "peer_quantization": None, "prompt_lookup_num_tokens": 3})
    assert peers.label(ours) == "ours: blockwise k=6 topk 2"
    compiled = pd.Series({"decoder": "greedy", "method": "greedy", "engine": "compiled"})
    assert peers.label(compiled) == "ours: greedy (compiled)"  # both paths of a decoder share a table
    assert peers.label(peer) == "CTranslate2 greedy int8" and peers.label(lookup) == "HF prompt lookup (3)"
    assert peers._order(ours) < peers._order(lookup) < peers._order(peer)
    hf_k2, hf_k4 = (pd.Series({"decoder": "renamed", "method": None, "library": "transformers",
                               "peer_mode": "blockwise", "peer_quantization": None, "k": k, "criterion": "exact"})
                    for k in (2, 4))
    assert peers.label(hf_k4) == "HF blockwise k=4 exact"
    assert peers._order(ours) < peers._order(hf_k2) < peers._order(hf_k4) < peers._order(lookup)


def test_no_peer_rows_says_what_to_run(tmp_path) -> None:
    res = tmp_path / "results"
    res.mkdir()
    t = peers.peers_table(peers.split_rows(load_rows(res))[1])
    assert t.data.empty and t.missing is None and "make bench-peers" in t.notes[0]
