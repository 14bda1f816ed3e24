"""The CTranslate2 model of an exported Hugging Face directory, made by CTranslate2's own converter.

CTranslate2 converts Pegasus as Google's Pegasus checkpoints are used: the decoder starts from the pad token.
Ours starts from BOS, so after converting, the converted model's ``config.json`` names BOS as the decoder's
start token (a setting of the converted model, read by ``ctranslate2.Translator``; no weight changes).
"""

from __future__ import annotations

import json
from pathlib import Path

QUANTIZATIONS = ("float32", "int8")


def convert_ct2(hf_dir: str | Path, out_dir: str | Path, quantization: str = "float32") -> Path:
    """Convert the exported ``hf_dir`` into ``out_dir`` with weights stored as ``quantization``; returns out_dir."""
    from ctranslate2.converters import TransformersConverter
    from transformers import AutoTokenizer

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}; use one of {', '.join(QUANTIZATIONS)}.")
    out = Path(out_dir)
    TransformersConverter(str(hf_dir)).convert(str(out), quantization=quantization, force=True)
    bos = AutoTokenizer.from_pretrained(hf_dir).bos_token
    path = out / "config.json"
    config = json.loads(path.read_text())
    config.update(decoder_start_token=bos, bos_token=bos)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return out


def ct2_translator(ct2_dir: str | Path, threads: int = 1):
    """A CPU ``ctranslate2.Translator`` of a converted model: one decoding at a time on ``threads`` threads (the
    thread count our rows use), so its timings stand beside ours."""
    import ctranslate2

    return ctranslate2.Translator(str(ct2_dir), device="cpu", inter_threads=1, intra_threads=threads)
