"""Honest speedups: paired, repeated timing of every evaluation, the machine's load beside each timed row, and
the printed table flagging a number the repeats or the load make unreliable (issue 46)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_model, random_src

from bpd import machine_load
from bpd.bench.speedup_ci import timing_columns
from bpd.decoding.spec import DecodeSpec
from bpd.decoding.timed import Passes, RunOutput, decode_and_time
from bpd.evaluate import format_table, merge_shards, speedup_columns


def test_each_batch_is_timed_repeatedly_with_the_order_rotating(monkeypatch):
    model = random_model(vocab=20, k=3, seed=0, dtype=torch.float32)
    sources = [random_src(1, 5, 20, seed=s)[0].tolist() for s in range(4)]
    specs = [DecodeSpec("greedy"), DecodeSpec("blockwise", k=3)]
    once = decode_and_time(model, sources, specs, lambda src: 8, passes=Passes(progress=False))
    calls = []
    real = decode_and_time.__globals__["_timed_call"]

    def spy(fn, *args):
        calls.append(fn)
        return real(fn, *args)

    monkeypatch.setattr("bpd.decoding.timed._timed_call", spy)
    thrice = decode_and_time(model, sources, specs, lambda src: 8, passes=Passes(repeats=3, rotate=0, progress=False))
    for name in ("greedy", "blockwise_k3_exact"):
        o = thrice[name]
        assert o.tokens == once[name].tokens and o.invocations == once[name].invocations  # outputs: the first repeat
        assert np.shape(o.repeat_wall_s) == (3, 4)
        assert o.batch_wall_s == [float(np.median(c)) for c in zip(*o.repeat_wall_s)]
        assert o.wallclock_s == pytest.approx(sum(o.batch_wall_s))
    # 4 batches x 3 repeats x 2 decoders, and who goes first alternates from one repeat to the next.
    firsts = [calls[i] for i in range(0, len(calls), 2)]
    assert len(calls) == 24 and firsts[0] is not firsts[1] and firsts[0] is firsts[2]
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        decode_and_time(model, sources, specs, lambda src: 8, passes=Passes(repeats=0, progress=False))


def test_speedup_columns_flag_disagreeing_repeats_a_busy_machine_and_a_single_pass():
    g = np.array([[1.0, 2.0, 1.0], [1.02, 2.0, 0.99]])
    clean = timing_columns(g, g / 2)
    assert clean["speedup"] == pytest.approx(2.0) and clean["timing_note"] is None
    assert clean["speedup_ci_low"] <= 2.0 <= clean["speedup_ci_high"] and clean["timing_repeats"] == 2
    noisy = timing_columns(g, np.array([[0.5, 1.0, 0.5], [0.6, 1.2, 0.6]]))  # the second repeat 20% slower
    assert noisy["timing_note"].startswith("noisy: repeats 1.67-2.00x")
    assert timing_columns(g, g / 2, busy=True)["timing_note"] == "busy"
    single = timing_columns(g[:1], g[:1] / 2)
    assert single["timing_note"] == "1 repeat" and single["speedup_ci_low"] is None
    # Outputs without per-batch repeats (hand-made) keep the plain ratio.
    plain = speedup_columns(RunOutput([], [], [], wallclock_s=2.0), RunOutput([], [], [], wallclock_s=1.0))
    assert plain == {"speedup": 2.0}


def _stat(tmp_path, name: str, busy: int, idle: int) -> object:
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice (clock ticks), two cores
    p = tmp_path / name
    p.write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n")
    return p


def test_load_is_the_cpu_other_processes_took_and_busy_when_it_needs_our_cores(tmp_path, monkeypatch):
    hz = machine_load.os.sysconf("SC_CLK_TCK")
    a = machine_load.sample(_stat(tmp_path, "a", 0, 0))
    b = machine_load.sample(_stat(tmp_path, "b", 3 * hz, hz))  # 3 core-seconds busy over the interval
    a = machine_load.CpuSample(0.0, 0.0, a.busy_s, a.cores)
    cols = machine_load.load_columns(a, machine_load.CpuSample(2.0, 2.0, b.busy_s, b.cores), threads=2)
    # 3 busy core-seconds in 2 s, 2 of them ours: the others took half a core of the two ours needed.
    assert (cols["load_cores"], cols["load_self_cores"], cols["load_other_cores"]) == (2, 1.0, 0.5)
    assert cols["timing_busy"] is True
    assert machine_load.load_columns(a, machine_load.CpuSample(2.0, 2.0, b.busy_s, b.cores), threads=1)[
        "timing_busy"] is False  # one thread on two cores: the other core was free for them
    quiet = machine_load.load_columns(a, machine_load.CpuSample(2.0, 2.9, b.busy_s, b.cores), threads=2)
    assert quiet["load_other_cores"] == pytest.approx(0.05) and quiet["timing_busy"] is False
    assert machine_load.sample(tmp_path / "missing").busy_s is None  # not Linux: the load average decides


def test_the_printed_table_marks_unreliable_speedups_and_says_why():
    common = {"n_examples": 2, "identical_to_greedy": 1.0, "iterations": 10, "wallclock_s": 1.0, "bleu": 5.0,
              "load_other_cores": 0.9, "load_self_cores": 1.1, "load_cores": 2, "loadavg_1m": 2.5}
    rows = [
        {**common, "decoder": "greedy", "method": "greedy", "mean_block_size": 1.0, "speedup": 1.0,
         "timing_note": "busy"},
        {**common, "decoder": "blockwise_k2_exact", "method": "blockwise", "mean_block_size": 1.4, "speedup": 1.1,
         "speedup_ci_low": 1.08, "speedup_ci_high": 1.12, "timing_note": None},
        {**common, "decoder": "blockwise_k4_exact", "method": "blockwise", "mean_block_size": 1.15, "speedup": 1.68,
         "speedup_ci_low": 1.2, "speedup_ci_high": 2.1, "timing_note": "noisy: repeats 1.40-1.90x; busy"},
    ]
    text = format_table(rows)
    lines = text.splitlines()
    assert "1.10x  " in lines[3] and "[1.08, 1.12]" in lines[3]
    assert "1.68x?" in lines[4] and "[1.20, 2.10]" in lines[4]
    assert "load while timing: other processes 0.90 cores, this one 1.10, of 2 cores" in text
    assert "? blockwise_k4_exact: noisy: repeats 1.40-1.90x; busy" in text
    assert "blockwise_k2_exact:" not in text  # a clean row has no note
    # The machine (with its instruction set) and the decode path: older rows without an engine decoded eagerly.
    on = [{**r, "device": "cpu:AMD EPYC (AVX2) x2 threads"} for r in rows]
    on[2]["engine"] = "compiled"
    assert "timed on cpu:AMD EPYC (AVX2) x2 threads, decode path eager / compiled" in format_table(on)


def test_sharded_repeats_stay_paired():
    def out(times):
        return RunOutput([[1]], [1], [[1]], wallclock_s=sum(times[0]), batch_wall_s=list(times[0]),
                         repeat_wall_s=times)

    parts = [([0], {"greedy": out([[1.0], [1.1]])}), ([1], {"greedy": out([[2.0], [2.2]])})]
    merged = merge_shards(parts, 2)["greedy"]
    assert merged.repeat_wall_s == [[1.0, 2.0], [1.1, 2.2]] and merged.batch_wall_s == [1.0, 2.0]
