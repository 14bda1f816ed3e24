"""Scale-out: DDP over 2 gloo processes equals one process accumulating the same batches; resume across world
sizes; sharded evaluation equals one process; Hydra sweeps skip finished work; the SLURM launcher config."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from bpd.config import HeadsConfig, TrainConfig
from bpd.training.distributed import (
    DistInfo,
    cleanup,
    grad_accum_for,
    init_distributed,
    main_first,
    shard_batches,
    wrap_ddp,
)
from bpd.training.loop import Placement, TrainOutput, configure_params, train
from bpd.training.resume import resume_position

REPO = Path(__file__).resolve().parents[1]
VOCAB = 20


def all_batches(n: int = 6, seed: int = 0):
    """An epoch of n ragged batches (different token counts, so token weighting matters)."""

    def batches(epoch: int, start: int = 0):
        g = torch.Generator().manual_seed(seed + 1000 * epoch)
        for b in range(n):
            rows, width = 3 + b % 3, 4 + (b * 5) % 4
            src = torch.randint(3, VOCAB - 1, (rows, width), generator=g)
            tgt_out = torch.cat([src + 1, torch.full((rows, 1), 2)], dim=1)
            for r in range(rows):  # ragged targets: pad a random tail
                cut = int(torch.randint(2, width + 2, (1,), generator=g))
                tgt_out[r, cut:] = 0
            tgt_in = torch.cat([torch.full((rows, 1), 1), tgt_out[:, :-1]], dim=1)
            tgt_in[tgt_out == 0] = 0
            if b >= start:
                yield src, tgt_in, tgt_out

    return batches


def rank_batches(rank: int, world: int):
    """What make_batches gives rank r: every world-th batch of the epoch, starting at r."""
    full = all_batches()
    return lambda epoch, start=0: (b for j, b in enumerate(
        b for i, b in enumerate(full(epoch)) if i % world == rank) if j >= start)


def micro_model(k: int = 1, **kw):
    from conftest import MICRO

    from bpd.models import build_translation_model

    return build_translation_model(VOCAB, k, MICRO, seed=0, dropout=0.0, identity_p1=True, **kw)


CASES = {
    "base": (None, dict(lr=3e-3, warmup_steps=2, max_steps=4, ckpt_every=100)),
    # p_1 may be drawn: the heads' parameters then get no gradient (DDP's find_unused_parameters path).
    "sampled": (HeadsConfig(k=3, arch="medusa", training="finetune", loss="sampled"),
                dict(lr=3e-3, warmup_steps=2, max_steps=5)),
}


def case_model(name: str):
    return micro_model(k=1) if name == "base" else micro_model(k=3, heads_arch="medusa")


def run_ranked(name: str, path: Path, world: int, rank: int, info: DistInfo | None = None, **over) -> None:
    """Train case ``name``: one process with grad_accum=2, or one of 2 DDP ranks with grad_accum=1."""
    heads, opts = CASES[name]
    cfg = TrainConfig(**{**opts, "max_minutes": None, "grad_accum": 2 // world, "ckpt_every": 2, **over})
    model = case_model(name)
    ddp = None
    if info is not None and info.distributed:
        configure_params(model, cfg, heads)
        ddp = wrap_ddp(model, info, find_unused_parameters=heads is not None and heads.loss == "sampled")
    train(model, rank_batches(rank, world), cfg, TrainOutput(path, progress=False), heads=heads,
          place=Placement(ddp_model=ddp, is_main=rank == 0))


def _ddp_worker(rank: int, world: int, port: int, tmp: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    info = init_distributed(backend="gloo", device="cpu")
    assert info.distributed and info.rank == rank and info.is_main == (rank == 0)
    t = Path(tmp)
    for name in CASES:
        run_ranked(name, t / f"ddp_{name}.pt", world, rank, info)
    # Resume across world sizes: 2 ranks stop at step 2 (one process resumes them), and 2 ranks resume
    # what one process left at step 2.
    run_ranked("base", t / "ddp_then_single.pt", world, rank, info, max_steps=2)
    run_ranked("base", t / "single_then_ddp.pt", world, rank, info)
    # Sharded evaluation (written by rank 0) against the single-process rows the parent wrote.
    if (t / "eval_cfg.json").exists():
        _eval_worker(t)
    cleanup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_same_model(a: Path, b: Path) -> None:
    from bpd.training.checkpoint import load_checkpoint

    pa, pb = load_checkpoint(a), load_checkpoint(b)
    assert pa["step"] == pb["step"]
    for n, p in pa["model"].items():
        q = pb["model"][n]
        if n.endswith("kv.bias"):
            # The key half of the bias cannot change the loss (softmax is shift-invariant), so its gradient is
            # float noise that Adam scales up to lr-sized steps: only bounded. The value half must match.
            half = p.numel() // 2
            assert (p[:half] - q[:half]).abs().max() <= pa["train_config"]["lr"] * pa["step"]
            p, q = p[half:], q[half:]
        # Two ranks sum gradients in another order than one process: float noise that Adam's division by a
        # small second moment can lift to ~1e-5 on some CPUs (seen on a 2-core EPYC); a wrong average or a
        # missed rank would differ by lr-sized steps (1e-3), two orders above this tolerance.
        torch.testing.assert_close(p, q, rtol=1e-5, atol=2e-5, msg=lambda m, n=n: f"{n}: {m}")


# ---------------------------------------------------------------------------------------------------------------
# Sharded evaluation on a toy task (the model is untrained: only equality with one process matters)
# ---------------------------------------------------------------------------------------------------------------

# Timing, and the machine description (it names the thread count, which the ranks set to 1).
TIMING = {"wallclock_s", "greedy_wallclock_s", "speedup", "time", "threads", "command", "device", "speedup_ci_low",
          "speedup_ci_high", "speedup_ci_halfwidth", "speedup_repeats", "speedup_spread", "timing_note",
          "timing_busy", "load_other_cores", "load_self_cores", "load_cores", "loadavg_1m"}


def _eval_cfg(tmp: Path, results: str, batch_size: int):
    from toy import toy_config

    return toy_config(
        tmp,
        paths={"cache_dir": str(tmp / "cache"), "results_dir": str(tmp / results)},
        decode={"batch_size": batch_size, "n_examples": 7, "methods": {"beam": {"size": 0}}, "max_len_extra": 4,
                "ks": [3]},
    )


def _eval_rows(tmp: Path, results: str, batch_size: int) -> list[dict]:
    from toy import evaluate_toy, toy_task

    from bpd.training.checkpoint import save_checkpoint

    cfg = _eval_cfg(tmp, results, batch_size)
    task = main_first(lambda: toy_task(cfg))
    path = tmp / "cache" / "eval_model.pt"
    if not path.exists():
        model = task.build_model(cfg.model, cfg.heads, 3, seed=0)
        save_checkpoint(path, {"model_config": model.config_dict(), "model": model.state_dict(), "step": 0})
    return evaluate_toy(cfg, task, path)


def _eval_worker(t: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    for bs in (1, 4):
        _eval_rows(t, f"results_ddp_b{bs}", bs)


def comparable(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in TIMING and not k.endswith("_file")}
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def one_thread():
    """One intra-op thread, as the ranks use: with 2 ranks on 2 busy cores, more threads only contend."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_single_process_is_a_no_op(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(var, raising=False)
    info = init_distributed()
    assert info == DistInfo() and info.is_main and not info.distributed
    assert wrap_ddp(micro_model(), info) is None
    assert main_first(lambda: 7) == 7


