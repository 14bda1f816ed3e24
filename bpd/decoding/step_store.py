"""Compiled steps built once per machine and kept on disk: the static path's functions as AOTInductor packages.

``torch.compile`` keeps nothing a later process can use here: with the weights frozen into a graph (what makes a
CPU step fast), inductor's own caches skip the graph (prepacked weights do not pickle) or would key it without
the weights' values. So on a CPU the compiled engine (``bpd.decoding.engine``) exports each fixed-shape
function with ``torch.export`` (the dimensions the engine marks dynamic stay symbolic), compiles it ahead of time
with AOTInductor under the same inductor settings (``compiling.compile_options``: freezing, the C++ GEMM
template, one packed copy per weight), and stores the package, weights inside, under a key of everything that
determines it (``step_key``). A later process verifies the package against the digest written beside it and
loads it in a fraction of a second instead of compiling for a minute.

A package whose digest, manifest or load fails is deleted and rebuilt, with one line saying so; never used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from bpd.integrity import file_digest

#: Where packages are kept: set by ``use_store`` (the entry points pass ``<cache_dir>/compiled``) or the
#: ``BPD_COMPILED_DIR`` environment variable; else ``~/.cache/bpd/compiled``.
_ROOT: Path | None = None
#: Bumped when how a package is built or laid out changes (this module, the engine's arguments beyond their
#: shapes and nesting, which the key holds): packages of another format are never found.
FORMAT = 1
#: The library's code traced into a step: a change to any of it keys new packages. The models' modules but
#: checkpoint files' reading and writing; the static functions (trees' too), criteria and the compile settings.
_TRACED = ("models/*.py", "models/heads/*.py", "decoding/static_*.py", "decoding/tree_build.py",
           "decoding/tree_shape.py", "decoding/criteria.py", "decoding/compiling.py")
_UNTRACED = ("models/checkpoint.py",)
#: A build folder older than this was left by a build that was killed: removed when the store is next used.
_STALE_BUILD_S = 3600.0


def store_dir() -> Path:
    if _ROOT is not None:
        return _ROOT
    env = os.environ.get("BPD_COMPILED_DIR")
    return Path(env) if env else Path.home() / ".cache" / "bpd" / "compiled"


def use_store(path: str | Path | None) -> None:
    """Keep compiled steps under ``path`` (None: back to the default, ``store_dir``)."""
    global _ROOT
    _ROOT = None if path is None else Path(path)


@contextlib.contextmanager
def store_at(path: str | Path) -> Iterator[None]:
    before = _ROOT
    use_store(path)
    try:
        yield
    finally:
        use_store(before)


# -- what determines a package ---------------------------------------------------------------------------------
def model_digest(model) -> str:
    """The model's weights and settings as a digest: every parameter's and buffer's name, dtype, shape and bytes,
    the proposal vocabulary and precision, and the model's config (a few tens of ms for the demo's model)."""
    h = hashlib.sha256(repr(getattr(model, "cfg", None)).encode())
    heads = model.heads
    h.update(repr((heads.proposal_precision, type(heads).__name__)).encode())
    # (persistent buffers only: a sinusoidal position table grows with the longest input, and the engine keys
    # packages by its length instead)
    named = [*model.named_parameters(), *((n, b) for n, b in model.named_buffers() if not n.endswith("pos_table"))]
    if heads.proposal_ids is not None:
        named.append(("proposal_ids", heads.proposal_ids))
    for name, t in named:
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


_CODE: str | None = None


def code_digest() -> str:
    """The source of the library's traced modules (``_TRACED``): a package built by other code is never used."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256(str(FORMAT).encode())
        files = sorted({f for pattern in _TRACED for f in root.glob(pattern)} - {root / u for u in _UNTRACED})
        for f in files:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
        _CODE = h.hexdigest()
    return _CODE


