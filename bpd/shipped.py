"""Shipped models: checkpoints trained once by ``make pretrain`` (base models) or ``experiments/pretrain.py
models=[heads]`` (a Table 1 setting's heads model, base and heads together) and committed under ``checkpoints/``,
so that the demo and the small reproductions start from the same good models on every machine.

A shipped checkpoint is a cached stage product that travels: ``checkpoints/<name>.pt`` holds the weights
(fp16: half the bytes; the training run's fp32 weights rounded once) and ``checkpoints/<name>.json`` its
manifest: the cache file name the model has under its config (``stages.base_path_for``), the fingerprint of
the data and tokenizer it was trained with, its steps, learning curve and dev/test scores, and the command
and commit that made it. When a run needs a base model whose cache file name a manifest names, the shipped
weights are installed there (as fp32) instead of training; with other data the run refuses with the fix
rather than decode garbage. ``shipped=false`` (``make demo FROM_SCRATCH=1``) trains everything anew.

A translation base also ships its greedy outputs on the training sources (``<name>.greedy.npz``, named by
the manifest's ``greedy_train``): the self-distillation targets the demo's heads train on. A run whose base
is the installed shipped one reads them instead of decoding 13k sentences, so its heads see the same
targets on every machine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bpd.integrity import file_digest
from bpd.runtime import repo_relative, resolve_path
from bpd.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def manifests(shipped_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The shipped checkpoints' manifests by the cache file name each one installs as."""
    folder = resolve_path(shipped_dir)
    out = {}
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        m = json.loads(f.read_text())
        out[m["cache_name"]] = {**m, "manifest": f}
    return out


def refuse_other_data(name: str, fingerprint: str, shipped_dir: str | Path) -> None:
    """Before an export's training: a shipped model of other data (phrase pairs, another vocabulary) is not
    replaced by ``<shipped_dir>/<name>``. Retraining on the same data (a longer budget, another recipe) replaces it."""
    manifest = resolve_path(shipped_dir) / f"{name}.json"
    shipped = json.loads(manifest.read_text()).get("fingerprint") if manifest.is_file() else None
    if shipped not in (None, fingerprint):
        raise ValueError(
            f"{manifest} ships a model of other data (fingerprint {shipped}, this data {fingerprint}); "
            f"export this one elsewhere with paths.shipped_dir=<folder>, or delete that manifest to replace it.")


def install(path: Path, fingerprint: str, shipped_dir: str | Path) -> bool:
    """Write the shipped checkpoint whose manifest names ``path.name`` to ``path`` (fp32), if there is one;
    False if none is shipped for it. Data other than the one it was trained on is refused with the fix."""
    m = manifests(shipped_dir).get(path.name)
    if m is None:
        return False
    what = "heads model" if m.get("role") == "heads" else "base model"
    if m["fingerprint"] != fingerprint:
        raise CheckpointError(
            f"the shipped {what} {m['manifest'].name} was trained on other data or another tokenizer than this run "
            f"has (fingerprint {m['fingerprint']} vs {fingerprint}); run with shipped=false (make ... "
            f"FROM_SCRATCH=1) to train a {what} on your data."
        )
    payload = load_checkpoint(verified(m["manifest"]))
    payload["model"] = _widened(payload["model"])
    payload["shipped"] = repo_relative(m["manifest"].with_suffix(".pt"))
    save_checkpoint(path, payload)
    print(f"{what}: the shipped {payload['shipped']} ({m['steps']} steps, dev {m['dev']})")
    return True


def _halved(state: dict[str, Any]) -> dict[str, Any]:
    """fp16 copies of a state's floating tensors, one per tensor the model shares between names (the tied
    source, target and output embeddings): a copy per name would store the embedding three times."""
    copies: dict[tuple, Any] = {}
    out = {}
    for k, v in state.items():
        if not v.is_floating_point():
            out[k] = v
            continue
        same = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if same not in copies:
            copies[same] = v.half()
        out[k] = copies[same]
    return out


