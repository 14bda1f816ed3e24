"""Fault injection: every artifact is checked when it is opened, and a full disk costs no finished work.

Each case was silent (or a traceback) before these checks: damaged checkpoint bytes loaded as NaNs, a cut token
store decoded, a cut rows line changed a report cell, a full disk during a checkpoint save escaped the handler and
lost the training since the last save, a full disk while writing outputs left an empty ``greedy.hyp.txt``, and a
plugin path that does not exist imported the standard library's module of the same name."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MICRO

from bpd.config import TrainConfig
from bpd.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

REPO = Path(__file__).resolve().parents[1]


def tiny_model():
    from bpd.models import build_translation_model

    return build_translation_model(20, 1, MICRO, seed=0, identity_p1=True)


def tiny_checkpoint(path: Path, step: int = 1) -> Path:
    model = tiny_model()
    save_checkpoint(path, {"model_config": model.config_dict(), "model": model.state_dict(), "step": step})
    return path


def damage_largest_entry(path: Path, n: int = 64) -> None:
    """Overwrite ``n`` bytes inside the data of the zip's largest entry (a weight tensor), keeping the file's size."""
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2").tolist()
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        f.write(b"\xff" * n)


# ---------------------------------------------------------------------------------------------------------------
# checkpoints


def test_damaged_checkpoint_bytes_are_refused_naming_the_file(tmp_path):
    path = tiny_checkpoint(tmp_path / "mine.pt")
    damage_largest_entry(path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    msg = str(e.value)
    assert f"the checkpoint {path} is damaged (its entry" in msg and "fails its CRC check" in msg and "\n" not in msg


def test_a_damaged_cached_checkpoint_is_set_aside_and_retrained(tmp_path, capsys):
    from bpd.stages import finished

    path = tiny_checkpoint(tmp_path / "base_gold_s0_x.pt")
    assert finished(path)
    damage_largest_entry(path)
    assert not finished(path)  # the stage trains it again
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"note: the checkpoint {path} is damaged") and out.endswith("retraining it.")
    assert "\n" not in out and not path.exists() and path.with_name(path.name + ".corrupt").exists()


def test_a_damaged_shipped_checkpoint_is_refused(tmp_path):
    from bpd.shipped import install, manifests

    for suffix in (".pt", ".json"):
        shutil.copy(REPO / "checkpoints" / f"faces_sr_base{suffix}", tmp_path / f"faces_sr_base{suffix}")
    (m,) = manifests(tmp_path).values()
    damage_largest_entry(tmp_path / "faces_sr_base.pt", n=8)
    with pytest.raises(CheckpointError, match="faces_sr_base.pt does not match its manifest's size and sha256"):
        install(tmp_path / "cache" / m["cache_name"], m["fingerprint"], tmp_path)
    assert not (tmp_path / "cache" / m["cache_name"]).exists()


# ---------------------------------------------------------------------------------------------------------------
# token stores


def small_store(path: Path, n: int = 20):
    from bpd.data.store import write_store

    rng = np.random.default_rng(0)
    pairs = [(rng.integers(3, 50, rng.integers(2, 9)), rng.integers(3, 50, rng.integers(2, 9))) for _ in range(n)]
    return write_store(path, iter(pairs), 60, {})


def test_a_cut_token_file_is_refused_naming_the_store(tmp_path):
    from bpd.data.store import PairStore

    store = small_store(tmp_path / "s.store")
    os.truncate(store.path / "src.bin", int(store.arrays["src_idx"][10]) * 2 + 3)  # cut inside row 10
    with pytest.raises(ValueError, match=rf"the token store {tmp_path / 's.store'} is damaged: src.bin is"):
        PairStore(tmp_path / "s.store")
    os.truncate(store.path / "src.bin", 40)  # was an error blaming the input ("all padding")
    with pytest.raises(ValueError, match="src.bin is 40 bytes"):
        PairStore(tmp_path / "s.store")


def test_a_cut_or_damaged_index_is_refused(tmp_path):
    from bpd.data.store import PairStore

    store = small_store(tmp_path / "s.store")
    idx = store.path / "tgt.idx"
    whole = idx.read_bytes()
    idx.write_bytes(whole[:-8])  # was an IndexError traceback at the last pair
    with pytest.raises(ValueError, match="tgt.idx is"):
        PairStore(store.path)
    idx.write_bytes(whole[:40] + (7).to_bytes(8, "little") + whole[48:])  # same size, one offset changed
    with pytest.raises(ValueError, match="tgt.idx does not match its manifest's sha256"):
        PairStore(store.path)


def test_a_damaged_store_the_harness_builds_is_rebuilt(tmp_path):
    from bpd.data.store import StoreEncoding, build_store

    for side in ("src", "tgt"):
        (tmp_path / f"train.{side}").write_text("".join(f"{side} line {i} " * (i % 4 + 1) + "\n" for i in range(30)))
    encoding = StoreEncoding(lambda lines: [[3 + ord(c) % 50 for c in line] for line in lines], 2, 60, "toy")
    notes: list[str] = []
    build = lambda: build_store(tmp_path / "train.store", tmp_path / "train.src", tmp_path / "train.tgt",  # noqa: E731
                                encoding, log=notes.append)
    first = [build().pair(i) for i in range(30)]
    os.truncate(tmp_path / "train.store" / "tgt.bin", 100)
    notes.clear()
    again = build()
    assert notes[0].startswith(f"note: the token store {tmp_path / 'train.store'} is damaged: tgt.bin is 100 bytes")
    assert notes[0].endswith("; rebuilding it.") and [again.pair(i) for i in range(30)] == first


# ---------------------------------------------------------------------------------------------------------------
# rows


def rows_file(folder: Path, cut: bool) -> Path:
    row = {"experiment": "x", "run_id": "r", "task": "translation", "dataset": "toy", "split": "test", "model": "m.pt",
           "decoder": "greedy", "method": "greedy", "k": 1, "bleu": 20.0, "time": "2026-01-01T00:00:00"}
    lines = [json.dumps(row), json.dumps({**row, "decoder": "blockwise_k2_exact", "k": 2, "bleu": 19.0})]
    if cut:
        lines.append(lines[-1][:40])
    (folder / "x").mkdir(parents=True)
    (folder / "x" / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "x" / "rows.jsonl"


def test_a_cut_row_fails_the_report_unless_accepted(tmp_path, capsys):
    from analysis import make_report

    rows = rows_file(tmp_path / "results", cut=True)
    args = ["--results", str(tmp_path / "results"), "--out", str(tmp_path / "fig"), "--report", str(tmp_path / "R.md")]
    assert make_report.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {rows} line 3: not JSON (") and "--accept-damaged" in err and "\n" not in err
    assert not (tmp_path / "R.md").exists()
    assert make_report.main([*args, "--accept-damaged"]) == 0
    assert f"skipped {rows} line 3: not JSON" in capsys.readouterr().out
    assert f"`{rows} line 3: not JSON" in (tmp_path / "R.md").read_text()


def test_the_readme_table_refuses_a_cut_row(tmp_path):
    from analysis.readme_table import read

    rows = rows_file(tmp_path, cut=True)
    with pytest.raises(ValueError, match=f"{rows} line 3: not JSON"):
        read(rows)
    assert len(read(rows, accept_damaged=True)) == 2


# ---------------------------------------------------------------------------------------------------------------
# a full disk


def short_writes_after(monkeypatch, step: int) -> None:
    """``torch.save`` as the zip writer fails on a full disk, for payloads of ``step`` or later: part of the file
    written, then its RuntimeError."""
    real = torch.save

    def save(obj, f, *a, **kw):
        if obj.get("step", 0) >= step:
            Path(f).write_bytes(b"PK\x03\x04" + b"\0" * 100)
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4416 vs 4310")
        return real(obj, f, *a, **kw)

    monkeypatch.setattr(torch, "save", save)


def test_a_full_disk_during_a_checkpoint_save_keeps_the_previous_one(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(REPO / "experiments"))
    from _common import guarded

    path = tiny_checkpoint(tmp_path / "m.pt", step=1)
    short_writes_after(monkeypatch, 2)
    with pytest.raises(SystemExit) as e:
        guarded(lambda: tiny_checkpoint(path, step=2))
    err = capsys.readouterr().err.strip()
    assert e.value.code == 1 and "\n" not in err
    assert err.startswith("error: No space left on device (about ") and "needed" in err and f"writing {path};" in err
    assert load_checkpoint(path)["step"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_a_full_disk_wrapped_by_the_compiler_is_one_sentence(tmp_path, capsys):
    """Inductor raises its own error around the OSError of a compiled step's build (``InductorError: OSError:
    [Errno 28]``): the entry point still ends with the full-disk sentence, not a traceback."""
    sys.path.insert(0, str(REPO / "experiments"))
    from _common import guarded

    class CompilerError(RuntimeError):
        pass

    def build():
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "step.so"))
        except OSError as e:
            raise CompilerError("InductorError: OSError: [Errno 28] No space left on device") from e

    with pytest.raises(SystemExit) as e:
        guarded(build)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 1 and "\n" not in err
    assert err.startswith("error: No space left on device writing ") and "step.so" in err
    with pytest.raises(CompilerError):  # any other compiler error is not taken for a full disk
        guarded(lambda: (_ for _ in ()).throw(CompilerError("a bug")))


def test_training_resumes_from_the_checkpoint_before_a_full_disk(tmp_path, monkeypatch):
    from test_training import quiet, toy_batches

    from bpd.integrity import DiskFull
    from bpd.training.loop import train

    cfg = TrainConfig(lr=3e-3, warmup_steps=2, max_steps=8, max_minutes=None, ckpt_every=2, label_smoothing=0.0)
    whole = tiny_model()
    train(whole, toy_batches(n=5), cfg, quiet(tmp_path / "whole.pt"))
    short_writes_after(monkeypatch, 6)
    with pytest.raises(DiskFull) as e:
        train(tiny_model(), toy_batches(n=5), cfg, quiet(tmp_path / "m.pt"))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "m.state.pt")
    assert load_checkpoint(tmp_path / "m.state.pt")["step"] == 4
    monkeypatch.undo()  # space freed: the same run again goes on from step 4
    resumed = tiny_model()
    assert train(resumed, toy_batches(n=5), cfg, quiet(tmp_path / "m.pt"))["step"] == 8
    for (n, p), q in zip(whole.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=f"{n} differs after resuming")


def test_a_full_disk_writing_outputs_leaves_no_empty_output(tmp_path, monkeypatch):
    from test_stages import NO_BEAM
    from toy import evaluate_toy, toy_config, toy_task, tweak

    from bpd.config import CriterionConfig
    from bpd.runtime import ResultsNotSaved
    from bpd.tasks.translation import TranslationScorer

    cfg = toy_config(tmp_path)
    task = toy_task(cfg)
    model = task.build_model(cfg.model, cfg.heads, cfg.heads.k, 0)  # untrained: what it decodes does not matter
    path = tmp_path / "heads.pt"
    save_checkpoint(path, {"model_config": model.config_dict(), "model": model.state_dict(), "step": 0})
    results = Path(cfg.paths.results_dir)
    real = TranslationScorer.write

    def full(self, tokens, stem):
        if results in stem.parents:  # the file is opened, then the disk fills before anything is written
            stem.parent.mkdir(parents=True, exist_ok=True)
            stem.with_suffix(".hyp.txt").write_text("")
            raise OSError(errno.ENOSPC, "No space left on device", str(stem.with_suffix(".hyp.txt")))
        return real(self, tokens, stem)

    monkeypatch.setattr(TranslationScorer, "write", full)
    redo = tweak(cfg, decode={"timing_repeats": 1, "methods": NO_BEAM, "ks": [2], "n_examples": 2,
                              "criteria": [CriterionConfig("exact")]})
    with pytest.raises(ResultsNotSaved):
        evaluate_toy(redo, task, path)
    assert not [p for p in results.rglob("*.hyp.txt")]


# ---------------------------------------------------------------------------------------------------------------
# plugins


@pytest.mark.parametrize("plugin, message", [
    ("{tmp}/nowhere/typing.py", "does not exist; give the path of a module file or a package folder"),
    ("{tmp}/typing.py", "is named 'typing' like the module"),
    ("{tmp}/broken.py", "has a syntax error in {tmp}/broken.py line 1"),
    ("{tmp}/needs.py", "imports 'no_such_package_xyz', which is not installed"),
    ("no_such_plugin_xyz", "is no importable module"),
])
def test_a_bad_plugin_is_one_sentence_naming_it(tmp_path, monkeypatch, plugin, message):
    from bpd.config import registry

    (tmp_path / "typing.py").write_text("X = 1\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "needs.py").write_text("import no_such_package_xyz  # noqa: F401\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    plugin, message = plugin.format(tmp=tmp_path), message.format(tmp=tmp_path)
    with pytest.raises(ValueError) as e, registry.extended([]):  # PluginError
        registry.load_plugins([plugin])
    assert str(e.value).startswith(f"the plugin {plugin} (BPD_PLUGINS) ") and message in str(e.value)


def test_a_bad_plugin_ends_an_entry_point_with_one_sentence(tmp_path):
    """Plugins load as an entry point starts (``_common.start``, before Hydra composes): one sentence, exit 2."""
    env = {**os.environ, "BPD_PLUGINS": str(tmp_path / "nowhere" / "typing.py"), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "experiments/run.py"], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"error: the plugin {tmp_path / 'nowhere' / 'typing.py'} (BPD_PLUGINS) does not exist")


def test_a_damaged_built_corpus_is_built_again(tmp_path, capsys):
    """A built Debian corpus is reused only while its split files match the digests its manifest recorded (a cut
    or altered file is noted and the corpus built again from its cached packages)."""
    from types import SimpleNamespace

    from corpora.debian.archive import sha256_file
    from corpora.debian.build import _reuse
    from corpora.layout import SPLITS

    files = {}
    for s in SPLITS:
        for x in ("src", "tgt"):
            (tmp_path / f"{s}.{x}").write_text(f"{s} {x} one\n{s} {x} two\n", encoding="utf-8")
            files[f"{s}.{x}"] = sha256_file(tmp_path / f"{s}.{x}")
    (tmp_path / "manifest.json").write_text(json.dumps({"files": files}), encoding="utf-8")
    opts = SimpleNamespace(direction="en-de")
    assert _reuse(tmp_path, opts)
    (tmp_path / "train.tgt").write_text("train tgt one\n", encoding="utf-8")  # cut
    capsys.readouterr()
    assert not _reuse(tmp_path, opts)
    assert "train.tgt differ from its manifest" in capsys.readouterr().out
