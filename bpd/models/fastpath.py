"""Decoding fast paths, in one place.

A small model's decoding step is dominated by per-op overhead and by small matrix products against the
(V, d) vocabulary projection, so two things are done differently when decoding (each returns what the plain
path returns; training always takes the plain path):

* ``project`` (inference on a CPU): the projection multiplies by a cached contiguous (d, V) transpose of the
  weight instead of the (V, d) weight (the CPU GEMM is faster that way for a handful of rows).
* ``TableStep`` (inference, any device): the recurrent heads' slot step (``RecurrentHeads.step`` and the
  proposal projection) in fewer, larger ops: per-vocabulary tables of the token half of each slot's first
  layer, biases folded into matrix products. Fewer ops is fewer kernel launches on a GPU too. It is one
  implementation of the step ``RecurrentHeads.stepper`` hands out; the heads' proposal chain and
  ``recurrent_tree`` (a fixed-shape tree, a level at a time) run on whichever step they are given.

* int8 proposals (``heads.set_proposal_precision("int8")``, ``decode.proposal_precision=int8``; inference on a
  CPU): ``TableStep``'s matrix products with int8 weights (fbgemm's dynamic-quantized linear, per output
  channel). At batch 1 a slot's products stream their weights from memory (the 4,000-token projection alone is
  4 MB in float32, 1 MB in int8), so a quarter of the bytes is most of the time saved. Proposals are guesses
  that verification checks with the float32 base, so exact decoding stays greedy's; only which proposals are
  made, and so k̂, may change (measured in docs/benchmark.md). The static path's traced chain quantizes the
  same way (``quantize_int8``) and multiplies weight-only (``bpd.decoding.static_steps.DecodingTables``).

``top1`` is the argmax every decoder uses: ``max(-1).indices``, faster than ``argmax`` on a CPU for the few
rows of a step, with the same ties. The benchmark (``make bench``, docs/benchmark.md) measures what each buys.

Derived tensors (transposes, tables) are cached per module and rebuilt when a source tensor changes. The
only reliable signal of an in-place change (an optimizer step, ``load_state_dict``, a user's ``p.add_``) is
the tensor's version counter, ``Tensor._version``, which autograd itself relies on; so the cache key is
``(data_ptr, _version, dtype)`` of every source.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch


def top1(logits: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dimension (first index on ties, like ``argmax``); every decoder uses this one."""
    return logits.max(-1).indices


def applies(weight: torch.Tensor) -> bool:
    """Whether the CPU fast paths are in force: inference on a CPU, run eagerly. Code that ``torch.compile``
    traces (the static decode path, ``bpd.decoding.engine``) takes the plain path: the compiler fuses and
    prepacks it itself, and the caches here are keyed by storage addresses it cannot trace."""
    return weight.device.type == "cpu" and not torch.compiler.is_compiling() and torch.is_inference_mode_enabled()


class DerivedCache:
    """Tensors computed from source tensors once, until any source changes (see the module docstring)."""

    def __init__(self) -> None:
        self._hits: dict[str, tuple[tuple, object]] = {}

    def get(self, name: str, sources: list[torch.Tensor], make: Callable[[], object]):
        # Inference tensors (made under torch.inference_mode, e.g. a proposal vocabulary set there) keep no
        # version counter; they are keyed by storage and dtype alone.
        key = tuple((t.data_ptr(), -1 if t.is_inference() else t._version, t.dtype) for t in sources)
        hit = self._hits.get(name)
        if hit is None or hit[0] != key:
            with torch.inference_mode():
                hit = (key, make())
            self._hits[name] = hit
        return hit[1]


def output_t(heads) -> torch.Tensor:
    """The output weight as a cached contiguous (d, V) transpose."""
    w = heads.output.weight
    return heads.derived.get("wt", [w], lambda: w.detach().t().contiguous())


def project(heads, x: torch.Tensor) -> torch.Tensor:
    """``heads.output(x)`` through the cached transpose."""
    wt, b = output_t(heads), heads.output.bias
    return x @ wt if b is None else torch.addmm(b, x, wt)