def test_grad_accum_keeps_the_global_batch():
    assert grad_accum_for(1, 1, None) == 1 and grad_accum_for(2, 4, None) == 2
    assert grad_accum_for(1, 1, 8) == 8 and grad_accum_for(1, 8, 8) == 1 and grad_accum_for(2, 4, 8) == 4
    with pytest.raises(ValueError, match="reference_world_size"):
        grad_accum_for(1, 3, 8)
    # Resume on another world size: the same global position, rounded down to a whole step.
    assert resume_position(3, 2, 2, 1) == 3
    assert resume_position(3, 2, 1, 2) == 6  # 2 ranks x 3 batches = one process's first 6
    assert resume_position(6, 1, 2, 1) == 3
    assert resume_position(5, 1, 2, 2) == 2  # one whole step of 2 ranks x 2 batches; the 5th batch is redone
    assert resume_position(3, 1, 2, 2) == 0


def test_shard_batches_keeps_batch_composition():
    order = [4, 0, 3, 1, 2, 6, 5]
    shards = [shard_batches(order, 2, r, 2) for r in range(2)]
    assert shards == [[4, 0, 2, 6], [3, 1, 5]]
    assert sorted(shards[0] + shards[1]) == list(range(7))
    assert shard_batches(order, 1, 1, 3) == [0, 2]


