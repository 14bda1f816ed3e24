"""Other libraries' decoders on our exported weights (``bpd.export``): the peers our decoders are timed beside.

Each peer is a callable ``(sources, max_len) -> tokens`` over one batch: ``sources`` are our token-id rows
(unpadded), ``max_len`` the output limit our decoders get for that batch, and ``tokens`` each row's output
in our decoders' form (the ids up to and including EOS, or ``max_len`` ids when no EOS came), so that a
peer's output compares with greedy's as a list. They decode what our greedy decodes: start from BOS, argmax
of p_1 until EOS or the limit; none of them but ``hf_blockwise`` knows about the proposal heads.

* ``hf_generate``: transformers' ``generate`` with greedy search, plain or with its own accelerations:
  assisted generation (a draft model's guesses verified by the model; ``assistant``) and prompt-lookup
  decoding (guesses copied from n-gram matches in the input; ``prompt_lookup``). Both are batch-1 features.
* ``hf_blockwise``: blockwise decoding with the exported proposal heads inside ``generate`` (the one peer that
  knows the heads: ``bpd.export.hf_blockwise``).
* ``ct2_greedy``: CTranslate2's ``translate_batch`` with beam size 1 (the benchmark runs it in a worker process
  of its own: ``bpd.export.ct2_process``).
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


def assistant_decoder_inputs(start: torch.Tensor) -> dict[str, torch.Tensor]:
    """The decoder's start token and its attention mask, passed explicitly to an assisted ``generate``.

    Why: transformers 5 (5.25.0 here) re-runs an encoder-decoder assistant's ``generate`` each round on the
    whole output so far, with its cache, and ``_prefill`` feeds only the uncached tail when the decoder's
    attention mask is as long as the output (``mask_length == input_ids.shape[1]``). Without a
    ``decoder_attention_mask`` there is no such mask (``_mask_length`` is set for decoder-only models only),
    so the assistant re-reads the whole output on top of its cache every round: its cache grows by the
    output's length per round (465 entries for a 32-token output), its positions run past the sinusoid
    table (``IndexError`` in ``embed_positions`` at 1,024 positions; test sentence 63, a 53-token output)
    and, before that, it drafts from shifted positions. With the mask passed, the candidate generator
    crops and extends it every round (``_prepare_attention_mask``) and the assistant's cache stays one
    token behind the output, as it should."""
    return {"decoder_input_ids": start.clone(), "decoder_attention_mask": torch.ones_like(start)}


def hf_generate(model, assistant=None, prompt_lookup: int | None = None) -> Peer:
    """Greedy ``generate`` of an exported model (``bpd.export.to_pegasus`` or ``from_pretrained``); with an
    exported ``assistant`` it is assisted generation, with ``prompt_lookup`` tokens prompt-lookup decoding
    (HF's defaults for everything else: in transformers 5, 20 draft tokens a round at most, a constant
    schedule, drafting stopped early where the draft's probability falls below 0.4)."""
    cfg = model.generation_config
    extra = {}
    if assistant is not None:
        extra["assistant_model"] = assistant
    if prompt_lookup:
        extra["prompt_lookup_num_tokens"] = int(prompt_lookup)
    start = torch.tensor([[cfg.decoder_start_token_id]])

    @torch.inference_mode()
    def decode(sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
        if extra and len(sources) != 1:
            raise ValueError("assisted and prompt-lookup generation decode one sentence at a time (batch 1).")
        ids, mask = padded(sources, cfg.pad_token_id)
        if assistant is not None:
            extra.update(assistant_decoder_inputs(start))
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_len, min_new_tokens=0,
                             do_sample=False, num_beams=1, **extra)
        return [as_ours(row[1:].tolist(), cfg.eos_token_id, max_len) for row in out]  # row[0]: the start token

    return decode


def hf_blockwise(model, hf_dir: str, k: int, top_n: int | None = None) -> Peer:
    """Blockwise decoding inside transformers' ``generate``, by its ``custom_generate`` mechanism: the export's
    ``custom_generate/generate.py`` (``bpd.export.hf_blockwise``) with the proposal heads exported beside the
    model, decoding with block size ``k`` (exact acceptance, or top-``top_n``). The function is loaded once, as
    ``from_pretrained(..., trust_remote_code=True)`` does: ``generate(custom_generate=dir)`` would load and import
    the file again on every call, a cost no user of a loaded model pays."""
    blockwise = model.load_custom_generate(str(hf_dir), trust_remote_code=True)
    cfg = model.generation_config

    @torch.inference_mode()
    def decode(sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
        ids, mask = padded(sources, cfg.pad_token_id)
        out = blockwise(model=model, input_ids=ids, attention_mask=mask, max_new_tokens=max_len, k=k, top_n=top_n)
        return [as_ours(row[1:].tolist(), cfg.eos_token_id, max_len) for row in out]

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
