"""Text in, text out: a trained translation model and its tokenizer turn sentences into translations with any
registered decoder (``experiments/translate.py`` on the command line, ``bpd.translate`` in a notebook).

Sentences are encoded as the evaluation encodes a test line (the bare pieces, no BOS or EOS) and decoded one
batch at a time with the harness's output limit, so a file of test sentences translated at batch size 1 gives
the evaluation's outputs token for token. Input that would decode into nonsense or fail deep inside a decoder
(an empty line, characters the vocabulary cannot spell, a sentence whose output would outrun the model's
positions, a checkpoint of another task) is refused first, with the fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bpd.config import output_limit
from bpd.config.translate import TranslateConfig
from bpd.data.batches import pad_rows
from bpd.data.tokenizer import Tokenizer
from bpd.decoding.engine import checked_engine
from bpd.decoding.method import own_fields
from bpd.decoding.registry import registered
from bpd.decoding.spec import DecodeSpec
from bpd.runtime import resolve_path
from bpd.training.checkpoint import load_checkpoint

__all__ = ["Translations", "decode_texts", "encode_texts", "load_translator", "longest_source", "translate"]


def resolve_checkpoint(checkpoint: str | Path, shipped_dir: str | Path = "checkpoints") -> Path:
    """A checkpoint file, or the shipped model of that name (``debian_en_de_base`` -> checkpoints/...pt)."""
    path = Path(checkpoint)
    if path.is_file():
        return path
    shipped = resolve_path(shipped_dir) / f"{path.name.removesuffix('.pt')}.pt"
    if shipped.is_file() and path.parent == Path("."):
        return shipped
    names = sorted(p.stem for p in resolve_path(shipped_dir).glob("*.pt"))
    raise FileNotFoundError(f"no checkpoint {checkpoint}: give a .pt file or a shipped model's name "
                            f"({', '.join(names) or 'none ships'}).")


def refuse_other_tasks(model_config: dict[str, Any], path: Path) -> None:
    """A super-resolution (image) model has no tokenizer and reads pixels: refused before anything loads."""
    if model_config.get("aligned_input") or (model_config.get("extra") or {}).get("kind") == "image":
        raise ValueError(f"{path} is an image (super-resolution) model, not a translation model; translate with a "
                         "translation checkpoint, e.g. checkpoint=debian_en_de_base.")


def shipped_tokenizer(path: Path, payload: dict[str, Any], vocab_size: int, shipped_dir: str | Path) -> Path:
    """The tokenizer shipped for the corpus of a shipped model, of a cache copy installed from one, or of a heads
    model trained over one (its ``meta.config.base`` names the base's cache file, which the manifest names too):
    ``<shipped_dir>/<task>_<corpus hash>.spm<vocab>.model``."""
    from bpd.shipped import manifests

    folder = resolve_path(shipped_dir)
    manifest = path.with_suffix(".json")
    if not manifest.is_file() and payload.get("shipped"):
        manifest = resolve_path(payload["shipped"]).with_suffix(".json")
    base = ((payload.get("meta") or {}).get("config") or {}).get("base")
    by_cache_name = manifests(shipped_dir)
    for name in (path.name, base):
        if not manifest.is_file() and name in by_cache_name:
            manifest = by_cache_name[name]["manifest"]
    task = json.loads(manifest.read_text()).get("task") if manifest.is_file() else None
    found = sorted(folder.glob(f"{task}_*.spm{vocab_size}.model")) if task else []
    if len(found) != 1:
        what = f"no tokenizer ships for {task}" if task else f"{path} is not a shipped model"
        # The file is named after the task.vocab_size asked for, which a small corpus cuts to fewer pieces (the
        # model's vocab_size): naming spm<pieces>.model would point at a file that does not exist.
        raise FileNotFoundError(f"{what}; pass tokenizer=<the spm<task.vocab_size>.model of the corpus it was "
                                f"trained on, {vocab_size} pieces> (training writes it under "
                                "outputs/cache/data/<corpus>/).")
    return found[0]


def load_translator(checkpoint: str | Path, tokenizer: str | Path | None = None,
                    shipped_dir: str | Path = "checkpoints"):
    """A translation model (eval mode, CPU) and its ``Tokenizer``: ``checkpoint`` a file or a shipped model's
    name; ``tokenizer`` its sentencepiece model (default: the one shipped for its corpus)."""
    from bpd.models import model_from_config
    from bpd.shipped import _widened

    path = resolve_checkpoint(checkpoint, shipped_dir)
    payload = load_checkpoint(path)
    refuse_other_tasks(payload["model_config"], path)
    model = model_from_config(payload["model_config"])
    model.load_state_dict(_widened(payload["model"]))  # shipped weights are fp16
    model.eval()
    spm = Path(tokenizer) if tokenizer else shipped_tokenizer(path, payload, model.cfg.vocab_size, shipped_dir)
    tok = Tokenizer(spm)
    if tok.vocab_size != model.cfg.vocab_size:
        raise ValueError(f"{spm} has {tok.vocab_size} pieces but {path} reads {model.cfg.vocab_size}; pass the "
                         "tokenizer the model was trained with.")
    return model, tok


def longest_source(model, k: int = 1) -> int:
    """The longest source (in tokens) whose output limit, plus the ``k`` + 1 entries a round may append, still
    fits the positions the model was built for (``max_positions``: the longest dev/test line and its output)."""
    room = model.cfg.max_positions - k - 1
    n = room
    while n > 0 and output_limit(n) > room:
        n -= 1
    return n


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], longest: int, allow_unknown: bool = False
                 ) -> list[list[int]]:
    """Token ids of each sentence, refused in one sentence (naming the line and the fix) when one is empty,
    holds characters the vocabulary cannot spell (unless ``allow_unknown``: they are read as <unk>), or is
    longer than ``longest`` tokens."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of sentences, e.g. [\"Hello.\"] (got one string).")
    if not texts:
        raise ValueError("no sentences to translate: give at least one.")
    out = []
    for i, text in enumerate(texts, 1):
        if not text.strip():
            raise ValueError(f"line {i} is empty; give one sentence per line (remove blank lines).")
        ids = tokenizer.encode(text)
        if not allow_unknown and tokenizer.unk_id in ids:
            spans = ", ".join(repr(s) for s in dict.fromkeys(tokenizer.unknown_spans(text)))
            raise ValueError(f"line {i} has characters the model's vocabulary cannot spell ({spans}); replace or "
                             "remove them, or pass allow_unknown=true to read them as <unk>.")
        if len(ids) > longest:
            raise ValueError(f"line {i} is {len(ids)} tokens long; this model translates sentences of up to "
                             f"{longest} tokens (its outputs must fit its positions); split the line into sentences.")
        out.append(ids)
    return out