def test_two_gloo_ranks_equal_one_process_and_resume_across_world_sizes(tmp_path, one_thread):
    """2 DDP ranks x 1 micro-batch == 1 process x 2 micro-batches (same batches, same seed, dropout 0); a
    checkpoint written by either resumes on the other; sharded evaluation writes one process's rows."""
    sys.path.insert(0, str(REPO / "tests"))
    # One process first: the references, and a run stopped at step 2 that the 2 ranks will resume.
    for name in CASES:
        run_ranked(name, tmp_path / f"single_{name}.pt", 1, 0)
    run_ranked("base", tmp_path / "single_then_ddp.pt", 1, 0, max_steps=2)
    state = torch.load(tmp_path / "single_then_ddp.state.pt", weights_only=False)
    assert (state["step"], state["world_size"]) == (2, 1)
    random.seed(0)  # train() seeds the python RNG that samples heads with its seed (0)
    assert 0 in [random.choice([0, 1, 2]) for _ in range(5)], "the sampled case should draw p_1 at least once"
    for bs in (1, 4):
        _eval_rows(tmp_path, f"results_single_b{bs}", bs)
    from bpd.tracking import read_rows

    # both sides as written to rows.jsonl (what a reader sees, the schema column included)
    single_rows = {bs: read_rows(tmp_path / f"results_single_b{bs}" / "rows.jsonl") for bs in (1, 4)}
    (tmp_path / "eval_cfg.json").write_text("{}")

    mp.spawn(_ddp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)

    for name in CASES:
        assert_same_model(tmp_path / f"ddp_{name}.pt", tmp_path / f"single_{name}.pt")
    state = torch.load(tmp_path / "ddp_then_single.state.pt", weights_only=False)
    assert (state["step"], state["world_size"], state["batch_idx"]) == (2, 2, 2)
    run_ranked("base", tmp_path / "ddp_then_single.pt", 1, 0)  # resumes the 2-rank state on one process
    assert_same_model(tmp_path / "ddp_then_single.pt", tmp_path / "single_base.pt")
    assert_same_model(tmp_path / "single_then_ddp.pt", tmp_path / "single_base.pt")

    for bs in (1, 4):
        ddp_rows = read_rows(tmp_path / f"results_ddp_b{bs}" / "rows.jsonl")
        assert len(ddp_rows) == len(single_rows[bs])  # rank 0 alone appended
        assert comparable(ddp_rows) == comparable(single_rows[bs])
        for a, b in zip(ddp_rows, single_rows[bs]):  # the hypothesis files too
            for key in (k for k in a if k.endswith("_file") and k != "ref_file"):
                assert (REPO / a[key]).read_bytes() == (REPO / b[key]).read_bytes()


def test_killed_stage_resumes_to_the_same_checkpoint(tmp_path, monkeypatch, one_thread):
    """Pipeline level: a base model killed between checkpoints, then re-run, equals an uninterrupted one."""
    from toy import staged, toy_config, toy_task

    from bpd import stages
    from bpd.tasks import TranslationTask
    from bpd.training.checkpoint import load_checkpoint

    cfg_a = toy_config(tmp_path)
    cfg_b = toy_config(tmp_path, paths={"cache_dir": str(tmp_path / "cache_b"), "results_dir": str(tmp_path / "rb")})
    task = toy_task(cfg_a)
    whole = staged(stages.ensure_base, cfg_a, task)

    real = TranslationTask.train_batches

    def dying(*args, **kw):  # the process is killed at the 17th batch; checkpoints are every 10 steps
        make, seen = real(*args, **kw), [0]

        def batches(epoch: int, start: int = 0):
            for b in make(epoch, start):
                seen[0] += 1
                if seen[0] == 17:
                    raise KeyboardInterrupt
                yield b

        return batches

    monkeypatch.setattr(TranslationTask, "train_batches", dying)
    with pytest.raises(KeyboardInterrupt):
        staged(stages.ensure_base, cfg_b, task)
    monkeypatch.setattr(TranslationTask, "train_batches", real)
    killed = tmp_path / "cache_b" / "models" / whole.name
    assert not killed.exists() and load_checkpoint(killed.with_name(killed.stem + ".state.pt"))["step"] == 10
    assert staged(stages.ensure_base, cfg_b, task) == killed  # the re-run resumes at step 10
    assert_same_model(killed, whole)


