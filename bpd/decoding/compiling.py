"""How the static path's functions are compiled (``bpd.decoding.engine`` calls these): ``torch.compile`` per
device, inductor's settings while a CPU graph compiles, and what identifies the weights a graph froze.

On a CPU a graph is compiled by inductor with the weights frozen into it (prepacked for the CPU's matrix
kernels) and a C++ wrapper (no Python between kernels); on a GPU it is captured as CUDA graphs
(``mode="reduce-overhead"``), which need fixed shapes and addresses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

#: On a CPU, a compiled function's graph serves every source bucket (their lengths symbolic), so a test set
#: compiles each function once instead of once per bucket; CUDA graphs need fixed shapes and keep one per bucket.
#: (``bench/compile_variants.py --buckets each`` turns it off to compare.) Read at call time: the engine marks a
#: shape's buffers dynamic only while it is on.
DYNAMIC_BUCKETS = True


@contextlib.contextmanager
def graph_per_bucket():
    """Within it, compiled functions get one graph per source bucket (``DYNAMIC_BUCKETS`` off): the benchmarks'
    setting, since they time steady-state steps, whose compilation is untimed."""
    global DYNAMIC_BUCKETS
    before, DYNAMIC_BUCKETS = DYNAMIC_BUCKETS, False
    try:
        yield
    finally:
        DYNAMIC_BUCKETS = before


def on_gpu(model) -> bool:
    """Whether the model's weights are on a CUDA device (CUDA graphs) rather than a CPU (inductor's C++)."""
    return model.tgt_embed.weight.device.type == "cuda"


def compile_fn(fn: Callable, *, gpu: bool, dynamic: bool) -> Callable:
    """``fn`` compiled whole (``fullgraph=True``): on a GPU as CUDA graphs with every shape fixed; on a CPU with
    only the dimensions the caller marked dynamic symbolic (``dynamic``, else every one specialised). Inductor's
    CPU settings are ``compile_options``, in force when a shape's first call compiles it."""
    import torch._dynamo

    # One compiled graph per (shape, function): a test set's buckets and the bench's ks exceed dynamo's defaults,
    # both the entries per function and the compiles per code object over the process (every round of every k
    # and criterion is the same code, compiled per bucket and window in a benchmark). Past a limit dynamo would
    # run the function eagerly without a word, and a compiled row would time the eager path: a hit raises.
    config = torch._dynamo.config
    config.cache_size_limit = max(config.cache_size_limit, 256)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4096)
    config.fail_on_recompile_limit_hit = True
    if gpu:
        return torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead")
    # dynamic=None: only the dimensions marked with ``mark_dynamic`` are symbolic; every other one is specialised.
    return torch.compile(fn, fullgraph=True, dynamic=None if dynamic else False)


@contextlib.contextmanager
def compile_options(*, gpu: bool, aten: bool = False):
    """Inductor's settings while a CPU graph compiles: weight freezing (the weights become constants, and each
    matrix product's weight is prepacked once: passed as ``torch.compile(options=...)`` instead, the prepacking
    pass does not run), the C++ wrapper, and every matrix product on inductor's own CPU GEMM template
    (``max_autotune`` with the template as the only backend). At decoding's sizes the template beats MKL's
    kernels on every product measured (several times over for a few rows: a k-token verify, a small batch;
    results/bench/ENGINES.md), and taking it outright instead of timing both at compile time keeps a compile
    on a busy machine from keeping MKL's where a moment's noise favoured it. ``aten=True`` (the engine retries
    with it when a graph holds a product the template cannot take) lets ATen's kernels compete. A GPU keeps
    inductor's defaults."""
    import torch._inductor.config as inductor

    if gpu:
        yield
        return
    # (the choices' timings stay out of the log: one table per matrix product and shape)
    with inductor.patch(freezing=True, cpp_wrapper=True, max_autotune=True,
                        max_autotune_gemm_backends="CPP,ATEN" if aten else "CPP",
                        autotune_num_choices_displayed=0, max_autotune_report_choices_stats=False), \
            shared_packed_weights():
        yield


@contextlib.contextmanager
def shared_packed_weights():
    """One packed copy of a weight however many products of a graph read it.

    Inductor's CPU GEMM template packs a frozen weight for each product that reads it, and each packed copy
    becomes a constant of its own: a proposal chain that projects every slot's state onto the vocabulary reads
    k - 1 copies of the projection, and tied slots (``heads.tie_slots``) read k - 1 copies of their one set of
    weights, so a round streams several times the bytes its weights hold and outgrows the last-level cache.
    Within this context a packing equal to one already made for the same weight (same values, shape, strides
    and dtype: checked, not assumed) returns that tensor, which inductor then registers once
    (``GraphLowering.add_tensor_constant`` reuses a constant for the very same tensor)."""
    import torch
    import torch._inductor.compile_fx  # noqa: F401  (the template's module imports cleanly only after it)
    from torch._inductor.codegen.cpp_gemm_template import CppGemmTemplate

    original = CppGemmTemplate.__dict__["prep_weight"]
    made: dict[tuple, list[torch.Tensor]] = {}

    def prep_weight(cls, inputs, *args, **kwargs):
        new_inputs, layout = original.__func__(cls, inputs, *args, **kwargs)
        w, packed = inputs[1], new_inputs[1]
        if isinstance(w, torch.Tensor) and isinstance(packed, torch.Tensor) and packed is not w:
            key = (w.untyped_storage().data_ptr(), w.storage_offset(), tuple(w.shape), tuple(w.stride()), w.dtype)
            for earlier in made.setdefault(key, []):
                if (earlier.shape == packed.shape and earlier.stride() == packed.stride()
                        and earlier.dtype == packed.dtype and torch.equal(earlier, packed)):
                    new_inputs = [*new_inputs[:1], earlier, *new_inputs[2:]]
                    break
            else:
                made[key].append(packed)
        return new_inputs, layout

    CppGemmTemplate.prep_weight = classmethod(prep_weight)
    try:
        yield
    finally:
        CppGemmTemplate.prep_weight = original


def weights_fingerprint(model) -> tuple:
    """What the frozen weights were made from: every parameter's storage and version (an optimizer step, a
    ``load_state_dict`` or an in-place edit moves it), the dtype and the proposal settings."""
    heads = model.heads
    ids = heads.proposal_ids
    return (tuple((p.data_ptr(), p._version, p.dtype) for p in model.parameters()),
            None if ids is None else (ids.data_ptr(), tuple(ids.shape)), heads.proposal_precision)