def machine() -> dict:
    """What a compiled CPU step is specialised to besides its inputs: torch, the CPU and its threads."""
    return {"torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(), "cpu_model": _cpu_model(),
            "threads": torch.get_num_threads()}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Signature:
    """The inputs a step takes: their nesting, and each tensor's dtype and shape, -1 where it is dynamic."""

    tree: str
    tensors: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, args: tuple, exact: bool = False) -> Signature:
        """``exact``: every dimension as it is, none dynamic."""
        leaves, spec = torch.utils._pytree.tree_flatten(args)
        tensors = tuple((str(t.dtype), tuple(-1 if d in dynamic_dims(t) and not exact else s
                                             for d, s in enumerate(t.shape)))
                        for t in leaves if isinstance(t, torch.Tensor))
        return cls(str(spec), tensors)


def dynamic_dims(t: torch.Tensor) -> set[int]:
    """The dimensions of ``t`` the engine marked dynamic (``torch._dynamo.mark_dynamic``)."""
    return set(getattr(t, "_dynamo_dynamic_indices", ()))


def step_key(fn_key: tuple, digest: str, args: tuple, aten: bool, exact: bool = False) -> str:
    """The package's name: a digest of the function (its key: name, k, criterion, minimum block size, and what
    else the engine says determines it), the weights, the inputs' signature (``exact``: with no dimension
    dynamic), the traced code, the machine and the GEMM backends it may use."""
    what = {"fn": repr(fn_key), "weights": digest, "inputs": repr(Signature.of(args, exact)),
            "code": code_digest(), "machine": machine(), "aten": aten}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


# -- building, checking, loading -------------------------------------------------------------------------------
class _Step(torch.nn.Module):
    """A static function as a module for ``torch.export``: the model is a submodule, so its weights are the
    program's parameters (frozen into the package) rather than constants found in a closure."""

    def __init__(self, model, fn: Callable) -> None:
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args):
        return self.fn(*args)


def _dynamic_shapes(args: tuple, exact: bool):
    """``torch.export``'s dynamic shapes for ``args``: the marked dimensions, each its own symbol (``exact``:
    none)."""

    def one(x):
        if isinstance(x, torch.Tensor):
            return None if exact else {d: torch.export.Dim.AUTO for d in sorted(dynamic_dims(x))} or None
        if isinstance(x, list | tuple):
            return type(x)(one(y) for y in x)
        return None

    return tuple(one(a) for a in args)


