"""Beam search with the GNMT / tensor2tensor length penalty, batch >= 1, KV cache.

Used as the quality reference and to build sequence-level distillation data (beam 4, alpha 0.6).
A hypothesis that emits EOS within the top ``beam_size`` candidates is set aside as finished; a
row stops once it holds ``beam_size`` finished hypotheses (early stopping, as fairseq/HF do), and the
best one by ``log p / ((5 + |y|) / 6) ** alpha`` is returned. With ``beam_size=1`` this is exactly
greedy decoding.
"""

from __future__ import annotations

import torch

from bpd.decoding.common import checked_max_len
from bpd.decoding.result import DecodeResult


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


@torch.inference_mode()
def beam_decode(
    model, src: torch.Tensor, beam_size: int = 4, alpha: float = 0.6, max_len: int | None = None
) -> DecodeResult:
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1 (got {beam_size}).")
    max_len = checked_max_len(model, src, max_len)
    b, w, dev = src.shape[0], beam_size, src.device
    eos = model.eos_id
    enc = model.encode(src)
    enc = enc.select(torch.arange(b, device=dev).repeat_interleave(w))
    cache = model.new_cache(b * w, max_len + 1)
    # Only the first beam of each row is live at the start, so the first step does not pick duplicates.
    scores = torch.full((b, w), float("-inf"), dtype=torch.float64, device=dev)
    scores[:, 0] = 0.0
    seqs: list[list[list[int]]] = [[[] for _ in range(w)] for _ in range(b)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    done = [max_len <= 0] * b
    inp = torch.full((b * w, 1), model.bos_id, dtype=torch.long, device=dev)
    invocations = 0
    for t in range(max_len):
        if all(done):
            break
        h = model.decode(inp, enc, cache)
        invocations += 1
        logp = torch.log_softmax(model.heads.base_logits(h[:, 0]).double(), dim=-1)  # (b*w, V)
        v = logp.shape[-1]
        cand = (scores.view(b * w, 1) + logp).view(b, w * v)
        top_s, top_i = cand.topk(min(2 * w, w * v), dim=-1)
        top_s_h, top_i_h = top_s.tolist(), top_i.tolist()
        new_scores = torch.full((b, w), float("-inf"), dtype=torch.float64)
        src_beam = torch.zeros((b, w), dtype=torch.long)
        new_tok = torch.full((b, w), eos, dtype=torch.long)
        new_seqs: list[list[list[int]]] = []
        for r in range(b):
            row_seqs: list[list[int]] = []
            if not done[r]:
                for rank, (s, idx) in enumerate(zip(top_s_h[r], top_i_h[r])):
                    if s == float("-inf"):
                        break
                    beam, tok = divmod(idx, v)
                    if tok == eos:
                        if rank < w:
                            hyp = seqs[r][beam] + [tok]
                            finished[r].append((s / length_penalty(len(hyp), alpha), hyp))
                        continue
                    if len(row_seqs) < w:
                        j = len(row_seqs)
                        row_seqs.append(seqs[r][beam] + [tok])
                        new_scores[r, j], src_beam[r, j], new_tok[r, j] = s, beam, tok
                if len(finished[r]) >= w:
                    done[r] = True
                elif t == max_len - 1:  # out of length: live hypotheses compete as they are
                    for j, hyp in enumerate(row_seqs):
                        finished[r].append((float(new_scores[r, j]) / length_penalty(len(hyp), alpha), hyp))
                    done[r] = True
            row_seqs += [[] for _ in range(w - len(row_seqs))]
            new_seqs.append(row_seqs)
        seqs = new_seqs
        scores = new_scores.to(dev)
        cache.select((torch.arange(b)[:, None] * w + src_beam).view(-1).tolist())
        inp = new_tok.view(-1, 1).to(dev)
    tokens = []
    for r in range(b):
        best = max(finished[r], key=lambda x: x[0])[1] if finished[r] else []
        tokens.append(best)
    return DecodeResult(
        tokens=tokens,
        iterations=[len(t) for t in tokens],
        block_sizes=[[1] * len(t) for t in tokens],
        invocations=invocations,
    )
