"""One model's whole export (HF directory, CTranslate2 float32 and int8), cached by the checkpoint it comes from,
and the peer decoders that read it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bpd.decoding.peers import Peer, hf_blockwise, hf_generate
from bpd.export.ct2 import QUANTIZATIONS
from bpd.export.ct2_process import CT2Process, convert_apart
from bpd.export.heads import FORMAT as HEADS_FORMAT
from bpd.export.hf import export_hf
from bpd.export.hf_blockwise import HEADS_CONFIG

#: What a finished bundle holds; written last, so an interrupted export is redone rather than half read.
DONE = "export.json"
#: The peers transformers' ``generate`` runs at batch size 1 only ("assisted generate is only supported for
#: batch_size = 1"; prompt lookup is assisted generation with an n-gram candidate generator).
BATCH_ONE_PEERS = ("hf_assisted", "hf_prompt_lookup")
#: What each peer is, by its row name: the columns its rows carry (``bpd.bench.peers.PEER_COLUMNS``), so that
#: readers ask the library and mode instead of parsing the name. ``peer_quantization``: CTranslate2's weights;
#: transformers runs the exported float32 model as it is.
PEERS: dict[str, dict[str, str | None]] = {
    "hf_greedy": {"library": "transformers", "peer_mode": "greedy", "peer_quantization": None},
    "hf_assisted": {"library": "transformers", "peer_mode": "assisted", "peer_quantization": None},
    "hf_prompt_lookup": {"library": "transformers", "peer_mode": "prompt_lookup", "peer_quantization": None},
    **{f"ct2_{q}": {"library": "ctranslate2", "peer_mode": "greedy", "peer_quantization": q} for q in QUANTIZATIONS},
}
#: Blockwise decoding inside transformers' generate with the exported heads, one peer per k: ``hf_blockwise_k4``.
BLOCKWISE_PEER = re.compile(r"hf_blockwise_k(\d+)")


def peer_columns(name: str) -> dict[str, str | int | None]:
    """What the peer ``name`` is, in row columns (``PEERS``; an HF blockwise peer also its k and criterion)."""
    m = BLOCKWISE_PEER.fullmatch(name)
    if m:
        return {"library": "transformers", "peer_mode": "blockwise", "peer_quantization": None, "k": int(m[1]),
                "criterion": "exact"}
    return PEERS[name]


def export_bundle(model, spm_model: str | Path, out_dir: str | Path, source: str = "") -> dict[str, Path]:
    """Write ``out_dir/hf`` and ``out_dir/ct2-<quantization>`` for ``model`` (reused when ``out_dir`` already
    holds the finished export of the same ``source``, the checkpoint's name)."""
    out = Path(out_dir)
    dirs = {"hf": out / "hf", **{f"ct2-{q}": out / f"ct2-{q}" for q in QUANTIZATIONS}}
    done = out / DONE
    # An export made before the heads were exported with the base is redone (``heads_format``).
    if done.is_file() and json.loads(done.read_text()).get("source") == source and \
            json.loads(done.read_text()).get("heads_format") == HEADS_FORMAT:
        return dirs
    done.unlink(missing_ok=True)
    export_hf(model, spm_model, dirs["hf"])
    for q in QUANTIZATIONS:
        convert_apart(dirs["hf"], dirs[f"ct2-{q}"], q)
    done.write_text(json.dumps({"source": source, "heads_format": HEADS_FORMAT,
                                "dirs": {k: str(v) for k, v in dirs.items()}}, indent=1) + "\n")
    return dirs


def load_hf(hf_dir: str | Path):
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()


def bundle_peers(dirs: dict[str, Path], vocab: list[str], eos_id: int, threads: int,
                 draft_hf_dir: str | Path | None = None, prompt_lookup: int = 10, batch_one: bool = True,
                 blockwise_ks: tuple[int, ...] = ()) -> dict[str, Peer]:
    """The peers of one export, by row name (``peer_columns`` says what each is): HF greedy, HF blockwise decoding
    with the exported heads at each of ``blockwise_ks`` (exact; where the export has heads), HF assisted
    generation (with an exported draft), HF prompt lookup (both batch 1 only: left out unless ``batch_one``),
    CTranslate2 greedy float32 and int8 on ``threads`` threads, each in a worker process of its own
    (``CT2Process``: stop them with ``close_peers``)."""
    hf = load_hf(dirs["hf"])
    peers = {"hf_greedy": hf_generate(hf)}
    if (Path(dirs["hf"]) / HEADS_CONFIG).is_file():
        peers |= {f"hf_blockwise_k{k}": hf_blockwise(hf, str(dirs["hf"]), k) for k in blockwise_ks}
    if batch_one and draft_hf_dir is not None:
        peers["hf_assisted"] = hf_generate(hf, assistant=load_hf(draft_hf_dir))
    if batch_one:
        peers["hf_prompt_lookup"] = hf_generate(hf, prompt_lookup=prompt_lookup)
    for q in QUANTIZATIONS:
        peers[f"ct2_{q}"] = CT2Process(dirs[f"ct2-{q}"], vocab, eos_id, threads)
    return peers


def close_peers(peers: dict[str, Peer]) -> None:
    """Stop the peers' worker processes (the CTranslate2 peers'); the others hold nothing to stop."""
    for peer in peers.values():
        if isinstance(peer, CT2Process):
            peer.close()
