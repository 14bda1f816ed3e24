"""Blockwise parallel decoding (Stern et al. 2018) inside Hugging Face ``generate``, for a bpd model exported with its
proposal heads (``bpd.export.heads``): transformers' ``custom_generate`` mechanism loads this file from the export
(``<export>/custom_generate/generate.py``) and calls its ``generate`` in place of the library's own.

    model = AutoModelForSeq2SeqLM.from_pretrained(export_dir)
    out = model.generate(**batch, custom_generate=export_dir, trust_remote_code=True, k=4)           # exact
    out = model.generate(**batch, custom_generate=export_dir, trust_remote_code=True, k=4, top_n=2)  # top-2

The file stands alone (torch, safetensors and transformers only): whoever has the export can run it without bpd.
Each round has the paper's (and Medusa's) four phases, as ``bpd.decoding.methods.blockwise`` runs them:

* **propose**: slot 0 is p_1's argmax at the last accepted position (known from the previous verify); the heads
  propose slots 1..k-1 from the decoder state there;
* **verify**: one decoder call over the k proposals against the cache scores p_1 after each;
* **accept**: exact (the proposal is p_1's argmax: the output is greedy's) or top-n (it is among p_1's n best);
* **update**: each row keeps its accepted tokens' cache entries. At batch 1 the rejected entries are cropped; at
  batch > 1 rows accept different numbers, so the rejected entries stay in the cache masked out and each row's
  next tokens get their own positions (the decoder's position table is read per row for that call). Finished
  rows leave the batch.

The heads were trained on our model's residual stream; the exported Pegasus model's dimensions are a permutation of
ours (``bpd.export.hf``), so the heads read the decoder state with the permutation undone and use the shared
embedding in our order.

Options beside ``generate``'s own: ``k`` (block size, a whole number, default the trained k), ``top_n`` (None or 1:
exact acceptance; a whole n >= 2: top-n), ``heads_dir`` (where the heads are, default the model's own folder).
``max_new_tokens`` (or ``max_length``) caps the output; without either, the generation config's (an export sets
``max_new_tokens``, so the library's plain ``generate`` stops where this one does), else bpd's rule (1.5 x source
length + 10). Beam search,
sampling and assisted generation are handed to the library's ``generate``. ``return_dict_in_generate=True`` returns
the sequences with each row's rounds and accepted block sizes.
"""

from __future__ import annotations

import json
import numbers
import os
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

HEADS_CONFIG = "proposal_heads.json"
HEADS_WEIGHTS = "proposal_heads.safetensors"
#: Architectures whose slots run one after another, each reading the previous slot's token.
CHAINS = ("recurrent", "attend")


