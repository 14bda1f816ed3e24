"""Other libraries' decoders on our exported weights (``bpd.export``): the peers our decoders are timed beside.

Each peer is a callable ``(sources, max_len) -> tokens`` over one batch: ``sources`` are our token-id rows
(unpadded), ``max_len`` the output limit our decoders get for that batch, and ``tokens`` each row's output
in our decoders' form (the ids up to and including EOS, or ``max_len`` ids when no EOS came), so that a
peer's output compares with greedy's as a list. They decode what our greedy decodes: start from BOS, argmax
of p_1 until EOS or the limit; none of them knows about the proposal heads.

* ``hf_generate``: transformers' ``generate`` with greedy search, plain or with its own accelerations:
  assisted generation (a draft model's guesses verified by the model; ``assistant``) and prompt-lookup
  decoding (guesses copied from n-gram matches in the input; ``prompt_lookup``). Both are batch-1 features.
* ``ct2_greedy``: CTranslate2's ``translate_batch`` with beam size 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Peer = Callable[[Sequence[Sequence[int]], int], list[list[int]]]


def as_ours(row: Sequence[int], eos_id: int, max_len: int) -> list[int]:
    """A peer's output row cut as our decoders cut theirs: up to and including the first EOS, at most
    ``max_len`` ids (what follows EOS is padding)."""
    row = [int(t) for t in row]
    if eos_id in row:
        row = row[: row.index(eos_id) + 1]
    return row[:max_len]


def padded(sources: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and their attention mask, as our batches pad."""
    n = max(len(s) for s in sources)
    ids = torch.full((len(sources), n), pad_id, dtype=torch.long)
    for i, s in enumerate(sources):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return ids, (ids != pad_id).long()


def hf_generate(model, assistant=None, prompt_lookup: int | None = None) -> Peer:
    """Greedy ``generate`` of an exported model (``bpd.export.to_pegasus`` or ``from_pretrained``); with an
    exported ``assistant`` it is assisted generation, with ``prompt_lookup`` tokens prompt-lookup decoding
    (HF's defaults for everything else: its own draft-length schedule)."""
    cfg = model.generation_config
    extra = {}
    if assistant is not None:
        extra["assistant_model"] = assistant
    if prompt_lookup:
        extra["prompt_lookup_num_tokens"] = int(prompt_lookup)

    @torch.inference_mode()
    def decode(sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
        if extra and len(sources) != 1:
            raise ValueError("assisted and prompt-lookup generation decode one sentence at a time (batch 1).")
        ids, mask = padded(sources, cfg.pad_token_id)
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_len, min_new_tokens=0,
                             do_sample=False, num_beams=1, **extra)
        return [as_ours(row[1:].tolist(), cfg.eos_token_id, max_len) for row in out]  # row[0]: the start token

    return decode


def ct2_greedy(translator, vocab: Sequence[str], eos_id: int) -> Peer:
    """Greedy decoding of a CTranslate2 ``Translator`` whose vocabulary (piece of each id) is ``vocab``.
    CTranslate2 reads and writes pieces, not ids: the ids are mapped through the vocabulary both ways."""
    index = {piece: i for i, piece in enumerate(vocab)}

    def decode(sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
        batch = [[vocab[t] for t in s] for s in sources]
        res = translator.translate_batch(batch, beam_size=1, max_decoding_length=max_len, return_end_token=True,
                                         return_scores=False)
        return [as_ours([index[p] for p in r.hypotheses[0]], eos_id, max_len) for r in res]

    return decode