def test_multirun_writes_both_results_and_a_rerun_skips_them(tmp_path):
    """A basic-launcher sweep over two values writes both runs' rows; invoked again, it trains and decodes
    nothing (stages are cached by config hash, rows by run id)."""
    from toy import make_corpus

    corpus = make_corpus(tmp_path / "corpus")
    args = [
        sys.executable, "experiments/run.py", "-m", "name=mr", "task=folder", f"task.data_dir={corpus}",
        "task.vocab_size=60", "task.max_len=16", "model=micro", "threads=1", "device=cpu", "logger=none",
        "train.max_steps=10", "train.max_minutes=null", "train.max_tokens=256", "train.eval_every=1000",
        "train.ckpt_every=5", "heads_train.max_steps=5", "heads_train.max_minutes=null", "decode.n_examples=4",
        "decode.methods.beam.size=0", "decode.ks=[2]", "decode.max_len_extra=4", "decode.criteria=[{name:exact}]",
        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.results_dir={tmp_path / 'results'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", "heads.k=2,3",
    ]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(var, None)

    from bpd.tracking import read_rows

    first = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = read_rows(tmp_path / "results" / "rows.jsonl")
    assert sorted({r["trained_k"] for r in rows}) == [2, 3] and len({r["run_id"] for r in rows}) == 2
    assert "heads-k2-frozen-gold: 5 steps" in first.stdout and "heads-k3-frozen-gold: 5 steps" in first.stdout

    again = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("skipping") == 2 and " steps, " not in again.stdout
    assert read_rows(tmp_path / "results" / "rows.jsonl") == rows


def test_slurm_launcher_config_composes_into_a_valid_sbatch_script(tmp_path, monkeypatch):
    """hydra/launcher=submitit_slurm composes, passes the plugin's schema, and renders an sbatch script
    (nothing is submitted: submitit's own rendering, as the launcher would call it)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    submitit = pytest.importorskip("submitit")
    import warnings

    from hydra import compose, initialize_config_dir
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf, SlurmQueueConf
    from omegaconf import OmegaConf

    sys.path.insert(0, str(REPO / "experiments"))
    import _common

    _common.register()  # the config schemas, as every entry point's start registers them

    over = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "hydra.launcher.array_parallelism=4"]
    with warnings.catch_warnings(), initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        warnings.simplefilter("ignore")  # Hydra 1.3 notes that the file shares the plugin's schema name
        cfg = compose("config", overrides=over, return_hydra_config=True)
        local = compose("config", overrides=["hydra/launcher=submitit_local"], return_hydra_config=True)
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)  # what Hydra does before it builds the launcher (${hydra:...})
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher.pop("_target_").endswith("SlurmLauncher")
    assert set(launcher) <= set(OmegaConf.structured(SlurmQueueConf)), "a key the plugin does not know"
    local_keys = OmegaConf.to_container(local.hydra.launcher, resolve=True)
    assert local_keys.pop("_target_").endswith("LocalLauncher")
    assert set(local_keys) <= set(OmegaConf.structured(LocalQueueConf))
    assert launcher["gpus_per_node"] == launcher["tasks_per_node"]  # one DDP rank per GPU

    # What SlurmLauncher.launch does with these parameters, minus sbatch.
    from submitit.slurm.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # pretend srun exists
    folder = tmp_path / ".submitit"
    executor = submitit.AutoExecutor(
        cluster="slurm", folder=folder, slurm_max_num_timeout=launcher.pop("max_num_timeout")
    )
    launcher.pop("submitit_folder")
    base = set(OmegaConf.structured(BaseQueueConf))
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in launcher.items()})
    script = executor._executor._make_submission_file_text("python -u -m submitit.core._submit x", "uid")
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --ntasks-per-node=8",
        "#SBATCH --nodes=1",
        "#SBATCH --time=2880",
        "#SBATCH --signal=USR2@120",
        "export OMP_NUM_THREADS=1",
        f"export PYTHONPATH={Path.cwd()}/experiments:",
    ):
        assert line in script, f"{line!r} not in the sbatch script:\n{script}"