def _widened(state: dict[str, Any]) -> dict[str, Any]:
    """Shipped fp16 weights as runs use them (fp32)."""
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def already_shipped(path: Path, name: str, shipped_dir: str | Path) -> bool:
    """Whether ``<shipped_dir>/<name>`` already holds the finished checkpoint ``path`` (same cache file,
    same number of steps), so exporting it again would change nothing but the manifest's date."""
    folder = resolve_path(shipped_dir)
    manifest = folder / f"{name}.json"
    if not manifest.exists() or not (folder / f"{name}.pt").exists():
        return False
    shipped = json.loads(manifest.read_text())
    payload = load_checkpoint(path)
    return shipped.get("cache_name") == path.name and shipped.get("steps") == payload["step"] and payload.get(
        "final", True)


def export(path: Path, name: str, fingerprint: str, shipped_dir: str | Path, scores: dict[str, Any],
           extra: dict[str, Any] | None = None, sample: list[list[int]] | None = None,
           sample_max_len: int | None = None) -> Path:
    """Write the finished checkpoint ``path`` as ``<shipped_dir>/<name>.pt`` (fp16 weights, no optimizer
    state) with its manifest ``<name>.json``; returns the manifest's path. ``sample`` sources become the
    manifest's golden sample (``golden_sample``), decoded by the weights as shipped."""
    payload = load_checkpoint(path)
    if not payload.get("final", True):
        raise CheckpointError(f"{path} is not a finished checkpoint; let its training finish first.")
    folder = resolve_path(shipped_dir)
    folder.mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in payload.items() if k not in ("optimizer", "rng", "best")}
    slim["model"] = _halved(payload["model"])
    save_checkpoint(folder / f"{name}.pt", slim)
    # The learning curve: every scored evaluation (train.score_every), with the dev loss where it was taken.
    curve = [{k: v for k, v in row.items() if k == "step" or (k.startswith("dev/") and k != "dev/score")}
             for row in payload.get("history", []) if "dev/score" in row]
    manifest = {
        "name": name,
        "cache_name": path.name,
        "fingerprint": fingerprint,
        "steps": payload["step"],
        "stopped_by": payload.get("stopped_by"),
        "train_minutes": round(payload.get("elapsed", 0.0) / 60, 1),
        "best_step": payload.get("best_step"),
        **scores,
        "parameters": sum(v.numel() for v in payload["model"].values()),
        "bytes": (folder / f"{name}.pt").stat().st_size,
        "sha256": file_digest(folder / f"{name}.pt"),  # checked before the weights are used (``verified``)
        "model_config": payload["model_config"],
        "train_config": payload["train_config"],
        "trained_by": {k: payload.get("meta", {}).get(k) for k in ("command", "git_sha")},
        "exported": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "learning_curve": curve,
        **(extra or {}),
    }
    if sample:
        manifest["golden_sample"] = golden_sample(folder / f"{name}.pt", sample, sample_max_len)
    out = folder / f"{name}.json"
    out.write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def verified(manifest: str | Path) -> Path:
    """The ``.pt`` of a shipped checkpoint (given its manifest or itself), refused in one sentence unless its size
    and sha256 are the ones its manifest recorded (a manifest from before digests were recorded: its size alone)."""
    pt = Path(manifest).with_suffix(".pt")
    m = json.loads(pt.with_suffix(".json").read_text())
    if not pt.is_file():
        raise CheckpointError(f"the shipped checkpoint {pt} is missing; restore it with git checkout.")
    size = pt.stat().st_size
    if size != m.get("bytes", size) or ("sha256" in m and file_digest(pt) != m["sha256"]):
        raise CheckpointError(f"the shipped checkpoint {pt} does not match its manifest's size and sha256 (damaged or "
                              "replaced); restore it with git checkout, or re-export it.")
    return pt


def load_shipped(manifest: str | Path, check: bool = True):
    """The model of a shipped checkpoint (its manifest or its ``.pt``) as runs install it, in eval mode; ``check``
    false skips the manifest's digest (``export``'s golden sample, decoded before the manifest is written)."""
    from bpd.models import model_from_config

    pt = Path(manifest).with_suffix(".pt")
    payload = load_checkpoint(verified(pt) if check else pt)
    model = model_from_config(payload["model_config"])
    model.load_state_dict(_widened(payload["model"]))
    return model.eval()


