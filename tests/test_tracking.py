"""The device a row records names the CPU's vector instructions, since a VM's model name may not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bpd.tracking import cpu_model

CPUINFO = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f {extra}\n"


def test_cpu_model_names_the_vector_instructions(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO.format(extra="amx_bf16 amx_tile"))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor (AVX512+AMX)"
    info.write_text(CPUINFO.format(extra=""))
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor (AVX512)"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert cpu_model(info) == "Intel(R) Xeon(R) Processor"
    assert cpu_model(tmp_path / "missing")  # no /proc/cpuinfo: the platform's name, never empty


def test_this_machine_reports_what_torch_uses():
    cap = torch.backends.cpu.get_cpu_capability()
    assert cap == "DEFAULT" or f"({cap}" in cpu_model()


def test_an_append_the_disk_refuses_leaves_the_rows_file_as_it_was(tmp_path, monkeypatch):
    import errno

    import pytest

    from bpd.config import SCHEMA
    from bpd.tracking import append_rows, read_rows

    rows = tmp_path / "rows.jsonl"
    append_rows(rows, [{"a": 1}])
    before = rows.read_bytes()

    def full(fd):  # the rows reached the file's buffer, then the disk filled up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("bpd.tracking.os.fsync", full)
    with pytest.raises(OSError, match="No space left"):
        append_rows(rows, [{"b": 2}, {"c": 3}])
    assert rows.read_bytes() == before and read_rows(rows) == [{"a": 1, "schema": SCHEMA}]


def test_sample_translations_log_when_fewer_than_twenty_were_decoded():
    """decode.n_examples below 20 with a W&B run: the samples table holds the decoded sentences only (the split's
    other pairs were never decoded; an IndexError ended such an evaluation after its rows were written)."""
    from types import SimpleNamespace

    from bpd.decoding.spec import DecodeSpec
    from bpd.decoding.timed import RunOutput
    from bpd.tasks.translation import TranslationTask

    tables = {}
    tracker = SimpleNamespace(run=object(), table=lambda name, cols, rows: tables.__setitem__(name, rows))
    tok = SimpleNamespace(id_to_piece=lambda t: f"\u2581w{t}", decode=lambda ids: " ".join(map(str, ids)))
    pairs = type("Pairs", (), {"__len__": lambda self: 50, "src": lambda self, i: torch.tensor([i, i])})()
    spec = DecodeSpec("blockwise", k=2)
    outs = {spec.name: RunOutput(tokens=[[1, 2, 3]] * 3, iterations=[2] * 3, block_sizes=[[2, 1]] * 3)}
    TranslationTask.log_outputs(SimpleNamespace(tokenizer=tok), tracker, None, outs, [spec], pairs, None)
    assert tables[f"samples/{spec.name}"][0][2] == "w1 w2 | w3" and len(tables[f"samples/{spec.name}"]) == 3


def test_an_offline_evaluation_run_reads_back_as_its_rows(tmp_path, monkeypatch):
    """What the W&B dashboard will show of an evaluation, read from the offline run file before any sync: its config
    holds what a sweep varies, its summary each decoder's figures, its group the experiment; analysis/wandb_runs.py
    turns it back into the rows."""
    import sys
    from types import SimpleNamespace

    wandb = pytest.importorskip("wandb")
    from bpd.config import DecodeConfig, LoggerConfig
    from bpd.evaluate import Decoded, log_to_wandb

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from analysis import make_report
    from analysis.wandb_runs import offline_runs, run_records, run_rows

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    runtime = SimpleNamespace(logger=LoggerConfig(dir=str(tmp_path)), experiment="sweep_a")
    task = SimpleNamespace(quality="bleu", log_outputs=lambda *a: None)
    common = {"setting": "both", "trained_k": 4, "heads_arch": "recurrent", "dataset": "ding_en_de", "split": "test",
              "model": "heads_k4.pt", "experiment": "sweep_a", "task": "translation", "time": "2026-12-07T21:00:00"}
    rows = [{**common, "decoder": "greedy", "bleu": 21.5, "mean_block_size": 1.0, "speedup": 1.0,
             "identical_to_greedy": 1.0},
            {**common, "decoder": "blockwise_k4_exact", "bleu": 21.5, "mean_block_size": 2.75, "speedup": 1.3,
             "speedup_ci_low": 1.2, "speedup_ci_high": 1.4, "identical_to_greedy": 1.0}]
    decoded = Decoded([], {}, None, None, DecodeConfig(ks=[2, 4], engine="compiled"))
    log_to_wandb(runtime, task, decoded, rows, common, "abc123", tmp_path)
    wandb.teardown()  # the run file is written by W&B's service process: wait for it to finish writing
    (run,) = offline_runs(tmp_path)
    assert (run.group, run.job_type, run.name) == ("sweep_a", "evaluate", "eval-abc123")
    assert {k: run.config[k] for k in ("setting", "trained_k", "heads_arch", "dataset", "engine", "ks", "criteria")} \
        == {"setting": "both", "trained_k": 4, "heads_arch": "recurrent", "dataset": "ding_en_de",
            "engine": "compiled", "ks": [2, 4], "criteria": ["exact", "topk2"]}
    back = run_rows([run]).set_index("decoder")
    for r in rows:
        for key in ("bleu", "mean_block_size", "speedup", "speedup_ci_low", "identical_to_greedy", "setting"):
            if key in r:
                assert back.loc[r["decoder"], key] == r[key], (r["decoder"], key)
    # The whole rows too, as make figures WANDB_RUNS=... draws from them.
    assert [{k: v for k, v in r.items() if k in rows[0] or k in rows[1]} for r in run_records([run])] == rows
    report = tmp_path / "report" / "REPORT.md"
    assert make_report.main(["--wandb-runs", str(tmp_path), "--out", str(report.parent / "figures"),
                             "--report", str(report)]) == 0
    assert "from 2 rows (latest run of each configuration) in the W&B evaluation runs" in report.read_text()
