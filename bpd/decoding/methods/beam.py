"""Beam search with the GNMT / tensor2tensor length penalty, batch >= 1, KV cache.

Used as the quality reference and to build sequence-level distillation data (beam 4, alpha 0.6).
A hypothesis that emits EOS within the top ``beam_size`` candidates is set aside as finished; a
row stops once it holds ``beam_size`` finished hypotheses (early stopping, as fairseq/HF do), and the
best one by ``log p / ((5 + |y|) / 6) ** alpha`` is returned. A finished row leaves the batch (its beams'
cache and encoder rows), as finished rows do in every other decoder here: a batch of sources decoded for
distillation costs what its live rows cost, not what its longest row costs. With ``beam_size=1`` this is
exactly greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from bpd.config.methods.beam import BeamOptions
from bpd.decoding.loop import begin
from bpd.decoding.method import NOTHING, Method, Options, Plan, Prepared
from bpd.decoding.result import DecodeResult


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Beams:
    """Every row's ``w`` live hypotheses (scores (b, w) on the host's float64 and their tokens) and the
    hypotheses set aside as finished, with their length-penalised scores."""

    w: int
    alpha: float
    scores: torch.Tensor
    seqs: list[list[list[int]]]
    finished: list[list[tuple[float, list[int]]]]
    done: list[bool]
    # Filled by each step for the next decoder call: which beam each new hypothesis extends, and its token.
    src_beam: torch.Tensor = field(init=False)
    new_tok: torch.Tensor = field(init=False)


def start_beams(b: int, w: int, alpha: float, max_len: int, dev: torch.device) -> Beams:
    # Only the first beam of each row is live at the start, so the first step does not pick duplicates.
    scores = torch.full((b, w), float("-inf"), dtype=torch.float64, device=dev)
    scores[:, 0] = 0.0
    return Beams(w, alpha, scores, [[[] for _ in range(w)] for _ in range(b)], [[] for _ in range(b)],
                 [max_len <= 0] * b)


@dataclass(frozen=True)
class Candidates:
    """One row's best candidates, best first: their scores and their flat indices ``beam * vocab + token``."""

    scores: list[float]
    flat: list[int]
    vocab: int


def extend_row(beams: Beams, r: int, j: int, cands: Candidates, eos: int, last: bool, new_scores: torch.Tensor
               ) -> list[list[int]]:
    """Row ``r``'s next hypotheses from its best candidates ``cands``: one that ends in EOS within the top ``w``
    is set aside as finished; the first ``w`` others live on, in line ``j`` of ``new_scores``, ``src_beam`` and
    ``new_tok``. With ``last`` (out of length) the live ones compete as they are."""
    w, eos_seen, row_seqs, v = beams.w, beams.finished[r], [], cands.vocab
    for rank, (s, idx) in enumerate(zip(cands.scores, cands.flat)):
        if s == float("-inf"):
            break
        beam, tok = divmod(idx, v)
        if tok == eos:
            if rank < w:
                hyp = beams.seqs[r][beam] + [tok]
                eos_seen.append((s / length_penalty(len(hyp), beams.alpha), hyp))
            continue
        if len(row_seqs) < w:
            n = len(row_seqs)
            row_seqs.append(beams.seqs[r][beam] + [tok])
            new_scores[j, n], beams.src_beam[j, n], beams.new_tok[j, n] = s, beam, tok
    if len(eos_seen) >= w:
        beams.done[r] = True
    elif last:
        for n, hyp in enumerate(row_seqs):
            eos_seen.append((float(new_scores[j, n]) / length_penalty(len(hyp), beams.alpha), hyp))
        beams.done[r] = True
    return row_seqs


