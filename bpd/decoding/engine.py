"""The static decode path: greedy steps and blockwise rounds as fixed-shape functions, compiled once per shape.

The eager path (``bpd.decoding.loop``) is the readable reference: a Python loop of small ops over a growing
cache, dropping finished rows. Its step costs several times what its weights take to read: every op is a
Python call and a dispatch, and every call has new shapes. Here (gpt-fast's design, for an encoder-decoder):

* the source is padded to a bucket length and the cache allocated once at a bucket capacity
  (``StaticKVCache``), so a batch's every call has the same shapes;
* a greedy step (decode one token, p_1, argmax, advance the lengths) and a blockwise round (verify the k
  proposals, score p_1, judge the criterion, advance each row by its accepted block, propose the next block
  at the last accepted position) are each one function of tensors, with no host synchronisation inside;
* finished rows stay in the batch with their lengths frozen (``alive``), so the batch keeps its shape;
* ``engine="compiled"`` compiles each function whole: on a CPU ahead of time by AOTInductor, with inductor's
  weight freezing, into a package kept in the step store and loaded by later processes
  (``bpd.decoding.step_store``); on a GPU with ``torch.compile(fullgraph=True)`` as CUDA graphs
  (``bpd.decoding.compiling``); ``engine="static"`` runs the same functions uncompiled (what the property tests
  check quickly).

The host reads one small tensor per step or round (the tokens and block sizes) and does the bookkeeping the
eager loop does (``RowTracker``: EOS inside a block, the length limit). Compilation happens once per function
and batch size (its other dimensions symbolic) and machine; ``compile_seconds`` and ``load_seconds`` say how long
building and loading took, so that the benchmark reports them apart from decoding.

int8 proposal chains (``decode.proposal_precision=int8``) are traced with the rest of the round, their products
weight-only int8 (``static_steps.DecodingTables``). The functions themselves are in ``bpd.decoding.static_steps``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bpd.config.decode import ENGINES
from bpd.decoding import compiling
from bpd.decoding.common import RowTracker, checked_max_len, count_positions
from bpd.decoding.compiling import compile_fn, compile_options, on_gpu, weights_fingerprint
from bpd.decoding.criteria import Criterion
from bpd.decoding.result import DecodeResult
from bpd.decoding.static_steps import chain_round, chain_start, encoder_step, greedy_step
from bpd.models.static_cache import StaticKVCache
from bpd.models.transformer import EncoderState

#: The smallest padded source length and cache capacity: shorter ones share these shapes.
LEAST_BUCKET = 16
#: The attended window grows in steps of this many cache entries (``StaticEngine.window``).
WINDOW_STEP = 64
#: Compiled packages hold the sinusoidal position table they were built with, and are keyed by its length: the
#: compiled engine grows it to cover at least this many positions, whatever the test set's longest input, so that
#: a short evaluation loads the packages a long one built (only inputs beyond it grow the table further).
PACKAGED_POSITIONS = 2048
def bucket(n: int, least: int = LEAST_BUCKET) -> int:
    """The padded size for ``n``: the next power of two (at least ``least``), so that a test set's lengths
    share a handful of shapes and each compiles once."""
    return max(least, 1 << max(0, int(n) - 1).bit_length())


def checked_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"unknown decode engine {engine!r}; use one of {', '.join(ENGINES)}.")
    return engine


@dataclass
class StaticBatch:
    """One batch on the static path: its padded source's encoder state, what attend heads read of it, the
    cache, which rows still decode (``alive``) and their bookkeeping."""

    enc: EncoderState
    source: tuple | None  # (k, v, mask) of the heads' Source, or None
    cache: StaticKVCache
    alive: torch.Tensor  # (B,) bool
    rows: RowTracker
    max_len: int
    # The longest live row's cache length, known on the host from what each call accepted: calls attend over
    # the cache up to a window past it (``StaticEngine.window``), not over its whole capacity.
    reach: int = 0
    spans: dict = field(default_factory=dict)  # per window: the tensor whose length says it (``batch_args``)


class StaticEngine:
    """One model's fixed-shape functions (greedy step, chain start, chain round per k and criterion), made and
    compiled on first use. The compiled functions freeze the weights as they were: ``engine_for`` makes a new
    engine when any parameter changes."""

    def __init__(self, model, compiled: bool) -> None:
        self.model, self.compiled = model, compiled
        self.fns: dict[tuple, Callable] = {}
        self.shapes: set[tuple] = set()  # (function key, input shapes) already compiled
        self.positions = self.position_table()  # the sinusoidal table the graphs in ``shapes`` were traced with
        self.buffers: dict[tuple, tuple] = {}  # per (batch, padded source, capacity): ``begin``'s tensors
        self.compile_seconds = 0.0  # building compiled steps (this process compiled them)
        self.load_seconds = 0.0  # loading compiled steps an earlier process built (``step_store``)
        self.fingerprint = weights_fingerprint(model)  # (a model moved to another device has new storage too)
        self.gpu = on_gpu(model)
        # On a CPU the compiled functions are AOTInductor packages, built once per machine and loaded from the
        # store after that (``bpd.decoding.step_store``); on a GPU, ``torch.compile``'s CUDA graphs.
        self.packaged = compiled and not self.gpu
        self.packages: dict[tuple, list] = {}  # per function key: the packages loaded (``step_store.Loaded``)
        self.runners: dict[tuple, Callable] = {}  # per (function key, input shapes): the package that takes them
        self._digest: str | None = None
        # Room for a round's k proposals past max_len, the same for every decoder of this model, so that greedy
        # and blockwise decode a sentence with the same shapes (the same attention cost per entry).
        self.room = model.k + 1

    def position_table(self) -> tuple | None:
        """What identifies the model's sinusoidal position table (None: learned positions), which a compiled
        graph guards on and ``Transformer.cover_positions`` replaces when it grows."""
        t = getattr(self.model, "pos_table", None)
        return None if t is None else (t.data_ptr(), t.shape[0])

    # -- shapes ------------------------------------------------------------------------------------------------
    def capacity(self, max_len: int, src_width: int, room: int = 0) -> int:
        """The cache entries a row gets: room for ``max_len`` tokens and a round past them (``room``: a round that
        writes more than k + 1 entries, a tree's), and at least twice the padded source (``src_width``), so that
        the output-length rule's limits (1.5 x source + 10) of one source bucket share one capacity, and a test
        set compiles once per source bucket, not per (source, limit)."""
        room = max(self.room, room)
        need = max_len + room
        cap = bucket(max(max_len, 2 * src_width) + room)
        if self.model.cfg.positions == "learned" and self.model.source_buckets:
            # A text model's learned positions end at max_positions (the eager path refuses more); image models
            # place tokens on their own grid and ignore it.
            cap = max(min(cap, self.model.cfg.max_positions), need)
        return cap

    def padded(self, src: torch.Tensor) -> torch.Tensor:
        """The source padded to its bucket length (models whose inputs have one fixed length keep it)."""
        if not self.model.source_buckets:
            return src
        width = bucket(src.shape[1])
        return torch.nn.functional.pad(src, (0, width - src.shape[1]), value=self.model.pad_id)

    def shape_key(self, src: torch.Tensor, max_len: int) -> tuple[int, int, int]:
        """(batch, padded source length, capacity): a batch with a new key compiles every function anew."""
        width = self.padded(src).shape[1]
        return src.shape[0], width, self.capacity(max_len, width)

    # -- one batch ---------------------------------------------------------------------------------------------
    def begin(self, src: torch.Tensor, max_len: int | None, room: int = 0) -> StaticBatch:
        """Encode the padded source into this shape's buffers and empty its cache: every batch of one shape
        decodes in the same tensors, so compiled graphs (and a GPU's CUDA graphs) see the same addresses.
        ``room``: cache entries a round writes past a row's length, where more than k + 1 (``capacity``)."""
        model = self.model
        max_len = checked_max_len(model, src, max_len)
        padded = self.padded(src)
        shape = (src.shape[0], padded.shape[1], self.capacity(max_len, padded.shape[1], room))
        buf = self.buffers.get(shape)
        if buf is None:  # (here, eagerly: never inside a compiled step)
            model.cover_positions(max(shape[2], PACKAGED_POSITIONS) if self.packaged else shape[2])
        enc = self.encode(padded)
        if buf is None:
            buf = self.buffers[shape] = self.new_buffers(enc, shape)
        if (table := self.position_table()) != self.positions:
            # The sinusoidal table grew (here for a longer shape, or in an eager decode of a long sentence; never
            # within a batch) after graphs were traced with the old one: their guards no longer hold, so every
            # shape's next call is checked in full (and recompiles) rather than trusted.
            self.shapes.clear()
            self.packages.clear()  # (a package holds the table it was built with)
            self.runners.clear()
            self.positions = table
        held, cache, alive = buf
        held.src_mask.copy_(enc.src_mask)
        for (k, v), (k_new, v_new) in zip(held.cross_kv, enc.cross_kv):
            k.copy_(k_new)
            v.copy_(v_new)
        if held.aligned is not None:
            held.aligned.copy_(enc.aligned)
        cache.reset()
        alive.fill_(True)
        source = (*held.cross_kv[-1], held.src_mask) if model.heads.reads_source else None
        return StaticBatch(held, source, cache, alive, RowTracker(src.shape[0], model.eos_id, max_len), max_len)

    def encode(self, padded: torch.Tensor) -> EncoderState:
        """The encoder state of a padded source: on a CPU's compiled path from the encoder's own package (one for
        every source bucket, the source length symbolic), elsewhere ``model.encode`` itself (a GPU's encoder runs
        once per batch, outside its CUDA graphs)."""
        if not self.packaged:
            return self.model.encode(padded)
        if compiling.DYNAMIC_BUCKETS and self.model.source_buckets:
            torch._dynamo.mark_dynamic(padded, 1)
        out = self.call(("encode",), lambda: encoder_step(self.model), padded)
        return EncoderState(out[0], list(out[1]), out[2] if len(out) > 2 else None)

    def new_buffers(self, enc: EncoderState, shape: tuple[int, int, int]
                    ) -> tuple[EncoderState, StaticKVCache, torch.Tensor]:
        """A shape's encoder-state, cache and ``alive`` tensors, allocated once (on a GPU, marked as static
        addresses so that CUDA graphs may write the cache in place)."""
        model = self.model
        held = EncoderState(enc.src_mask.clone(), [(k.contiguous().clone(), v.contiguous().clone())
                                                   for k, v in enc.cross_kv],
                            None if enc.aligned is None else enc.aligned.clone())
        a = model.dec_layers[0].self_attn
        p = model.tgt_embed.weight
        cache = StaticKVCache(model.n_dec_layers, shape[0], a.h, shape[2] + 1, a.dh, p.dtype, p.device)  # + spare
        alive = torch.ones(shape[0], dtype=torch.bool, device=p.device)
        if self.compiled and self.gpu:
            tensors = [*cache.tensors(), alive, held.src_mask, *(t for kv in held.cross_kv for t in kv)]
            for t in tensors + ([held.aligned] if held.aligned is not None else []):
                torch._dynamo.mark_static_address(t)
        elif self.compiled and compiling.DYNAMIC_BUCKETS and model.source_buckets:
            # One graph per function for every source bucket: the source length and the cache capacity are
            # symbolic, the rows and tokens a step multiplies stay fixed (what the GEMM kernels specialise on).
            for t in [*cache.k, *cache.v]:
                torch._dynamo.mark_dynamic(t, 2)  # (B, H, capacity, dh)
            torch._dynamo.mark_dynamic(held.src_mask, 3)  # (B, 1, 1, S)
            for t in (t for kv in held.cross_kv for t in kv):
                torch._dynamo.mark_dynamic(t, 2)  # (B, H, S, dh)
        return held, cache, alive

    def call(self, key: tuple, make: Callable[[], Callable], *args):
        """``self.fns[key](*args)``, made (and compiled) on first use; the first call of each input shape is
        timed into ``compile_seconds`` (on a CPU: building its package, or ``load_seconds``: loading it)."""
        if self.packaged:
            shape = (key, *(tuple(a.shape) for a in _tensors(args)))
            run = self.runners.get(shape)
            if run is None:
                run = self.runners[shape] = self.package_for(key, make, args)
            return run(*args)
        fn = self.fns.get(key)
        if fn is None:
            fn = make()
            if self.compiled:
                fn = compile_fn(fn, gpu=self.gpu, dynamic=compiling.DYNAMIC_BUCKETS)
            self.fns[key] = fn
        shape = (key, *(tuple(a.shape) for a in _tensors(args)))
        if shape in self.shapes:
            if not self.compiled:
                return fn(*args)
            # Every guard of a compiled graph is checked before each call: on the weights, the cache's tensors,
            # every input. With one model's graphs in dynamo's cache (``engine_for``) and each shape compiled
            # before it is used (here), only the guards that tell those graphs apart are needed.
            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                return self._run(fn, args)
        t0 = time.perf_counter()
        try:
            with compile_options(gpu=self.gpu):  # (compilation happens in a shape's first call)
                out = self._run(fn, args)
        except Exception as e:  # a product the GEMM template does not take: compiled again with ATen's kernels
            if "NoValidChoicesError" not in repr(e):
                raise
            with compile_options(gpu=self.gpu, aten=True):
                out = self._run(fn, args)
        if self.compiled:
            self.compile_seconds += time.perf_counter() - t0
        self.shapes.add(shape)
        return out

    def package_for(self, key: tuple, make: Callable[[], Callable], args: tuple) -> Callable:
        """The compiled package that takes ``args``' shapes: one loaded already, else one from the store (built
        there first if missing). A package's dynamic dimensions serve every source bucket and window; should
        export have fixed one of them, a package for these very shapes is built beside it."""
        from bpd.decoding import step_store

        for loaded in self.packages.get(key, []):
            if step_store.fits(loaded.spec, args):
                return loaded.run
        if self._digest is None:
            self._digest = step_store.model_digest(self.model)
        full = (*key, ("positions", None if self.positions is None else self.positions[1]))  # (its length)
        for exact in (False, True):
            loaded = self._build_or_load(full, make, args, exact)
            self.compile_seconds += loaded.built_s
            self.load_seconds += loaded.load_s
            self.packages.setdefault(key, []).append(loaded)
            if step_store.fits(loaded.spec, args):
                return loaded.run
        raise RuntimeError(f"the compiled step {key} does not take the shapes it was built for; "
                           "run with decode.engine=static and report this.")

    def _build_or_load(self, key: tuple, make: Callable[[], Callable], args: tuple, exact: bool):
        from bpd.decoding import step_store

        # A product the GEMM template does not take (float64, integers): built again with ATen's kernels beside it.
        template = self.model.tgt_embed.weight.dtype in (torch.float32, torch.bfloat16, torch.float16)
        for aten in (False, True)[0 if template else 1:]:
            name = step_store.step_key(key, self._digest, args, aten, exact)
            try:
                return step_store.build_or_load(name, self.model, make, args, aten, exact)
            except Exception as e:
                if aten or "NoValidChoicesError" not in repr(e):
                    raise
        raise AssertionError("unreachable")

    def _run(self, fn: Callable, args: tuple):
        if not (self.compiled and self.gpu):
            return fn(*args)
        # A CUDA graph's outputs live in its memory pool and the next replay overwrites them, while a round's
        # proposals are the next round's input: each call is its own step, its outputs copied out.
        torch.compiler.cudagraph_mark_step_begin()
        out = fn(*args)
        return tuple(t.clone() for t in out) if isinstance(out, tuple) else out.clone()

    def window(self, b: StaticBatch, n: int) -> int:
        """How many cache entries a call writing ``n`` tokens attends over: the longest live row's length and the
        ``n`` new entries and a spare, rounded up to ``WINDOW_STEP`` (at most the capacity). Attending over the
        whole capacity costs what the longest output would at every step: on a 3,072-token image, a 4,096-entry
        cache read and masked whole at every step. A GPU keeps the whole capacity: its CUDA graphs need fixed
        shapes."""
        cap = b.cache.capacity
        if self.gpu:
            return cap
        # The cache's last entry is a spare (``new_buffers``): a window never spans the whole cache, so that its
        # graph never learns the window's length from the cache's.
        return min(cap - 1, -(-(b.reach + n + 1) // WINDOW_STEP) * WINDOW_STEP)

    def batch_args(self, b: StaticBatch, n: int) -> tuple:
        """The batch's tensors as the static functions take them (``bpd.decoding.static_steps``) for a call that
        writes ``n`` tokens per row: the encoder state as the tuple of its fields, ``EncoderState``'s order, and
        last a tensor whose length is the attended window (``window``). The window is a tensor's size, not an
        int or a view of the cache: a size is symbolic in one graph for every window, and the cache keeps its
        own shape and strides (a view's would tie the graph to whether it is the whole cache)."""
        enc = b.enc
        w = self.window(b, n)
        span = b.spans.get(w)
        if span is None:
            span = b.spans[w] = torch.empty(w, dtype=torch.bool, device=b.alive.device)
            if self.compiled and not self.gpu:
                torch._dynamo.mark_dynamic(span, 0)
        return (b.alive, b.cache.lengths, b.cache.k, b.cache.v, (enc.src_mask, enc.cross_kv, enc.aligned), b.source,
                span)

    def bos(self, b: StaticBatch, width: int = 1) -> torch.Tensor:
        """BOS tokens (B, ``width``): the first call's input, or a stand-in block for the benchmark."""
        return b.alive.new_full((b.alive.shape[0], width), self.model.bos_id, dtype=torch.long)

    # -- greedy ------------------------------------------------------------------------------------------------
    def step(self, b: StaticBatch, tok: torch.Tensor) -> torch.Tensor:
        """One greedy step on tokens (B, 1): p_1's argmax (B,)."""
        out = self.call(("greedy",), lambda: greedy_step(self.model), tok, *self.batch_args(b, 1))
        b.reach += 1
        return out

    def greedy(self, src: torch.Tensor, max_len: int | None = None) -> DecodeResult:
        """Greedy decoding on the static path: one fixed-shape step per token."""
        b = self.begin(src, max_len)
        if b.max_len <= 0:
            return b.rows.result(0)
        tok = self.bos(b)
        calls = 0
        while b.rows.active:
            nxt = self.step(b, tok)
            calls += 1
            host = nxt.tolist()
            _finish(b, [row for slot, row in enumerate(b.rows.active) if b.rows.accept(slot, [host[row]])])
            tok = nxt[:, None]
        return b.rows.result(calls)

    # -- blockwise ---------------------------------------------------------------------------------------------
    def start(self, b: StaticBatch, k: int, bos: torch.Tensor) -> torch.Tensor:
        """The start call: the first block (B, k)."""
        out = self.call(("start", k), lambda: chain_start(self.model, k), bos, *self.batch_args(b, 1))
        b.reach += 1
        return out

    def round(self, b: StaticBatch, k: int, criterion: Criterion, floor: int, props: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One round on ``props``: the block sizes (B,), the accepted runs after slot 0 (B,) and the next block."""
        return self.call(("round", k, criterion, floor), lambda: chain_round(self.model, k, criterion, floor), props,
                         *self.batch_args(b, k))

    def blockwise(self, src: torch.Tensor, k: int, criterion: Criterion, floor: int,
                  max_len: int | None = None) -> DecodeResult:
        """Blockwise decoding on the static path: the start call, then one fixed-shape round per iteration."""
        b = self.begin(src, max_len)
        reached, accepted = [0] * (k - 1), [0] * (k - 1)
        if b.max_len <= 0:
            return b.rows.result(0, position_reached=reached, position_accepted=accepted)
        props = self.start(b, k, self.bos(b))
        calls = 1
        while b.rows.active:
            khat, runs, nxt = self.round(b, k, criterion, floor, props)
            calls += 1
            take_blocks(b, props, khat, runs, reached, accepted)
            props = nxt
        return b.rows.result(calls, position_reached=reached, position_accepted=accepted)

    # -- isolated step costs (``bpd.bench.step_costs``) ---------------------------------------------------------
    def step_functions(self, src: torch.Tensor, ks: list[int], criterion: Criterion, prefix_len: int,
                       max_len: int) -> dict[str, Callable[[], None]]:
        """Zero-argument functions the benchmark times on this path, as ``step_costs`` keys them: a greedy step
        (``t1``), a round per k (``t<k>``: verify, judge, advance, propose; the host reads its block sizes), the
        start call per k (``s<k>``) and the encoder (``enc``), each from rows ``prefix_len`` long and leaving
        them so. Every function is called once here: shapes compile now, not while timed."""
        b = self.begin(src, max_len)
        tok = self.bos(b)
        lengths = b.cache.lengths
        padded = self.padded(src)

        def rewind() -> None:
            lengths.fill_(prefix_len)
            b.reach = prefix_len

        def greedy() -> None:
            self.step(b, tok).tolist()
            rewind()

        fns: dict[str, Callable[[], None]] = {"t1": greedy, "enc": lambda: self.encode(padded)}
        for k in ks:
            props = self.bos(b, k)

            def round_k(k: int = k, props: torch.Tensor = props) -> None:
                khat, _, nxt = self.round(b, k, criterion, 1, props)
                torch.cat([nxt, khat[:, None]], dim=1).tolist()
                rewind()

            def start_k(k: int = k) -> None:
                self.start(b, k, tok).tolist()
                rewind()

            fns[f"t{k}"], fns[f"s{k}"] = round_k, start_k
        rewind()
        for fn in fns.values():
            fn()
        return fns


def take_blocks(b: StaticBatch, props: torch.Tensor, khat: torch.Tensor, runs: torch.Tensor, reached: list[int],
                accepted: list[int]) -> int:
    """A chain round's outcome on the host (the round's one read): each live row takes its accepted block of
    ``props`` (B, k) (``khat`` tokens; ``runs``: the accepted run after slot 0, counted per position), finished
    rows leave, and the batch's reach moves by the longest block, which is returned."""
    k = props.shape[1]
    host = torch.cat([props, khat[:, None], runs[:, None]], dim=1).tolist()
    step = max(r[k] for r in host)
    b.reach += step  # the longest row moved by the longest accepted block
    finished = []
    for slot, row in enumerate(b.rows.active):
        n, run = host[row][k], host[row][k + 1]
        if b.rows.accept(slot, host[row][:n]):
            finished.append(row)
        count_positions(reached, accepted, run, n, b.rows.blocks[row][-1])
    _finish(b, finished)
    return step


def _finish(b: StaticBatch, finished: list[int]) -> None:
    """Rows that finished leave the bookkeeping and freeze on the device (their lengths stop moving); the batch
    keeps its shape. ``RowTracker`` slots are then the original rows, since none is ever removed from the batch."""
    if not finished:
        return
    b.rows.drop([b.rows.active.index(r) for r in finished])
    b.alive[finished] = False


def _tensors(args) -> list[torch.Tensor]:
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, list | tuple):
            out += _tensors(a)
    return out


def engine_for(model, engine: str) -> StaticEngine:
    """The model's static engine (``static`` or ``compiled``), kept on the model until its weights change."""
    checked_engine(engine)
    if engine == "eager":
        raise ValueError("engine_for is the static path's; the eager path needs no engine.")
    global _COMPILED_FOR
    engines = model.__dict__.setdefault("_static_engines", {})
    e = engines.get(engine)
    if e is None or e.fingerprint != weights_fingerprint(model):
        e = engines[engine] = StaticEngine(model, compiled=engine == "compiled")
    if e.compiled and e.gpu and _COMPILED_FOR is not e:
        # Dynamo keeps compiled graphs per code object, and every engine's functions share their code: graphs of
        # another model (or of this one's earlier weights) are dropped, so that the guards ``StaticEngine.call``
        # skips are never what tells two models' frozen weights apart.
        torch._dynamo.reset()
        for other in engines.values():
            other.shapes.clear()
        _COMPILED_FOR = e
    return e


#: The engine whose compiled graphs dynamo holds now (``engine_for``).
_COMPILED_FOR: StaticEngine | None = None