class ProposalHeads:
    """The exported heads as plain tensors, proposing in our residual order (module docstring)."""

    def __init__(self, config: dict, weights: dict[str, torch.Tensor], embedding: torch.Tensor) -> None:
        if config.get("format") != 1:
            raise ValueError(f"{HEADS_CONFIG} has format {config.get('format')}; this generate.py reads format 1: "
                             "export the model again with the bpd version that wrote it.")
        self.arch, self.k, self.tied = config["arch"], int(config["k"]), bool(config.get("tie_slots"))
        self.n_heads = int(config["n_heads"])
        d = embedding.shape[1]
        perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # ours -> Pegasus (bpd.export.hf)
        self.inverse = torch.argsort(perm).to(embedding.device)
        self.w = {name: t.to(embedding) if t.is_floating_point() else t.to(embedding.device)
                  for name, t in weights.items()}
        self.embedding = embedding.index_select(1, self.inverse)  # (V, d) in our order
        self.ids = self.w.get("proposal_ids")
        # (d, P) laid out for the product each slot makes: a transposed view would be copied on every call.
        rows = self.embedding if self.ids is None else self.embedding[self.ids]
        self.proposal_projection = rows.T.contiguous()

    def ours(self, h: torch.Tensor) -> torch.Tensor:
        """A decoder state of the exported model in our residual order."""
        return h.index_select(-1, self.inverse)

    def top1(self, s: torch.Tensor) -> torch.Tensor:
        """Proposal ids: the argmax over the proposal vocabulary (first index on ties, as ours)."""
        best = (s @ self.proposal_projection).max(-1).indices
        return best if self.ids is None else self.ids[best]

    def propose(self, h: torch.Tensor, first: torch.Tensor, k: int, source) -> torch.Tensor:
        """Tokens (B, k-1) of slots 1..k-1 at the decoder states ``h`` (B, d, our order), p_1's argmax ``first``
        (B,); ``source``: (keys, values, mask) of the last decoder layer's cross-attention, for ``attend``."""
        if self.arch in CHAINS:
            return self.chain(h, first, k, source)
        return self.top1(self.parallel(h, 1, k))

    def parallel(self, h: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """States (B, hi-lo, d) of slots lo..hi-1 for heads that read only ``h``."""
        w, d = self.w, h.shape[-1]
        a, b = lo - 1, hi - 1  # slot s is learned slot s - 1 (p_1 is the base itself)
        if self.arch == "paper":
            hidden = F.relu(F.linear(h, w["w_in.weight"], w["w_in.bias"]))
            rows = slice(lo * d, hi * d)
            out = F.linear(hidden, w["w_out.weight"][rows], w["w_out.bias"][rows])
            return h.unsqueeze(-2) + out.unflatten(-1, (hi - lo, d))
        if self.arch == "blockdiag":
            hidden = F.relu(torch.einsum("...d,nde->...ne", h, w["w_in_b"][a:b]) + w["b_in_b"][a:b])
            return h.unsqueeze(-2) + torch.einsum("...ne,ned->...nd", hidden, w["w_out_b"][a:b]) + w["b_out_b"][a:b]
        if self.arch == "medusa":
            return h.unsqueeze(-2) + F.silu(torch.einsum("...d,nde->...ne", h, w["w_m"][a:b]) + w["b_m"][a:b])
        raise ValueError(f"proposal heads of arch {self.arch!r} are not known to this generate.py.")

    def chain(self, h: torch.Tensor, first: torch.Tensor, k: int, source) -> torch.Tensor:
        """Recurrent slots: slot i reads slot i-1's state and the token it proposed (and, ``attend``, the source)."""
        w, s, tok, chosen = self.w, h, first, []
        for i in range(1, min(k, self.k)):
            j = 0 if self.tied else i - 1
            parts = [s, F.embedding(tok, self.embedding)]
            if self.arch == "attend":
                parts.append(read_source(s @ w["w_q"][j], source, self.n_heads))
            hidden = F.relu(torch.cat(parts, dim=-1) @ w["w_r_in"][j] + w["b_r_in"][i - 1])
            s = s + hidden @ w["w_r_out"][j] + w["b_r_out"][j]
            tok = self.top1(s)
            chosen.append(tok)
        return torch.stack(chosen, dim=-1)


def read_source(q: torch.Tensor, source, n_heads: int) -> torch.Tensor:
    """Attention of queries ``q`` (B, d) over the source keys and values (B, H, S, dh): (B, d)."""
    keys, values, mask = source
    x = q.reshape(q.shape[0], 1, n_heads, -1).transpose(1, 2)
    return F.scaled_dot_product_attention(x, keys, values, attn_mask=mask).transpose(1, 2).reshape(q.shape)


def load_heads(model, heads_dir: str | None = None) -> ProposalHeads:
    """The proposal heads exported beside ``model`` (read once per model and folder)."""
    from safetensors.torch import load_file

    folder = heads_dir or getattr(model, "name_or_path", None) or model.config._name_or_path
    loaded = model.__dict__.setdefault("_bpd_proposal_heads", {})
    if folder not in loaded:
        path = os.path.join(str(folder), HEADS_CONFIG)
        if not os.path.isfile(path):
            raise ValueError(f"{folder} holds no proposal heads ({HEADS_CONFIG}); export a bpd model with heads "
                             "(python experiments/export.py 'models=[heads]'), or pass heads_dir=<its folder>.")
        with open(path) as f:
            config = json.load(f)
        weights = load_file(os.path.join(str(folder), HEADS_WEIGHTS))
        loaded[folder] = ProposalHeads(config, weights, model.get_output_embeddings().weight.detach())
    return loaded[folder]


class RowPositions(torch.nn.Module):
    """The decoder's position table read at each row's own positions (set in ``rows`` before a call)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table, self.rows = table, None

    def forward(self, input_ids_shape, cache_length=0, position_ids=None) -> torch.Tensor:
        return F.embedding(self.rows, self.table)


@contextmanager
def per_row_positions(decoder, positions: torch.Tensor | None):
    """Within the block, the decoder embeds row b's tokens at ``positions[b]`` (None: the library's own positions,
    counted from the cache length: right whenever no row has masked entries)."""
    if positions is None:
        yield
        return
    own = decoder.embed_positions
    rows = RowPositions(own.weight)
    rows.rows = positions
    decoder.embed_positions = rows
    try:
        yield
    finally:
        decoder.embed_positions = own


@dataclass
class BlockwiseOutput:
    """``generate``'s output with ``return_dict_in_generate=True``: the sequences (start token first, padded),
    each row's rounds (decoder calls after the first) and accepted block sizes."""

    sequences: torch.Tensor
    rounds: list[int]
    block_sizes: list[list[int]]