def beam_step(beams: Beams, logp: torch.Tensor, eos: int, last: bool, live: list[int]) -> None:
    """Extend the beams of the rows ``live`` (original row numbers, in the order of the decoder's rows) by the
    log-probabilities ``logp`` (len(live) * w, V) of their next tokens. ``beams.scores``, ``src_beam`` and
    ``new_tok`` hold the live rows only."""
    b, w, v = len(live), beams.w, logp.shape[-1]
    cand = (beams.scores.view(b * w, 1) + logp).view(b, w * v)
    top_s, top_i = cand.topk(min(2 * w, w * v), dim=-1)
    top_s_h, top_i_h = top_s.tolist(), top_i.tolist()
    new_scores = torch.full((b, w), float("-inf"), dtype=torch.float64)
    beams.src_beam = torch.zeros((b, w), dtype=torch.long)
    beams.new_tok = torch.full((b, w), eos, dtype=torch.long)
    for j, r in enumerate(live):
        if not beams.done[r]:  # a finished row left in the batch (drop_finished=False) decodes nothing
            row_seqs = extend_row(beams, r, j, Candidates(top_s_h[j], top_i_h[j], v), eos, last, new_scores)
            beams.seqs[r] = row_seqs + [[] for _ in range(w - len(row_seqs))]
    beams.scores = new_scores.to(logp.device)


@torch.inference_mode()
def beam_decode(
    model, src: torch.Tensor, beam_size: int = 4, alpha: float = 0.6, max_len: int | None = None,
    drop_finished: bool = True,
) -> DecodeResult:
    """Beam search over the rows of ``src``. ``drop_finished=False`` keeps finished rows in the batch to the end
    (what ``bench/beam_decode.py`` compares against: the same outputs, at the cost of the longest row)."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size}).")
    batch = begin(model, src, max_len, room=1, beams=beam_size)
    b, w, max_len = src.shape[0], beam_size, batch.max_len
    beams = start_beams(b, w, alpha, max_len, src.device)
    inp, enc, invocations, live = batch.bos, batch.enc, 0, list(range(b))
    for t in range(max_len):
        h = model.decode(inp, enc, batch.cache)
        invocations += 1
        beam_step(beams, torch.log_softmax(model.heads.base_logits(h[:, 0]).double(), dim=-1), model.eos_id,
                  last=t == max_len - 1, live=live)
        # Finished rows leave the batch (their w decoder rows, cache and encoder state), so a long straggler does
        # not keep the whole batch decoding; the others' beams are reordered in the same selection.
        unfinished = [j for j, r in enumerate(live) if not beams.done[r]]
        if not unfinished:
            break
        keep = unfinished if drop_finished else list(range(len(live)))
        if len(keep) < len(live):
            beams.scores, beams.src_beam, beams.new_tok = (x[keep] for x in (beams.scores, beams.src_beam,
                                                                              beams.new_tok))
            rows = torch.tensor([j * w + i for j in keep for i in range(w)], dtype=torch.long, device=src.device)
            enc = enc.select(rows)
            live = [live[j] for j in keep]
        batch.cache.select([j * w + int(beam) for j, beams_j in zip(keep, beams.src_beam.tolist())
                            for beam in beams_j])
        inp = beams.new_tok.view(-1, 1).to(src.device)
    tokens = [max(f, key=lambda x: x[0])[1] if f else [] for f in beams.finished]
    return DecodeResult(tokens=tokens, iterations=[len(t) for t in tokens], block_sizes=[[1] * len(t) for t in tokens],
                        invocations=invocations)


class Beam(Method):
    """Its options are ``BeamOptions`` (``o.beam``), as a config asks for them: size 0 there asks for no decoder."""

    name = "beam"
    own_columns = ("beam_size",)

    def check(self, o: Options) -> None:
        super().check(o)
        if o.beam.size < 1:
            raise ValueError(f"a beam search decoder needs beam.size >= 1 (got {o.beam.size}).")

    def columns(self, o: Options) -> dict[str, Any]:
        return {"beam_size": o.beam.size}

    def decoder_name(self, o: Options) -> str:
        return f"beam{o.beam.size}_a{o.beam.alpha:g}"

    def sweep(self, plan: Plan, asked: BeamOptions) -> list[Options]:
        return [self.options(beam=asked)] if asked.size else []

    def decode(self, model, src: torch.Tensor, max_len: int | None, o: Options, run: Prepared = NOTHING
               ) -> DecodeResult:
        return beam_decode(model, src, beam_size=o.beam.size, alpha=o.beam.alpha, max_len=max_len)