def export_step(model, fn: Callable, args: tuple, exact: bool = False):
    tensors = [t for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    marks = [set(dynamic_dims(t)) for t in tensors]
    try:
        with warnings.catch_warnings():  # (tables a step closes over are constants of the package, as intended)
            warnings.filterwarnings("ignore", message=".*not properly registered as a parameter.*")
            return torch.export.export(_Step(model, fn), args, dynamic_shapes={"args": _dynamic_shapes(args, exact)},
                                       strict=False)
    finally:  # export clears the engine's marks from its inputs: they still say what later packages keep dynamic
        for t, dims in zip(tensors, marks):
            if dims:
                t._dynamo_dynamic_indices = dims


def input_spec(program) -> list[list]:
    """Each user input's shape as the package takes it: an int where fixed, ``[low, high]`` where symbolic."""
    ranges = program.range_constraints
    specs = []
    user = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            specs.append(None)
            continue
        dims = []
        for s in val.shape:
            if isinstance(s, torch.SymInt):
                r = ranges.get(s.node.expr)
                dims.append([0, None] if r is None else [_bound(r.lower), _bound(r.upper)])
            else:
                dims.append(int(s))
        specs.append(dims)
    return specs


def _bound(x) -> int | None:
    """A range's end as an int (None: unbounded)."""
    return int(x) if x.is_number and x.is_finite is not False and abs(float(x)) != float("inf") else None


def fits(spec: list, args: tuple) -> bool:
    """Whether ``args``' tensors have the shapes a package takes (``input_spec``): a package called with any
    other shape reads out of bounds, so every new shape is checked before its first call."""
    tensors = [t for t in torch.utils._pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    wanted = [s for s in spec if s is not None]
    if len(tensors) != len(wanted):
        return False
    for t, dims in zip(tensors, wanted):
        if len(dims) != t.dim():
            return False
        for n, d in zip(t.shape, dims):
            if isinstance(d, list):
                if (d[0] is not None and n < d[0]) or (d[1] is not None and n > d[1]):
                    return False
            elif n != d:
                return False
    return True


@dataclass
class Loaded:
    """A package's callable and the input shapes it takes."""

    run: Callable
    spec: list
    built_s: float  # this process's seconds building it (0: loaded)
    load_s: float


def load_runner(package: Path) -> Callable:
    """The package's model as a function of the step's arguments. ``aoti_load_package``'s callable parses the
    package's input and output tree specs (JSON) at every call; a decode calls a step hundreds of times a
    sentence, so the output spec is parsed once here and the arguments flattened straight to their tensors (in
    the order export flattened them; the None fields of an encoder state are not inputs)."""
    loader = torch._inductor.aoti_load_package(str(package)).loader
    out_spec = torch.utils._pytree.treespec_loads(loader.get_call_spec()[1])
    leaves, unflatten, boxed_run = torch.utils._pytree.tree_leaves, torch.utils._pytree.tree_unflatten, loader.boxed_run

    def run(*args):
        return unflatten(boxed_run([t for t in leaves(args) if isinstance(t, torch.Tensor)]), out_spec)

    return run


def build_or_load(key: str, model, make: Callable[[], Callable], args: tuple, aten: bool, exact: bool = False,
                  note: Callable[[str], None] = print) -> Loaded:
    """The package ``key`` loaded from the store, built first when it is missing or fails its check. Jobs sharing
    a store build a key once (a lock beside it)."""
    from bpd.locks import FileLock

    root = store_dir()
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(root)
    package, manifest = root / f"{key}.pt2", root / f"{key}.json"
    lock = FileLock(root / f"{key}.lock", stale_s=600.0)
    lock.acquire(log=note)
    try:
        loaded = _checked_load(package, manifest, note)
        if loaded is not None:
            return loaded
        return _build(package, manifest, model, make, args, aten, exact)
    finally:
        lock.release()


def _remove_stale_builds(root: Path) -> None:
    for d in root.glob(".build-*"):
        try:
            if time.time() - d.stat().st_mtime > _STALE_BUILD_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def _checked_load(package: Path, manifest: Path, note: Callable[[str], None]) -> Loaded | None:
    if not package.exists() and not manifest.exists():
        return None
    t0 = time.perf_counter()
    why = None
    try:
        meta = json.loads(manifest.read_text())
        if package.stat().st_size != meta["bytes"] or file_digest(package) != meta["sha256"]:
            why = "its digest does not match its manifest"
        else:
            run = load_runner(package)
            return Loaded(run, meta["spec"], 0.0, time.perf_counter() - t0)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        why = f"it cannot be read ({type(e).__name__}: {str(e)[:120]})"
    note(f"compiled step {package.name} is damaged or incomplete ({why}): rebuilding it.")
    for p in (package, manifest):
        p.unlink(missing_ok=True)
    return None


def _build(package: Path, manifest: Path, model, make: Callable[[], Callable], args: tuple, aten: bool,
           exact: bool) -> Loaded:
    from bpd.decoding.compiling import compile_options

    t0 = time.perf_counter()
    program = export_step(model, make(), args, exact)
    spec = input_spec(program)
    with tempfile.TemporaryDirectory(dir=package.parent, prefix=".build-") as tmp:
        made = Path(tmp) / package.name
        with compile_options(gpu=False, aten=aten):
            torch._inductor.aoti_compile_and_package(program, package_path=str(made))
        meta = {"sha256": file_digest(made), "bytes": made.stat().st_size, "spec": spec, "format": FORMAT,
                "built_s": round(time.perf_counter() - t0, 1), "machine": machine()}
        part = manifest.with_suffix(".json.part")
        part.write_text(json.dumps(meta))
        os.replace(made, package)  # the package first: a manifest never names a missing or partial package
        os.replace(part, manifest)
    built = time.perf_counter() - t0
    t1 = time.perf_counter()
    run = load_runner(package)
    return Loaded(run, spec, built, time.perf_counter() - t1)