def golden_sample(manifest: str | Path, sources: list[list[int]], max_len: int | None) -> dict[str, Any]:
    """Greedy outputs of the shipped (fp16-stored) weights on a few sources: the test of every shipped
    checkpoint decodes them again and must get the same tokens, with no data set needed. A heads model's sample
    also holds each source's rounds of exact blockwise decoding at its trained k (``blockwise_k``), which pins
    its proposal heads as greedy's tokens pin the base."""
    from bpd.data.batches import pad_rows
    from bpd.decoding import blockwise_decode, greedy_decode

    model = load_shipped(manifest, check=False)
    padded = [pad_rows([s], model.pad_id, min_width=1) for s in sources]
    out = {"sources": sources, "max_len": max_len,
           "greedy": [greedy_decode(model, src, max_len=max_len).tokens[0] for src in padded]}
    if model.k > 1:
        out["blockwise_k"] = model.k
        out["blockwise_iterations"] = [blockwise_decode(model, src, max_len=max_len).iterations[0] for src in padded]
    return out


def export_greedy_targets(manifest: str | Path, outputs: tuple[np.ndarray, np.ndarray, np.ndarray], train) -> None:
    """Ship a base model's greedy outputs on the training sources (``outputs``: the example indices, lengths
    and tokens of ``bpd.targets.read_shards``; all of ``train``'s lines or an evenly spread sample of them,
    ``distill.max_sources``) beside it as ``<name>.greedy.npz``, named in its manifest with a sample (the
    first four decoded lines, with their sources from ``train``) that ``sample_agrees`` checks."""
    manifest = Path(manifest)
    index, lengths, tokens = outputs
    out = manifest.with_suffix(".greedy.npz")
    np.savez_compressed(out, index=index, lengths=lengths.astype(np.int32), tokens=tokens.astype(np.uint16))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    row_of = {int(i): r for r, i in enumerate(index)}
    picked = sorted(row_of)[:4]
    sample = {"index": picked, "sources": [list(map(int, train.src(i))) for i in picked],
              "greedy": [tokens[starts[row_of[i]] : starts[row_of[i]] + lengths[row_of[i]]].tolist() for i in picked]}
    if not sample_agrees(load_shipped(manifest), sample):
        raise RuntimeError(f"{out.name}: the shipped weights decode its sample differently than the batched run did.")
    m = json.loads(manifest.read_text())
    m["greedy_train"] = {"file": out.name, "lines": int(len(index)), "of": len(train), "sha256": file_digest(out),
                         "sample": sample}
    manifest.write_text(json.dumps(m, indent=1) + "\n")


def sample_agrees(model, sample: dict[str, Any]) -> bool:
    """Whether ``model`` decodes each sampled source, one at a time, to the shipped output: all of it but
    its last token (EOS), under a limit of that many tokens. An output cut by the batch's length limit got
    an EOS appended, and the limit came from the batch's longest source, which a single sentence lacks; a
    greedy output's first n tokens do not depend on the limit."""
    from bpd.data.batches import pad_rows
    from bpd.decoding import greedy_decode

    for src, expected in zip(sample["sources"], sample["greedy"], strict=True):
        n = len(expected) - 1
        if n > 0 and greedy_decode(model, pad_rows([src], model.pad_id, min_width=1),
                                   max_len=n).tokens[0] != expected[:-1]:
            return False
    return True


def greedy_targets(base_path: Path, shipped_dir: str | Path, sources: int) -> Path | None:
    """The shipped greedy outputs of the base model ``base_path`` on ``sources`` training sources, if it is an
    installed shipped base that has them (a base trained anew under the same cache name is not:
    ``shipped=false``; outputs of another number of sources are not: ``distill.max_sources``)."""
    m = manifests(shipped_dir).get(base_path.name)
    if m is None or "greedy_train" not in m or not base_path.is_file() or m["greedy_train"]["lines"] != sources:
        return None
    if load_checkpoint(base_path).get("shipped") != repo_relative(m["manifest"].with_suffix(".pt")):
        return None
    out = m["manifest"].with_name(m["greedy_train"]["file"])
    if file_digest(out) != m["greedy_train"]["sha256"]:
        raise CheckpointError(f"{out} does not match its manifest's checksum; restore it with git checkout.")
    return out