class Decoder:
    """The exported model's decoder over a batch whose rows keep their own lengths in one cache."""

    def __init__(self, model, enc: torch.Tensor, enc_mask: torch.Tensor) -> None:
        from transformers import DynamicCache, EncoderDecoderCache

        self.model, self.enc, self.enc_mask = model, enc, enc_mask
        self.cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
        b = enc.shape[0]
        self.valid = torch.ones(b, 0, dtype=torch.long, device=enc.device)  # which cache entries each row reads
        self.length = torch.zeros(b, dtype=torch.long, device=enc.device)  # each row's real tokens in the cache
        self.holes = False  # some row has masked (rejected) entries

    def __call__(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder states (B, q, d) and logits (B, q, V) after feeding ``ids`` (B, q) to every row."""
        q = ids.shape[1]
        new = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
        mask = torch.cat([self.valid, new], dim=1) if self.holes else None
        positions = self.length[:, None] + torch.arange(q, device=ids.device) if self.holes else None
        with per_row_positions(self.model.model.decoder, positions):
            out = self.model.model.decoder(input_ids=ids, attention_mask=mask, encoder_hidden_states=self.enc,
                                           encoder_attention_mask=self.enc_mask, cache=self.cache, use_cache=True)
        self.valid = torch.cat([self.valid, new], dim=1)
        self.length = self.length + q
        h = out.last_hidden_state
        return h, self.model.lm_head(h) + self.model.final_logits_bias

    def keep(self, q: int, kept: torch.Tensor) -> None:
        """Each row keeps the first ``kept[b]`` of the ``q`` entries the last call appended."""
        drop = q - kept
        if bool((drop == drop[0]).all()):  # every row drops as many (always at batch 1): crop them
            n = int(drop[0])
            if n:
                self.cache.crop(-n)
                self.valid = self.valid[:, :-n]
        else:
            tail = (torch.arange(q, device=kept.device)[None, :] < kept[:, None]).long()
            self.valid = torch.cat([self.valid[:, :-q], self.valid[:, -q:] * tail], dim=1)
            self.holes = True
        self.length = self.length - drop

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows ``rows`` (finished rows leave)."""
        self.cache.batch_select_indices(rows)
        self.enc, self.enc_mask = self.enc[rows], self.enc_mask[rows]
        self.valid, self.length = self.valid[rows], self.length[rows]

    def source(self):
        """The last decoder layer's cross-attention keys and values, and the source mask (None: no padding)."""
        layer = self.cache.cross_attention_cache.layers[-1]
        mask = None if bool(self.enc_mask.all()) else self.enc_mask.bool()[:, None, None, :]
        return layer.keys, layer.values, mask


def accepted_runs(logits: torch.Tensor, best: torch.Tensor, props: torch.Tensor, top_n: int | None) -> torch.Tensor:
    """Per row, how many of proposals 1..k-1 are accepted before the first rejection (B,)."""
    if top_n is None or top_n <= 1:
        ok = best[:, :-1] == props[:, 1:]
    else:
        score = logits[:, :-1].gather(-1, props[:, 1:, None])
        ok = (logits[:, :-1] > score).sum(-1) < min(top_n, logits.shape[-1])
    return ok.long().cumprod(dim=1).sum(dim=1)


def check_options(k, top_n, trained_k: int) -> None:
    """``k`` and ``top_n`` refused in one sentence unless whole numbers in range: ``int(2.5)`` would silently
    decode at k = 2, and top_n = 1.5 would act as top-2."""
    def whole(x) -> bool:
        return isinstance(x, numbers.Integral) and not isinstance(x, bool)

    if k is not None and not (whole(k) and 1 <= k <= trained_k):
        raise ValueError(f"k={k!r}: the exported heads propose up to k={trained_k}; choose a whole number k between "
                         "1 and that.")
    if top_n is not None and not (whole(top_n) and top_n >= 1):
        raise ValueError(f"top_n={top_n!r}: give a whole number n >= 2 for top-n acceptance, or None (or 1) for "
                         "exact acceptance.")


def output_limit(input_ids: torch.Tensor, max_new_tokens, max_length, config_new, config_max) -> int:
    if max_new_tokens is not None:
        return int(max_new_tokens)
    if max_length is not None:
        return int(max_length) - 1
    if config_new is not None:
        return int(config_new)
    if config_max is not None:
        return int(config_max) - 1
    return int(1.5 * input_ids.shape[1]) + 10  # bpd's output-length rule


# The argument list is transformers' (``GenerationMixin.generate``'s names, which ``custom_generate`` passes by
# keyword) plus our ``k``, ``top_n`` and ``heads_dir``: it cannot be grouped, and is the one long list that
# tests/test_style.py allows.
@torch.no_grad()
def generate(model, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
             k: int | None = None, top_n: int | None = None, heads_dir: str | None = None,
             max_new_tokens: int | None = None, max_length: int | None = None, generation_config=None,
             return_dict_in_generate: bool = False, **kwargs):
    """Blockwise parallel decoding of ``input_ids`` (B, S) with the exported proposal heads; the library's own
    ``generate`` for what this is not (beams, sampling, assisted generation)."""
    inputs = kwargs.pop("inputs", None)
    input_ids = inputs if input_ids is None else input_ids
    config = generation_config or model.generation_config
    other = {n: kwargs.get(n) for n in ("num_beams", "do_sample", "assistant_model", "prompt_lookup_num_tokens")}
    if (other["num_beams"] or 1) > 1 or other["do_sample"] or other["assistant_model"] is not None \
            or other["prompt_lookup_num_tokens"]:
        from transformers import GenerationMixin

        plain = {n: v for n, v in kwargs.items() if v is not None and n not in (
            "logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus", "streamer",
            "negative_prompt_ids", "negative_prompt_attention_mask")}
        return GenerationMixin.generate(model, input_ids=input_ids, attention_mask=attention_mask,
                                        max_new_tokens=max_new_tokens, max_length=max_length,
                                        generation_config=generation_config, **plain)
    heads = load_heads(model, heads_dir)
    check_options(k, top_n, heads.k)
    k = heads.k if k is None else int(k)
    start, eos, pad = config.decoder_start_token_id, config.eos_token_id, config.pad_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    limit = output_limit(input_ids, max_new_tokens, max_length, config.max_new_tokens, config.max_length)
    if attention_mask is None:
        attention_mask = (input_ids != pad).long()
    batch, device = input_ids.shape[0], input_ids.device
    outputs: list[list[int]] = [[] for _ in range(batch)]
    blocks: list[list[int]] = [[] for _ in range(batch)]
    if limit > 0:
        enc = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        decoder = Decoder(model, enc, attention_mask)
        h, logits = decoder(torch.full((batch, 1), start, dtype=torch.long, device=device))
        first = logits[:, -1].max(-1).indices
        source = decoder.source() if heads.arch == "attend" else None
        props = propose(heads, h[:, -1], first, k, source)
        live = list(range(batch))
        while live:
            h, logits = decoder(props)  # verify
            best = logits.max(-1).indices
            khat = 1 + accepted_runs(logits, best, props, top_n)  # accept
            finished = []
            for slot, (row, block, n) in enumerate(zip(live, props.tolist(), khat.tolist())):
                block = block[:n][: limit - len(outputs[row])]
                if eos in block:
                    block = block[: block.index(eos) + 1]
                outputs[row] += block
                blocks[row].append(len(block))
                if (block and block[-1] == eos) or len(outputs[row]) >= limit:
                    finished.append(slot)
            decoder.keep(k, khat)  # update
            last = (khat - 1)[:, None]
            h_last = h.gather(1, last[:, :, None].expand(-1, 1, h.shape[-1]))[:, 0]
            first = best.gather(1, last)[:, 0]
            if finished:
                keep = [s for s in range(len(live)) if s not in finished]
                if not keep:
                    break
                rows = torch.tensor(keep, device=device)
                decoder.select(rows)
                live, h_last, first = [live[s] for s in keep], h_last[rows], first[rows]
                source = decoder.source() if heads.arch == "attend" else None
            props = propose(heads, h_last, first, k, source)
    width = max(len(o) for o in outputs)
    sequences = torch.full((batch, 1 + width), pad, dtype=torch.long, device=device)
    sequences[:, 0] = start
    for row, out in enumerate(outputs):
        sequences[row, 1: 1 + len(out)] = torch.tensor(out, dtype=torch.long)
    if return_dict_in_generate:
        return BlockwiseOutput(sequences, [len(b) for b in blocks], blocks)
    return sequences


def propose(heads: ProposalHeads, h: torch.Tensor, first: torch.Tensor, k: int, source) -> torch.Tensor:
    """The next round's k proposals (B, k): p_1's argmax, then the heads' k-1 (propose)."""
    if k == 1:
        return first[:, None]
    return torch.cat([first[:, None], heads.propose(heads.ours(h), first, k, source)], dim=1)
