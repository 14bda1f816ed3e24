"""Compiled steps kept on disk (``bpd.decoding.step_store``): built once per machine, loaded by later engines and
processes, keyed by everything that determines them, and rebuilt (never used) when a package fails its check."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import random_model, random_src

from bpd.decoding import greedy_decode, step_store
from bpd.decoding.engine import engine_for


def demo_like_model(seed: int = 2):
    """float32 (the GEMM template's type) with the demo's head design."""
    return random_model(40, 4, seed=seed, arch="attend", head_noise=0.05, heads_tied=True, dtype=torch.float32)


def fresh_engine_decode(model, src, store: Path):
    """Greedy on the compiled path by an engine that has nothing loaded (a copy of the model: a new engine, as in
    a later process), and that engine."""
    twin = copy.deepcopy(model)
    with step_store.store_at(store):
        out = greedy_decode(twin, src, max_len=14, engine="compiled")
    return out, engine_for(twin, "compiled")


def packages(store: Path) -> list[Path]:
    return sorted(store.glob("*.pt2"))


def test_a_later_engine_loads_the_stored_steps_instead_of_building_them(tmp_path):
    """A later engine (another process's) loads what an earlier one built, for any source bucket: here a long
    source's run builds, and a short one's loads (a short evaluation after a long one must not build again)."""
    model, src, long = demo_like_model(), random_src(2, 6, 40, seed=3), random_src(2, 70, 40, seed=4)
    want = greedy_decode(model, src, max_len=14, engine="static").tokens
    first, e1 = fresh_engine_decode(model, long, tmp_path)
    assert first.tokens == greedy_decode(model, long, max_len=14, engine="static").tokens
    assert e1.compile_seconds > 0 and e1.load_seconds > 0
    assert len(packages(tmp_path)) == 2  # the encoder's and the step's: each serves every window and bucket
    second, e2 = fresh_engine_decode(model, src, tmp_path)
    assert second.tokens == want and len(packages(tmp_path)) == 2
    assert e2.compile_seconds == 0 and 0 < e2.load_seconds < e1.compile_seconds / 5
    manifest = json.loads(packages(tmp_path)[0].with_suffix(".json").read_text())
    assert manifest["sha256"] == step_store.file_digest(packages(tmp_path)[0])


@pytest.mark.slow
def test_a_later_process_loads_them_too(tmp_path):
    """The store is the only thing two processes share: a second process builds nothing."""
    script = (
        "import sys, torch; sys.path.insert(0, 'tests')\n"
        "from test_step_store import demo_like_model\n"
        "from conftest import random_src\n"
        "from bpd.decoding import greedy_decode, step_store\n"
        "from bpd.decoding.engine import engine_for\n"
        f"step_store.use_store({str(tmp_path)!r})\n"
        "m = demo_like_model()\n"
        "out = greedy_decode(m, random_src(2, 6, 40, seed=3), max_len=14, engine='compiled')\n"
        "e = engine_for(m, 'compiled')\n"
        "print(out.tokens, e.compile_seconds, e.load_seconds)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).parents[1]).stdout.split("]] ") for _ in range(2)]
    (tokens1, times1), (tokens2, times2) = runs
    assert tokens1 == tokens2
    built1, _ = map(float, times1.split())
    built2, loaded2 = map(float, times2.split())
    assert built1 > 0 and built2 == 0 and loaded2 > 0


@pytest.mark.parametrize("damage", ["bytes", pytest.param("manifest", marks=pytest.mark.slow),
                                    pytest.param("package", marks=pytest.mark.slow)])
def test_a_damaged_or_partial_package_is_rebuilt_with_a_note(tmp_path, capsys, damage):
    model, src = demo_like_model(), random_src(2, 6, 40, seed=3)
    want = greedy_decode(model, src, max_len=14, engine="static").tokens
    fresh_engine_decode(model, src, tmp_path)
    package = packages(tmp_path)[0]
    if damage == "bytes":
        data = bytearray(package.read_bytes())
        data[len(data) // 2: len(data) // 2 + 4096] = bytes(4096)
        package.write_bytes(bytes(data))
    elif damage == "manifest":  # a package whose manifest was never written (a build cut short)
        package.with_suffix(".json").unlink()
    else:
        package.unlink()
    capsys.readouterr()
    out, e = fresh_engine_decode(model, src, tmp_path)
    assert out.tokens == want and e.compile_seconds > 0
    said = capsys.readouterr().out
    assert ("damaged or incomplete" in said) == (damage != "package"), said
    assert len(packages(tmp_path)) == 2  # (the encoder's and the greedy step's)


def test_the_key_follows_everything_that_determines_a_package(monkeypatch):
    """Weights, the function, the inputs' fixed dimensions, the traced code and the machine each change the key;
    the dimensions the engine marks dynamic do not."""
    model = demo_like_model()
    e = engine_for(model, "static")
    b = e.begin(random_src(1, 6, 40, seed=3), 12)
    args = (e.bos(b), *e.batch_args(b, 1))
    digest = step_store.model_digest(model)
    key = step_store.step_key(("greedy",), digest, args, aten=False)
    other = demo_like_model(seed=5)
    assert step_store.model_digest(other) != digest
    assert step_store.step_key(("start", 4), digest, args, aten=False) != key
    assert step_store.step_key(("greedy",), digest, args, aten=True) != key
    wider = (e.bos(b, 2), *args[1:])
    assert step_store.step_key(("greedy",), digest, wider, aten=False) != key
    for t in (args[0], wider[0]):  # a dimension marked dynamic is not in the key
        torch._dynamo.mark_dynamic(t, 1)
    assert step_store.step_key(("greedy",), digest, wider, aten=False) == step_store.step_key(
        ("greedy",), digest, args, aten=False)
    real = step_store.machine()
    for field, value in (("threads", 99), ("cpu", "OTHER"), ("torch", "0.0")):
        monkeypatch.setattr(step_store, "machine", lambda f=field, v=value: {**real, f: v})
        assert step_store.step_key(("greedy",), digest, args, aten=False) != key
        monkeypatch.undo()
    monkeypatch.setattr(step_store, "_CODE", "other code")
    assert step_store.step_key(("greedy",), digest, args, aten=False) != key


def test_a_package_takes_only_the_shapes_it_was_built_for():
    spec = [[2, 1], [2, [16, None]], [[2, 1024]]]
    a = (torch.zeros(2, 1), torch.zeros(2, 40), torch.zeros(64))
    assert step_store.fits(spec, a)
    assert not step_store.fits(spec, (torch.zeros(3, 1), *a[1:]))  # a fixed dimension
    assert not step_store.fits(spec, (a[0], torch.zeros(2, 8), a[2]))  # below a symbol's range
    assert not step_store.fits(spec, (*a[:2], torch.zeros(2048)))  # above it
    assert not step_store.fits(spec, a[:2])


def test_a_build_folder_left_by_a_killed_build_is_removed(tmp_path):
    import os
    import time

    old, new = tmp_path / ".build-old", tmp_path / ".build-new"
    for d in (old, new):
        d.mkdir()
        (d / "half.pt2").write_bytes(b"x")
    os.utime(old, (time.time() - 2 * step_store._STALE_BUILD_S,) * 2)
    step_store._remove_stale_builds(tmp_path)
    assert not old.exists() and new.exists()  # (a build in progress elsewhere keeps its folder)