@dataclass
class Translations:
    """One decoder's outputs for a list of sentences, and what they cost."""

    decoder: str
    texts: list[str]
    tokens: list[list[int]]
    rounds: list[int]  # decoding rounds per sentence (greedy: one per token)
    seconds: float  # wall time of the decoder calls

    @property
    def output_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def khat(self) -> float:
        """Mean accepted block size: output tokens per round."""
        return self.output_tokens / max(1, sum(self.rounds))


def decode_texts(model, tokenizer: Tokenizer, sources: Sequence[Sequence[int]], specs: Sequence[DecodeSpec],
                 batch_size: int = 1) -> list[Translations]:
    """Decode ``sources`` with every spec, batch by batch (each batch by every decoder back to back, so their
    times are paired on the same machine state); one ``Translations`` per spec."""
    tokens: list[list[list[int]]] = [[] for _ in specs]
    rounds: list[list[int]] = [[] for _ in specs]
    seconds = [0.0] * len(specs)
    for lo in range(0, len(sources), batch_size):
        rows = [list(s) for s in sources[lo: lo + batch_size]]
        src = pad_rows(rows, model.pad_id, min_width=1)
        limit = output_limit(src.shape[1])
        for j, s in enumerate(specs):
            t0 = time.perf_counter()
            res = s.entry.decode(model, src, limit, s.options)
            seconds[j] += time.perf_counter() - t0
            tokens[j] += res.tokens
            rounds[j] += list(res.iterations)
    return [Translations(s.name, [tokenizer.decode(t) for t in tok], tok, r, sec)
            for s, tok, r, sec in zip(specs, tokens, rounds, seconds)]


def spec_for(method: str, engine: str = "eager", **options: Any) -> DecodeSpec:
    """The decoder of a registered method with the given options (refused with the method's options named), on
    decode path ``engine`` (eager, static or compiled; methods without the static path decode eagerly)."""
    known = {f.name for f in own_fields(registered(method).options)}  # an unknown method: refused with the list
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"decode={method} takes no option {', '.join(unknown)}; its options: "
                         f"{', '.join(sorted(known | {'engine'}))}.")
    return DecodeSpec(method, engine=checked_engine(engine), **options)


def configured_spec(cfg: TranslateConfig) -> DecodeSpec:
    """The decoder ``cfg`` asks for (translate.py's config): its method with the options of ``cfg`` that method's
    decoder takes, its own among them (``methods.<name>``)."""
    option_names = tuple(f.name for f in own_fields(registered(cfg.method).options))
    return spec_for(cfg.method, cfg.engine, **cfg.method_options(option_names))


@torch.inference_mode()
def translate(model, tokenizer: Tokenizer | str | Path, texts: Sequence[str], method: str = "greedy",
              batch_size: int = 1, allow_unknown: bool = False, **options: Any) -> list[str]:
    """Translations of ``texts`` by ``model`` decoding with a registered ``method`` and its options
    (``translate(model, tok, ["Hello."], method="blockwise", k=4)``, ``engine="compiled"`` for the compiled
    path: its steps are built on the first call on this machine, kept under ``step_store.store_dir()``, and
    loaded by later calls and processes); one string per sentence."""
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer(tokenizer)
    spec = spec_for(method, **options)
    sources = encode_texts(tok, texts, longest_source(model, spec.k), allow_unknown)
    return decode_texts(model, tok, sources, [spec], batch_size)[0].texts
