"""Spec-Bench's answer-record format (hemingkx/Spec-Bench, ``evaluation/speed.py``): our decodes written as
the per-example records its speed script reads, and its speedup formula recomputed from them, so the two
speedup definitions can stand side by side (docs/benchmark.md)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bpd.decoding.timed import RunOutput


def specbench_records(out: RunOutput, model_id: str, category: str,
                      detok: Callable[[list[int]], str] | None = None) -> list[dict[str, Any]]:
    """One decoder's per-example records in Spec-Bench's answer format (``evaluation/speed.py`` reads a
    method's file and a baseline's file of these): ``turns`` the output text (``token_ids`` the ids),
    ``new_tokens``, ``wall_time`` (at batch > 1 the example's share of its batch's time, said by
    ``wall_time_is``), ``decoding_steps`` and ``accept_lengths`` (tokens kept per round; they sum to
    ``new_tokens``)."""
    recs = []
    for i, toks in enumerate(out.tokens):
        size = out.example_batch_size[i] if out.example_batch_size else 1
        recs.append({
            "question_id": i,
            "answer_id": f"{model_id}-{i}",
            "category": category,
            "model_id": model_id,
            "choices": [{
                "index": 0,
                "turns": [detok(toks) if detok else " ".join(map(str, toks))],
                "token_ids": [toks],
                "new_tokens": [len(toks)],
                "wall_time": [out.example_wall_s[i] / size if out.example_wall_s else None],
                "wall_time_is": "example" if size == 1 else f"share of a batch of {size}",
                "decoding_steps": [out.iterations[i]],
                "accept_lengths": out.block_sizes[i],
            }],
            "tstamp": time.time(),
        })
    return recs


def specbench_speed(method: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, float]:
    """Spec-Bench's figures from two record lists, by its documented formula: the mean over examples of
    tokens / wall time, method over baseline (baseline tokens from ``new_tokens``: what speed.py's
    re-tokenisation of ``turns`` counts with the model's own tokenizer); mean accepted tokens = the mean of
    all ``accept_lengths``. Our ``speedup`` is instead total greedy time / total method time."""
    def speeds(recs: list[dict[str, Any]]) -> list[float]:
        return [sum(r["choices"][0]["new_tokens"]) / sum(r["choices"][0]["wall_time"]) for r in recs]

    lengths = [n for r in method for n in r["choices"][0]["accept_lengths"]]
    return {"speedup": statistics.mean(speeds(method)) / statistics.mean(speeds(baseline)),
            "mean_accepted_tokens": statistics.mean(lengths) if lengths else float("nan")}


def write_jsonl(path: Path, recs: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
