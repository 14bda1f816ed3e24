"""Locks on cached products: two jobs asking for the same model train it once; stale locks are taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from bpd.locks import FileLock

REPO = Path(__file__).resolve().parents[1]


def test_a_held_lock_is_refused_and_a_released_one_taken(tmp_path):
    a, b = FileLock(tmp_path / "m.lock"), FileLock(tmp_path / "m.lock")
    assert a.try_acquire() and not b.try_acquire()
    assert "pid" in b.owner()
    a.release()
    assert not (tmp_path / "m.lock").exists() and b.try_acquire()
    a.release()  # not a's lock any more: it stays
    assert (tmp_path / "m.lock").exists()
    b.release()


def test_stale_locks_are_taken_over(tmp_path):
    lock = tmp_path / "m.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process of this host that no longer exists: a killed job
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid, "since": time.time()}))
    assert FileLock(lock).try_acquire()
    # Another host's owner whose heartbeat stopped longer ago than stale_s (its node died).
    lock.write_text(json.dumps({"host": "elsewhere", "pid": 1, "since": 0}))
    os.utime(lock, (time.time() - 300, time.time() - 300))
    assert not FileLock(lock, stale_s=600).try_acquire() and FileLock(lock, stale_s=120).try_acquire()


# What each job script starts with: the toy task and a config whose stages finish in seconds.
PRELUDE = r"""
import sys, time
sys.path.insert(0, {tests!r})
from pathlib import Path
from toy import evaluate_toy, toy_config, toy_task
from bpd import evaluate as ev, stages
from bpd.runtime import Runtime

cfg = toy_config(Path({tmp!r}), train={{"max_steps": 12, "eval_every": 100}})
task = toy_task(cfg)
"""

SCRIPT = PRELUDE + r"""
real = stages._train_stage
def marked(*args, **kw):
    Path({tmp!r}, "trained-" + sys.argv[1]).write_text("")
    time.sleep(8)  # hold the lock long enough that the other job surely arrives while it is held
    return real(*args, **kw)
stages._train_stage = marked
print("PATH", stages.ensure_base(Runtime.build(cfg), stages.Recipe.of(cfg), task))
"""


def two_jobs(script: str, tmp_path: Path) -> list[str]:
    """Run ``script`` (formatted with the tests folder and ``tmp_path``) as two processes started together,
    job i getting argument i; their standard outputs, once both succeeded."""
    path = tmp_path / "job.py"
    path.write_text(script.format(tests=str(REPO / "tests"), tmp=str(tmp_path)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    jobs = [subprocess.Popen([sys.executable, str(path), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env) for i in range(2)]
    outs = [j.communicate(timeout=600) for j in jobs]
    # The traceback, not the progress bars around it (tqdm's carriage returns).
    errs = ["\n".join(l for l in err.replace("\r", "\n").splitlines() if "it/s" not in l) for _, err in outs]
    assert all(j.returncode == 0 for j in jobs), [e[-3000:] for e in errs]
    return [out for out, _ in outs]


def test_two_jobs_asking_for_the_same_base_model_train_it_once(tmp_path):
    from toy import toy_config, toy_task

    toy_task(toy_config(tmp_path))  # the data and tokenizer first, as a sweep's first job would
    outs = two_jobs(SCRIPT, tmp_path)
    paths = {line for out in outs for line in out.splitlines() if line.startswith("PATH")}
    assert len(paths) == 1  # both got the same model
    assert len(list(tmp_path.glob("trained-*"))) == 1  # and only one of them trained it
    assert any("waiting for" in out for out in outs)
    assert not list(tmp_path.rglob("*.lock"))


def test_an_append_after_a_partial_line_loses_nothing(tmp_path, capsys):
    """A crash mid-write leaves a partial last line: the next append starts on a fresh line, the damaged
    line goes to rows.jsonl.damaged (reported), and pandas can read the file again."""
    import pandas as pd

    from bpd.tracking import append_rows, read_rows

    rows = tmp_path / "rows.jsonl"
    append_rows(rows, [{"run_id": "a", "bleu": 1.0}])
    with open(rows, "a") as f:
        f.write('{"run_id": "b", "bl')  # the crash
    append_rows(rows, [{"run_id": "c", "bleu": 3.0}])
    assert [r["run_id"] for r in read_rows(rows)] == ["a", "c"]
    assert (tmp_path / "rows.jsonl.damaged").read_text() == '{"run_id": "b", "bl\n'
    assert "1 damaged line" in capsys.readouterr().out
    assert list(pd.read_json(rows, lines=True)["run_id"]) == ["a", "c"]
    with open(rows, "a") as f:
        f.write('{"run_id": "d"}')  # a whole row without its newline is a row, not damage
    append_rows(rows, [{"run_id": "e"}])
    assert [r["run_id"] for r in read_rows(rows)] == ["a", "c", "d", "e"]
    assert not (tmp_path / "rows.jsonl.lock").exists()


EVAL_SCRIPT = PRELUDE + r"""
real = ev._evaluate
def slow(*args, **kw):
    time.sleep(8)  # hold the run's lock while the other job arrives
    return real(*args, **kw)
ev._evaluate = slow
rows = evaluate_toy(cfg, task, stages.ensure_heads(Runtime.build(cfg), stages.Recipe.of(cfg), task))
print("ROWS", len(rows))
"""


def test_two_identical_evaluations_decode_once(tmp_path):
    """The second of two identical evaluations started together waits for the first, then skips: the rows
    appear once, not twice."""
    from toy import staged, toy_config, toy_task

    from bpd import stages
    from bpd.tracking import read_rows

    cfg = toy_config(tmp_path, train={"max_steps": 12, "eval_every": 100})
    staged(stages.ensure_heads, cfg, toy_task(cfg))  # the model first: this test is about the evaluation
    outs = two_jobs(EVAL_SCRIPT, tmp_path)
    rows = read_rows(tmp_path / "results" / "rows.jsonl")
    assert len(rows) == len({r["decoder"] for r in rows}) > 0  # one set of rows
    assert sum("skipping" in out for out in outs) == 1 and sum("waiting for" in out for out in outs) == 1
    assert len(list((tmp_path / "results" / "outputs").iterdir())) == 1
