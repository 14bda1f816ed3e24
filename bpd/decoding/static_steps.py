"""The static decode path's fixed-shape functions (``bpd.decoding.engine`` runs and compiles them).

Each maker returns a function of tensors only, with no host synchronisation: the batch's tensors come in the
order of ``StaticEngine.batch_args`` after the function's own first argument (``alive``, ``lengths``, the cache's
``k_cache`` and ``v_cache``, ``encoded``: the encoder state's fields ``(src_mask, cross_kv, aligned)``,
``source``, and ``span``, whose length is how many cache entries the call attends over), and each function moves
the rows' lengths itself. ``torch.compile`` traces them whole
(``fullgraph=True``).

The arguments stay tensors and plain tuples and lists of them, never objects of ours (the encoder state comes as
the tuple of its fields, rebuilt inside): dynamo takes a tuple's tensors as graph inputs just as it takes separate
arguments, while an object would add guards on its type and attributes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from bpd.decoding.criteria import Criterion
from bpd.models import fastpath
from bpd.models.fastpath import top1
from bpd.models.heads.source import Ahead, Source
from bpd.models.static_cache import decode_static
from bpd.models.transformer import EncoderState


def propose_block(model, h: torch.Tensor, first: torch.Tensor, k: int, source: tuple | None,
                  tables: DecodingTables | None = None, ahead: Ahead | None = None) -> torch.Tensor:
    """The block (B, k): p_1's ``first`` (B, 1) and slots 1..k-1 at ``h`` (B, d); ``source``: what attend heads read
    (``(k, v, mask)``), ``tables``: the heads' frozen decoding tables (``decoding_tables``; None: the heads' own
    ``propose``), ``ahead``: what heads that read ahead read (``model.head_ahead`` at ``h``'s positions)."""
    if k == 1:
        return first
    src = Source.joined(None if source is None else Source(*source), ahead)
    if tables is None:
        rest = model.heads.propose(h, first, k, src)
    elif tables.n_slots:
        rest = table_chain(tables, h, first, k, src)
    else:  # slots that guess from h alone: their states, then one product for all of them
        rest = tables.proposals(model.heads.states(h, k, start=1, source=src))
    return torch.cat([first, rest], dim=-1)


class DecodingTables(nn.Module):
    """What the compiled proposals read besides the model's parameters, as buffers of a module the traced
    functions close over: the proposal projection (transposed, restricted to the proposal vocabulary) and, for a
    recurrent or attend chain, each slot's decoding tables.

    Tensors a compiled function reads from a closure or a plain attribute are graph inputs, gathered and
    multiplied by ATen's generic kernels at every call; a module's buffers are, like the model's own weights,
    frozen into the graph as constants, so each product gets inductor's prepacked GEMM (as the verify pass's
    products do).

    ``int8`` (``decode.proposal_precision=int8`` with a slot chain): the chain's matrices and the projection are
    kept as int8 values (out, in) with a scale per output channel (``fastpath.quantize_int8``, the eager chain's
    quantization) and multiplied weight-only (``torch.ops.aten._weight_int8pack_mm``: the int8 weights widened
    inside the product, the activations in bfloat16, the one activation type inductor's CPU template takes with
    int8 weights on every x86 CPU). A round then reads a quarter of the chain's bytes, traced with the rest."""

    def __init__(self, slots: list[tuple], wt: torch.Tensor, bias: torch.Tensor | None,
                 ids: torch.Tensor | None, int8: bool = False) -> None:
        super().__init__()
        self.int8 = int8 and bool(slots)
        self.n_slots, self.width = len(slots), len(slots[0]) if slots else 0
        quantized: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # tied slots share one set of weights

        def add(name: str, t: torch.Tensor, matrix: bool) -> None:
            if not (self.int8 and matrix):
                self.register_buffer(name, own_storage(t), persistent=False)
                return
            key = (t.data_ptr(), tuple(t.shape))
            if key not in quantized:  # an (in, out) matrix as its int8 (out, in) transpose and per-row scales
                q, scale = fastpath.quantize_int8(t.t())
                pad = -q.shape[1] % INT8_ALIGN
                quantized[key] = (torch.nn.functional.pad(q, (0, pad)), scale.to(torch.bfloat16))
            self.register_buffer(name, quantized[key][0], persistent=False)
            self.register_buffer(f"{name}_scale", quantized[key][1], persistent=False)

        for i, slot in enumerate(slots):
            for j, t in enumerate(slot):
                if t is not None:
                    add(f"s{i}_{j}", t, matrix=j >= 2)  # (the first two are the token tables, looked up)
        add("wt", wt, matrix=True)
        for name, t in (("bias", bias), ("ids", ids)):
            self.register_buffer(name, None if t is None else own_storage(t), persistent=False)

    def slot(self, i: int) -> tuple:
        """Slot ``i``'s tables (0-based), ``fastpath.recurrent_tables``' tuple."""
        return tuple(getattr(self, f"s{i}_{j}", None) for j in range(self.width))

    def times(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """``x`` (..., in) times the (in, out) matrix ``name``, in ``x``'s dtype (int8 ones weight-only, see the
        class)."""
        w = getattr(self, name)
        if w.dtype != torch.int8:
            return x @ w
        scale, short = getattr(self, f"{name}_scale"), w.shape[1] - x.shape[-1]
        low = x.reshape(-1, x.shape[-1]).to(scale.dtype)
        low = torch.nn.functional.pad(low, (0, short)) if short else low
        return torch.ops.aten._weight_int8pack_mm(low, w, scale).to(x.dtype).view(*x.shape[:-1], -1)

    def proposals(self, states: torch.Tensor) -> torch.Tensor:
        """Proposed token ids at slot states (..., d): the argmax over the proposal vocabulary."""
        idx = top1(self.logits(states))
        return idx if self.ids is None else self.ids[idx]

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Logits (..., P) over the proposal vocabulary at slot states (..., d)."""
        out = self.times(states, "wt")
        return out if self.bias is None else out + self.bias


#: int8 matrices' inner dimension is padded with zeros to a multiple of this (the activations too, in the
#: product): ATen's CPU kernel for ``_weight_int8pack_mm`` reads past the end of an inner dimension that is not a
#: multiple of 8 when it multiplies several rows (a crash, in torch 2.13; a test keeps the unpadded case out).
INT8_ALIGN = 32


def own_storage(t: torch.Tensor) -> torch.Tensor:
    """``t``, copied when it is a slice of a larger tensor (a slot's query projection ``heads.w_q[j]``).

    With weight freezing, inductor's CPU GEMM template prepacks a frozen weight from the start of its storage and
    ignores a view's storage offset: every slot after the first would multiply by the first slot's weight
    (proposals still well-formed, blocks accepted less often; exactness is unaffected)."""
    return t.clone() if t.storage_offset() else t


def decoding_tables(model) -> DecodingTables | None:
    """The heads' decoding tables, made once outside the traced functions: the proposal projection, and for a
    recurrent or attend chain ``fastpath.recurrent_slots`` (per-vocabulary tables of each slot's token half,
    biases folded in), so that the compiled chain looks a token's row up as the eager one does instead of
    multiplying its embedding; int8 chains' matrices quantized (``DecodingTables``). None without learned slots.
    Heads without a chain ignore int8, as on the eager path."""
    heads = model.heads
    if not heads.n_learned:
        return None
    if heads.proposal_precision == "int8":
        fastpath.require_cpu_int8(heads)
    with torch.inference_mode():
        slots = fastpath.recurrent_slots(heads) if heads.path_dependent else []
        return DecodingTables(slots, *fastpath.proposal_projection(heads), heads.proposal_ids,
                              int8=heads.proposal_precision == "int8")


def table_chain(tables: DecodingTables, h: torch.Tensor, first: torch.Tensor, k: int, source: Source | None
                ) -> torch.Tensor:
    """``fastpath.TableStep``'s chain as plain tensor code: the proposals (B, k - 1) of slots 1..k-1."""
    s, tok, chosen = h, first[:, 0], []
    for i in range(1, k):
        slot = tables.slot(i - 1)
        lookup = slot[1 if i > 1 else 0][tok]  # slot 1 reads a token id, later slots a proposal index
        if tables.int8:
            s = int8_slot(tables, f"s{i - 1}_", lookup, s, source)
        else:
            hidden = fastpath.slot_hidden(lookup, s, slot, source, s.shape[0])
            s = torch.addmm(s, hidden, slot[3])
        tok = top1(tables.logits(s))
        chosen.append(tok)
    idx = torch.stack(chosen, dim=-1)
    return idx if tables.ids is None else tables.ids[idx]


def int8_slot(tables: DecodingTables, slot: str, lookup: torch.Tensor, s: torch.Tensor, source: Source | None
              ) -> torch.Tensor:
    """One slot's step on int8 matrices (``fastpath.slot_layers`` with the tables' weight-only products): the
    states after slot ``slot`` (its buffers' prefix) from states ``s`` (B, d)."""
    return fastpath.slot_layers(lambda x, j: tables.times(x, f"{slot}{j}"), lookup, s,
                                hasattr(tables, f"{slot}4"), source, s.shape[0])  # (4: a slot that attends)


def encoder_step(model) -> Callable:
    """The encoder on a padded source (B, S): the encoder state's fields, ``EncoderState``'s order (``aligned``
    left out for models without it: an output of None is not a tensor a package returns)."""

    def encode(src):
        enc = model.encode(src)
        out = (enc.src_mask, enc.cross_kv)
        return out if enc.aligned is None else (*out, enc.aligned)

    return encode


def greedy_step(model) -> Callable:
    """One token per live row through the decoder; p_1's argmax (B,)."""

    def step(tok, alive, lengths, k_cache, v_cache, encoded, source, span):
        enc = EncoderState(*encoded)
        h = decode_static(model, tok, enc, k_cache, v_cache, lengths, span.shape[0])[:, -1]
        lengths.add_(alive.long())
        return top1(model.heads.base_logits(h))

    return step


def chain_start(model, k: int) -> Callable:
    """The propose-only first call: BOS through the decoder, p_1's argmax and the first block's proposals."""
    tables = decoding_tables(model)

    def start(bos, alive, lengths, k_cache, v_cache, encoded, source, span):
        enc = EncoderState(*encoded)
        h = decode_static(model, bos, enc, k_cache, v_cache, lengths, span.shape[0])[:, 0]
        lengths.add_(alive.long())
        first = top1(model.heads.base_logits(h))[:, None]
        return propose_block(model, h, first, k, source, tables, model.head_ahead(enc, lengths - 1))

    return start


def chain_round(model, k: int, criterion: Criterion, floor: int) -> Callable:
    """One round: verify ``props`` (B, k), judge them, advance each live row by its accepted block, and propose the
    next block at the last accepted position. Returns the block sizes (B,) (0 for finished rows), the accepted
    runs after slot 0 (B,) and the next block."""
    tables = decoding_tables(model)

    def round_(props, alive, lengths, k_cache, v_cache, encoded, source, span):
        enc = EncoderState(*encoded)
        h = decode_static(model, props, enc, k_cache, v_cache, lengths, span.shape[0])
        logits = model.heads.base_logits(h)
        best = top1(logits)
        if k > 1:
            flags = criterion.accept(logits[:, :-1], props[:, 1:], best[:, :-1])
            runs = flags.long().cumprod(dim=1).sum(dim=1)
        else:
            runs = torch.zeros_like(lengths)
        khat = (runs + 1).clamp(min=floor) * alive.long()
        lengths.add_(khat)
        last = (khat - 1).clamp(min=0)
        h_last = h.gather(1, last[:, None, None].expand(-1, 1, h.shape[-1]))[:, 0]
        first = best.gather(1, last[:, None])
        ahead = model.head_ahead(enc, lengths - 1)
        return khat, runs, propose_block(model, h_last, first, k, source, tables, ahead)

    return round_