def proposal_projection(heads) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (d, P) transposed projection onto the proposal vocabulary and its bias (P = V unrestricted)."""
    w, b, ids = heads.output.weight, heads.output.bias, heads.proposal_ids
    if ids is None:
        return output_t(heads), b
    wt = heads.derived.get("wt_proposal", [w, ids], lambda: w[ids].t().contiguous())
    return wt, None if b is None else heads.derived.get("b_proposal", [b, ids], lambda: b[ids])


def recurrent_tables(heads) -> list[tuple[torch.Tensor, ...]]:
    """Per recurrent slot: the token table over the whole vocabulary (V, d_ff + 1), the same table over the
    proposal vocabulary, the state half of the first layer (d, d_ff + 1) and the second layer with its bias
    as a last row (d_ff + 1, d). The extra column is 1 in the table and 0 in the state weight, so it
    survives the relu as 1 and adds the bias row. Slots that attend to the source (``heads.reads_source``)
    also have their query projection (d, d) and the attention half of the first layer (d, d_ff + 1); None
    for the others. Slots with tied weights (``heads.tie_slots``) share the very same weight tensors, so the
    chain reads them from cache after the first slot; only the tables (which fold in each slot's bias) differ."""
    d, emb, ids = heads.d_model, heads.output.weight, heads.proposal_ids
    weights: dict[int, tuple[torch.Tensor | None, ...]] = {}
    out = []
    for i in range(heads.n_learned):
        j = heads.weight_set(i + 1)
        if j not in weights:
            w_s = heads.w_r_in[j, :d]
            w_s = torch.cat([w_s, w_s.new_zeros(d, 1)], dim=1)
            w_o = torch.cat([heads.w_r_out[j], heads.b_r_out[j][None]], dim=0)
            w_q = w_c = None
            if heads.reads_source:
                w_q = heads.w_q[j]
                w_c = torch.cat([heads.w_r_in[j, 2 * d :], w_s.new_zeros(d, 1)], dim=1)
            # The vocabulary's product with the token half is the costly part (V x d x d_ff): tied slots
            # compute it once and differ only by their bias.
            weights[j] = (w_s, w_o, w_q, w_c, emb @ heads.w_r_in[j, d : 2 * d])
        w_s, w_o, w_q, w_c, tokens = weights[j]
        table = tokens + heads.b_r_in[i]
        table = torch.cat([table, table.new_ones(table.shape[0], 1)], dim=1)
        out.append((table, table if ids is None else table[ids].contiguous(), w_s, w_o, w_q, w_c))
    return out


def read_source(source, q: torch.Tensor, batch: int) -> torch.Tensor:
    """An attend slot's read of the source with flat queries ``q`` (n, d) of ``batch`` rows (n / batch each)."""
    if source is None:
        from bpd.models.heads.source import MISSING  # heads import this module: imported when needed

        raise ValueError(MISSING)
    return source.read(q.view(batch, -1, q.shape[-1])).view(q.shape)


def slot_hidden(lookup: torch.Tensor, s: torch.Tensor, slot: tuple, source, batch: int) -> torch.Tensor:
    """A recurrent slot's first layer, relu applied, at flat states ``s`` (n, d) of ``batch`` rows (n / batch
    each, batch-first) whose read tokens' table rows are ``lookup`` (n, d_ff + 1)."""
    _, _, w_s, _, w_q, w_c = slot
    hidden = torch.addmm(lookup, s, w_s)
    if w_q is not None:
        hidden.addmm_(read_source(source, s @ w_q, batch), w_c)
    return hidden.relu_()


def slot_layers(product: Callable[[torch.Tensor, int], torch.Tensor], lookup: torch.Tensor, s: torch.Tensor,
                reads_source: bool, source, batch: int) -> torch.Tensor:
    """A recurrent slot's step, ``slot_hidden`` and the second layer, for flat states ``s`` (n, d) of ``batch`` rows
    whose read tokens' table rows are ``lookup``, through ``product(x, j)``: ``x`` times the slot's matrix ``j`` of
    ``recurrent_tables``' tuple (2 the state half, 3 the second layer, 4 the query projection, 5 the attention half).
    The int8 chains take this form, each with its own products: fbgemm's here (``TableStep``) and weight-only ones
    on the static path (``bpd.decoding.static_steps``); the float chains fuse the additions into ``addmm``."""
    hidden = lookup.to(s.dtype) + product(s, 2)
    if reads_source:
        hidden += product(read_source(source, product(s, 4), batch), 5)
    return s + product(hidden.relu_(), 3)


def _slot_weights(heads) -> list[torch.Tensor]:
    """What the decoding tables are made from: they are rebuilt when any of these changes."""
    ids = heads.proposal_ids
    sources = [heads.output.weight, heads.w_r_in, heads.b_r_in, heads.w_r_out, heads.b_r_out]
    sources += [heads.w_q] if heads.reads_source else []
    return sources + ([] if ids is None else [ids])


def recurrent_slots(heads) -> list[tuple[torch.Tensor, ...]]:
    """``recurrent_tables``, cached until a weight or the proposal vocabulary changes."""
    return heads.derived.get("recurrent", _slot_weights(heads), lambda: recurrent_tables(heads))


def quantized_engines() -> list[str]:
    return list(torch.backends.quantized.supported_engines)


def precision_on(device: torch.device, precision: str) -> str:
    """The proposal precision that runs on ``device``: int8 chains are a CPU path, so on a GPU the chain runs in
    float32 (and the rows say so), and one config (``make demo``'s) serves both."""
    return precision if torch.device(device).type == "cpu" else "float32"


def require_int8() -> None:
    """Refuse int8 proposals on the eager path, with the fix, where this PyTorch build cannot run them (no fbgemm /
    x86 quantized engine, e.g. an ARM build): checked before any work when the eager path is chosen, and by the
    eager chain itself. The static path's int8 products need no quantized engine."""
    engines = quantized_engines()
    if not {"fbgemm", "x86"} & set(engines):
        raise ValueError("decode.proposal_precision=int8 needs PyTorch's x86 quantized engine (fbgemm), which this "
                         f"build lacks (it has {', '.join(engines) or 'none'}); use decode.proposal_precision=float32.")
    pack_int8(torch.ones(1, 1))  # the engine is listed but its ops may still be missing from the build


def require_cpu_int8(heads) -> None:
    """Refuse int8 chains for heads on a GPU, with the fix: both int8 paths are CPU paths (the entry points map int8
    to float32 there first, ``precision_on``; this catches a direct call)."""
    if heads.output.weight.device.type != "cpu":
        raise ValueError("decode.proposal_precision=int8 runs on a CPU only; use float32 on a GPU.")


def int8_scale(weight: torch.Tensor) -> torch.Tensor:
    """Per output channel of an (out, in) weight, the scale of its symmetric int8 quantization (float32; an
    all-zero channel gets a tiny scale and stays exactly zero). Both int8 paths quantize with it: fbgemm's packs
    here (eager chains) and ``quantize_int8`` (the static path's traced chains)."""
    return (weight.detach().float().abs().amax(dim=1) / 127).clamp_min(1e-12)


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An (out, in) weight as int8 values (out, in) and per-channel scales (out,), ``int8_scale``'s quantization:
    what ``torch.ops.aten._weight_int8pack_mm`` multiplies by (weight-only int8, any CPU, traceable)."""
    w = weight.detach().float()
    scale = int8_scale(w)
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous(), scale


def pack_int8(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """An (out, in) weight (and bias) packed for ``torch.ops.quantized.linear_dynamic``: int8, symmetric, one scale
    per output channel (``int8_scale``)."""
    w = weight.detach().float().contiguous()
    scale = int8_scale(w).double()
    try:
        with warnings.catch_warnings():  # quantized tensors are deprecated upstream; the pinned torch has them
            warnings.simplefilter("ignore", UserWarning)
            q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
            return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float().contiguous())
    except (AttributeError, RuntimeError, NotImplementedError) as e:
        raise ValueError(f"decode.proposal_precision=int8 needs PyTorch's quantized CPU ops (fbgemm), which this "
                         f"build lacks ({type(e).__name__}); use float32.") from e


def int8_linear(x: torch.Tensor, packed) -> torch.Tensor:
    """``x @ W.T (+ b)`` through a ``pack_int8`` weight, in ``x``'s dtype (the op itself takes float32).

    The activations are quantized to 7 bits (``reduce_range``), on every CPU. Without VNNI (AVX2, and AVX-512
    without VNNI), fbgemm multiplies u8 activations by s8 weights with ``vpmaddubsw``, which adds each pair of
    products into a saturating 16-bit sum: two 8-bit products (up to 255 x 127 each) overflow it, and the
    logits come out corrupted (``torch.ao.quantization.quantize_dynamic`` reduces the range on x86 for this
    reason). With 7 bits a pair cannot overflow. VNNI machines do not need it, but taking it everywhere makes
    the int8 products the same on every x86 CPU, and it costs no time (the same kernel runs)."""
    out = torch.ops.quantized.linear_dynamic(x.float().contiguous(), packed, True)
    return out if x.dtype == torch.float32 else out.to(x.dtype)


def int8_slots(heads) -> tuple[list[tuple], object]:
    """Per recurrent slot the float tables of ``recurrent_slots`` with its matrices packed as int8 (tied slots
    share their packs), and the packed proposal projection; cached like the float ones."""

    def make():
        packs: dict[int, object] = {}

        def pack(w: torch.Tensor | None):  # a (in, out) matrix of the tables, packed as its (out, in) transpose
            if w is None:
                return None
            if w.data_ptr() not in packs:
                packs[w.data_ptr()] = pack_int8(w.t())
            return packs[w.data_ptr()]

        slots = [(table, ptable, pack(w_s), pack(w_o), pack(w_q), pack(w_c))
                 for table, ptable, w_s, w_o, w_q, w_c in recurrent_slots(heads)]
        wt, b = proposal_projection(heads)
        return slots, pack_int8(wt.t(), b)

    return heads.derived.get("recurrent_int8", _slot_weights(heads), make)


class SlotStep:
    """A recurrent slot step over states of any leading shape, made from its ``flat`` form (states (n, d) of
    ``batch`` rows): what ``TableStep`` and the static path's ``static_tree.TablesStep`` share."""

    def __call__(self, s: torch.Tensor, tok: torch.Tensor, i: int, from_proposal: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot ``i`` (1-based) for states ``s`` (B, ..., d) reading tokens ``tok`` (B, ...)."""
        if s.dim() == 2:
            return self.flat(s, tok, i, s.shape[0], from_proposal)
        flat, logits = self.flat(s.reshape(-1, s.shape[-1]), tok.reshape(-1), i, s.shape[0], from_proposal)
        return flat.view(s.shape), logits.view(*s.shape[:-1], -1)

    def flat(self, s: torch.Tensor, tok: torch.Tensor, i: int, batch: int, from_proposal: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class TableStep(SlotStep):
    """Recurrent slot ``i``'s step from the decoding tables: the states after the slot and their logits over the
    proposal vocabulary, what ``RecurrentHeads.step`` and ``proposal_logits`` give, in a table lookup, addmm,
    relu, addmm and the projection. The token a slot reads is a token id, or (``from_proposal``) an index into
    the proposal vocabulary, as the previous slot's argmax gives it: its table is then gathered to those rows
    once, and indices become token ids once, at the end (``token_ids``)."""

    def __init__(self, heads, source=None) -> None:
        self.ids: torch.Tensor | None = heads.proposal_ids
        self.source = source
        self.int8 = heads.proposal_precision == "int8"
        if self.int8:
            require_cpu_int8(heads)
            require_int8()
            self.slots, self.packed_projection = int8_slots(heads)
        else:
            self.slots = recurrent_slots(heads)
            self.wt, self.bias = proposal_projection(heads)

    def flat(self, s: torch.Tensor, tok: torch.Tensor, i: int, batch: int, from_proposal: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """The step for flat states ``s`` (n, d) of ``batch`` rows (n / batch each, batch-first) reading ``tok``
        (n,)."""
        slot = self.slots[i - 1]
        lookup = slot[1 if from_proposal else 0][tok]
        if self.int8:  # the products through the int8 packs of ``int8_slots``
            s = slot_layers(lambda x, j: int8_linear(x, slot[j]), lookup, s, slot[4] is not None, self.source, batch)
            return s, int8_linear(s, self.packed_projection)
        hidden = slot_hidden(lookup, s, slot, self.source, batch)
        s = torch.addmm(s, hidden, slot[3])
        return s, (s @ self.wt if self.bias is None else torch.addmm(self.bias, s, self.wt))

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Token ids of proposal-vocabulary indices."""
        return idx if self.ids is None else self.ids[idx]


def recurrent_tree(heads, h: torch.Tensor, first: torch.Tensor, plan, source=None, step=None) -> torch.Tensor:
    """The token ids (B, N - 1) of a fixed-shape candidate tree's levels below its root ``first`` (B, 1), at
    one position ``h`` (B, d): per depth one ``TableStep`` over the frontier's nodes and an argmax (a top-n
    where a node has several children).

    ``plan`` has per depth ``(state_sel, tok_sel, order, need)`` (``bpd.decoding.methods.tree`` works it out once per
    shape): the frontier (the previous level's nodes that have children) is ``states[:, state_sel]`` of the
    previous step's states and ``level[:, tok_sel]`` of the previous level's tokens; each frontier node's
    ``need`` best children are ranked; the level is their (frontier, rank) grid in order (``order`` None) or
    the nodes ``cand[:, order[0], order[1]]``. Selectors are slices where they pick a leading run (a view).
    ``step``: a slot step of ``TableStep``'s interface (the static path's, on its frozen tables), else a
    ``TableStep``."""
    step = TableStep(heads, source) if step is None else step
    b, d = h.shape
    states, level, levels = h[:, None], first, []
    for i, (state_sel, tok_sel, order, need) in enumerate(plan):
        s, tok = states[:, state_sel], level[:, tok_sel]
        f = s.shape[1]
        flat, logits = step.flat(s.reshape(-1, d), tok.reshape(-1), i + 1, b, from_proposal=i > 0)
        cand = (top1(logits) if need == 1 else logits.topk(need, dim=-1).indices).view(b, f, need)
        level = cand.view(b, f * need) if order is None else cand[:, order[0], order[1]]
        states = flat.view(b, f, d)
        levels.append(level)
    return step.token_ids(torch.cat(levels, dim=1))


__all__ = ["DerivedCache", "TableStep", "applies", "int8_linear", "int8_scale", "pack_int8", "precision_on",
           "project", "quantize_int8", "recurrent_tree", "require_cpu_int8", "require_int8", "slot_layers", "top1"]
