"""Typed configs: every shipped Hydra config composes into the library's dataclasses with the values its
files say, the drifted defaults stay resolved, and bad options are refused with the fix."""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bpd.config import (
    DecodeConfig,
    ExperimentConfig,
    HeadsConfig,
    ImageTaskConfig,
    TranslationTaskConfig,
    experiment_config,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))
import _common  # noqa: E402

_common.register()  # the schemas, as every entry point's start registers them

EXPERIMENTS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("*.yaml"))
ENTRIES = ("config", "run", "train_stage", "distill", "bench")


def composed(overrides: list[str], entry: str = "config"):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(entry, overrides=overrides)
    return _common.to_configs(cfg)


def test_every_experiment_composes_into_valid_dataclasses():
    assert {"demo", "demo_sr", "table1", "table1_small", "table2", "table2_small"} <= set(EXPERIMENTS)
    for name in EXPERIMENTS:
        cfg, _ = composed([f"experiment={name}"])
        assert type(cfg) is ExperimentConfig and isinstance(cfg.decode, DecodeConfig)
        image = name.endswith("_sr") or name.startswith("table2")
        assert isinstance(cfg.task, ImageTaskConfig if image else TranslationTaskConfig), name
        assert cfg.command and cfg.results_dir == f"results/{cfg.name}"


def test_every_config_budgets_training_in_steps():
    """The same command trains the same model on any machine: every experiment (and the bare default) has a
    step budget, and a minute limit only as a safety cap (at least 10 min, over a CPU-sized step budget)."""
    for overrides in [[], *([f"experiment={n}"] for n in EXPERIMENTS)]:
        paper = overrides in (["experiment=table1"], ["experiment=table2"])
        cfg, _ = composed(overrides + (["task.data_dir=/data"] if paper else []))
        for stage in (cfg.train, cfg.heads_train_config):
            if stage.max_minutes is not None:
                assert stage.max_minutes >= 10 and stage.max_steps <= 10_000, (overrides, stage)
            else:
                assert stage.max_steps <= (10**6 if paper else 10_000), (overrides, stage)


def test_files_set_what_they_say():
    demo, _ = composed(["experiment=demo"])
    assert (demo.name, demo.heads.arch, demo.heads.k, demo.heads.targets, demo.heads.p1_weight) == (
        "demo", "recurrent", 8, "self", 7.0)
    assert demo.model.dropout == 0.3 and demo.model.d_model == 256  # the shipped base (base/mt_shipped.yaml)
    assert demo.train.max_minutes is None and demo.train.max_steps == 6000  # a step budget, no time cap
    assert demo.heads_train_config.max_steps == 300 and demo.heads_train_config.base_lr_scale == 0.05
    assert demo.heads_train_config.max_tokens == demo.train.max_tokens  # null in heads_train: train's value
    # ... but not the base run that train.continue_from continues: the heads stage continues only its own.
    cont, _ = composed(["experiment=demo", "train.continue_from=base.state.pt"])
    assert cont.train.continue_from == "base.state.pt" and cont.heads_train_config.continue_from is None
    cont, _ = composed(["experiment=demo", "train.continue_from=a.pt", "heads_train.continue_from=b.pt"])
    assert (cont.train.continue_from, cont.heads_train_config.continue_from) == ("a.pt", "b.pt")
    debian, _ = composed(["experiment=demo_debian_train"])
    assert (debian.task.name, debian.heads.arch, debian.heads.k, debian.heads.targets, debian.distill.max_sources) == (
        "debian_en_de", "attend", 6, "self", 50000)
    assert debian.heads_train_config.base_lr_scale == demo.heads_train_config.base_lr_scale  # the same heads recipe
    main, _ = composed(["experiment=demo_debian"])  # Table 1's Both model, shipped, on the compiled path
    assert (main.setting, main.heads.k, main.decode.engine, main.decode.proposal_precision, main.decode.ks,
            main.decode.n_examples) == ("both", 10, "compiled", "int8", [2, 4, 6], 200)
    assert [(c.name, c.param) for c in demo.decode.criteria] == [("exact", None), ("topk", 2.0)]
    sr, _ = composed(["experiment=demo_sr"])
    assert (sr.task.kind, sr.model.name, sr.heads.arch, sr.heads_train.base_lr_scale) == ("image", "image_tiny",
                                                                                          "medusa", 0.3)
    paper, _ = composed(["experiment=table1", "task.data_dir=/data/wmt14"])
    assert (paper.task.source, paper.model.d_model, paper.train.lr, paper.heads.identity_p1) == (
        "wmt14", 512, 7.0e-4, False)
    both, _ = composed(["experiment=table1_small", "setting=both"])
    assert (both.base_targets, both.heads.training, both.heads.targets, both.heads.k) == (
        "distilled", "finetune", "distilled", 10)


def test_small_reproductions_start_from_the_shipped_base():
    """The demo's and table1_small's base model is `make pretrain`'s: the same cache name, so the shipped
    weights are installed instead of trained (a changed recipe must change pretrain_mt too)."""
    from types import SimpleNamespace

    from toy import staged

    from bpd.stages import base_path_for

    pre, _ = composed(["experiment=pretrain_mt"])
    demo, table1 = composed(["experiment=demo"])[0], composed(["experiment=table1_small", "setting=finetune"])[0]
    assert pre.task == demo.task == table1.task
    task = SimpleNamespace(key="ding")  # the same task config: the same data key (building it needs the corpus)
    names = {staged(base_path_for, c, task).name for c in (pre, demo, table1)}
    assert len(names) == 1
    assert staged(base_path_for, pre, task, seed=pre.teacher_seed).name != names.pop()  # the teacher is another model
    sr = [composed([f"experiment={e}"] + extra)[0] for e, extra in
          (("pretrain_sr", []), ("demo_sr", []), ("table2_small", ["setting=finetune"]))]
    assert len({staged(base_path_for, c, task).name for c in sr}) == 1 and all(c.train.max_minutes is None for c in sr)


@pytest.mark.parametrize("manifest, corpus, recipes", [
    # `make demo`: Table 1's Both setting on the Debian corpus
    ("debian_en_de_both", "debian", [["experiment=demo_debian"], ["experiment=demo_debian", "setting=both"],
                                     ["experiment=table1_debian", "setting=both"]]),
    # `make demo-sr`: Table 2's fine-tuning setting on the photo corpus
    ("photos_sr_finetune_sr", "photos", [["experiment=demo_photos_sr"],
                                         ["experiment=demo_photos_sr", "setting=finetune_sr"],
                                         ["experiment=table2_photos", "setting=finetune_sr"]]),
])
def test_the_demos_install_their_shipped_heads_model(manifest, corpus, recipes):
    """A demo's recipe is its table's setting exactly (as the table's experiment and setting compose it, and with
    the setting repeated on the command line): its heads model's cache name is the one the shipped manifest names,
    so the demo installs it instead of training for hours."""
    import importlib
    import json
    from types import SimpleNamespace

    from toy import staged

    from bpd.stages import heads_path_for
    from bpd.tasks.base import task_key

    shipped = json.loads((REPO / "checkpoints" / f"{manifest}.json").read_text())
    reference = importlib.import_module(f"corpora.{corpus}.build").REFERENCE_MANIFEST
    content = json.loads(reference.read_text())["corpus_hash"]  # what a build of the pinned packages hashes
    names = set()
    for r in recipes:
        cfg = composed(r)[0]
        names.add(staged(heads_path_for, cfg, SimpleNamespace(key=task_key(cfg.task, content))).name)
    assert names == {shipped["cache_name"]}


def test_settings_override_the_experiment():
    """setting=... comes after the experiment: the paper's fine-tuning recipe (p_1 weighted like any head,
    the base at the heads' rate) replaces the CPU recipe's gentle one, which stays as *_gentle."""
    for name, p1, scale in (("finetune", 1.0, 1.0), ("both", 1.0, 1.0), ("finetune_gentle", 7.0, 0.05),
                            ("both_gentle", 7.0, 0.05), ("regular", 7.0, 0.05)):
        cfg, _ = composed(["experiment=table1_small", f"setting={name}"])
        assert (cfg.setting, cfg.heads.p1_weight, cfg.heads_train_config.base_lr_scale) == (name, p1, scale)
    assert composed(["experiment=table1_small", "setting=both_gentle"])[0].base_targets == "distilled"
    # The anchored recipe is the paper's rate and loss plus p_1's KL from the base; every other setting leaves it off.
    for name, targets in (("finetune_anchored", "gold"), ("both_anchored", "distilled")):
        anchored = composed(["experiment=table1_debian", f"setting={name}"])[0]
        assert (anchored.heads.p1_weight, anchored.heads_train_config.base_lr_scale, anchored.heads.p1_distill,
                anchored.base_targets, anchored.heads.targets) == (1.0, 1.0, 10.0, targets, targets)
    assert composed(["experiment=table1_debian", "setting=finetune"])[0].heads.p1_distill == 0.0


def test_table2_photos_fine_tuning_is_the_command_of_its_rows():
    """``setting=finetune_sr`` (Table 2's fine tuning on the photo corpus) trains the very model of the rows made
    with ``setting=finetune heads_train.base_lr_scale=0.3``, and not the paper-rate model ``setting=finetune``
    trains: the setting's label is no part of a heads model's cache key, its options are."""
    from types import SimpleNamespace

    from toy import staged

    from bpd.stages import heads_path_for

    task = SimpleNamespace(key="photos")
    cfgs = {o: composed(["experiment=table2_photos", *o])[0]
            for o in (("setting=finetune_sr",), ("setting=finetune", "heads_train.base_lr_scale=0.3"),
                      ("setting=finetune",))}
    name = {o: staged(heads_path_for, cfg, task).name for o, cfg in cfgs.items()}
    assert len(set(name.values())) == 2
    assert name[("setting=finetune_sr",)] == name[("setting=finetune", "heads_train.base_lr_scale=0.3")]
    cfg = cfgs[("setting=finetune_sr",)]
    assert (cfg.setting, cfg.heads.training, cfg.heads.p1_weight, cfg.heads_train_config.base_lr_scale) == (
        "finetune_sr", "finetune", 1.0, 0.3)


def test_a_multirun_override_composes_per_job():
    # What `run.py -m heads.k=2,4 heads.arch=medusa,blockdiag` composes for one of its jobs.
    cfg, _ = composed(["experiment=demo", "heads.k=4", "heads.arch=medusa", "decode.ks=[2,4]", "model=small"])
    assert (cfg.heads.k, cfg.heads.arch, cfg.decode.ks, cfg.model.d_model) == (4, "medusa", [2, 4], 256)


def test_a_heads_k_sweep_drops_the_ks_its_job_cannot_decode(capsys):
    # One job of the README's `run.py -m setting=... heads.k=2,4,8`: the default decode.ks [2, 4, 8] above heads.k
    # are skipped with one line, so the multirun goes on; a job where no k fits is still refused.
    cfg, _ = composed(["setting=regular", "heads.k=2"])
    assert cfg.decode.ks == [2]
    assert "decode.ks [4, 8] are above heads.k=2 and are skipped" in capsys.readouterr().out
    assert composed(["heads.k=8"])[0].decode.ks == [2, 4, 8]
    with pytest.raises(ValueError, match="decode.ks"):
        composed(["heads.k=2", "decode.ks=[4]"])


def test_entry_point_options_stay_in_their_entry_point():
    run_cfg, entry = composed([])
    assert not hasattr(entry, "bench") and not hasattr(entry, "stage") and not hasattr(entry, "checkpoint")
    _, train = composed(["stage=heads"], "train_stage")
    _, evaluate = composed(["checkpoint=m.pt"], "run")
    _, distill = composed([], "distill")
    _, bench = composed(["bench.batch_sizes=[1]"], "bench")
    assert (train.stage, evaluate.checkpoint, distill.stage, bench.bench.batch_sizes) == ("heads", "m.pt", "data", [1])
    demo, _ = composed(["experiment=demo"])
    for entry_name in ENTRIES:  # every entry point hands the library the same experiment config
        assert composed(["experiment=demo"], entry_name)[0] == demo


def test_run_takes_a_shipped_checkpoint_name_as_translate_does():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_entry", REPO / "experiments" / "run.py")
    run_entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_entry)
    cfg, entry = composed(["experiment=demo_debian", "checkpoint=debian_en_de_both"], "run")
    assert run_entry.checkpoint_path(entry, cfg) == REPO / "checkpoints" / "debian_en_de_both.pt"
    cfg, entry = composed(["experiment=demo_debian", "checkpoint=debian_en_de_bth"], "run")
    with pytest.raises(FileNotFoundError, match="shipped model's name .*debian_en_de_both"):
        run_entry.checkpoint_path(entry, cfg)
    cfg, entry = composed(["experiment=demo_debian"], "run")
    assert run_entry.checkpoint_path(entry, cfg) is None  # the config's own model


@pytest.mark.parametrize("override", ["train.max_stpes=3", "heads.k=four", "decode.criteria=[{nam: exact}]"])
def test_hydra_refuses_misspelt_or_mistyped_options(override):
    with pytest.raises(Exception, match="max_stpes|four|nam"):
        composed([override])


@pytest.mark.parametrize("override, match", [("heads.k=0", "heads.k"), ("decode.ks=[12]", "decode.ks"),
                                             ("heads.arch=lstm", "heads.arch"), ("model.n_heads=3", "divisible"),
                                             ("decode.methods.tree=[wide]", "tree shape"),
                                             ("decode.methods.beam.size=-1", r"decode.methods.beam.size must be >= 0"),
                                             ("decode.methods.rescored=[{beam:2},{beam:0}]",
                                              r"decode.methods.rescored\[1\] needs beam >= 1"),
                                             ("task.corpora.debian.kinds=[poems]", "task.corpora.debian.kinds"),
                                             ("heads.d_ff=0", "heads.d_ff"),
                                             ("model.n_heads=0", "model.n_heads"), ("model.d_ff=-1", "model.d_ff"),
                                             ("model.dropout=1.0", "model.dropout"),
                                             ("model.n_dec_layers=-1", "model.n_dec_layers"),
                                             ("decode.max_len_a=-1", "max_len_a"), ("threads=0", "threads"),
                                             ("seed=-1", "seed"), ("heads_train.base_lr_scale=-1", "base_lr_scale"),
                                             ("train.label_smoothing=1.0", "label_smoothing"),
                                             ("train.ordinal_sigma=-1", "ordinal_sigma must be"),
                                             ("train.ordinal_sigma=2", "set it to 0 for translation"),
                                             ("heads_train.ordinal_sigma=2", "set it to 0 for translation"),
                                             ("decode.proposal_vocab=100000", "above task.vocab_size")])
def test_bad_values_are_refused_before_any_work(override, match):
    with pytest.raises(ValueError, match=match):
        composed(["experiment=demo", override])


def test_one_source_of_defaults():
    """The defaults every caller shares: the output-length rule and identity_p1 (see bpd/config/)."""
    from bpd.decoding.common import default_max_len
    from bpd.models import TransformerConfig

    d = DecodeConfig()
    assert (d.max_len_a, d.max_len_extra) == (1.5, 10)
    import torch

    assert default_max_len(torch.zeros(1, 20), None) == d.output_limit(20) == 40
    assert HeadsConfig().identity_p1 is TransformerConfig(vocab_size=8).identity_p1 is True
    # A config dict with nothing in it is the defaults; partial sections fill in the rest.
    assert experiment_config({}) == ExperimentConfig()
    assert experiment_config({"heads": {"k": 3}}).heads == HeadsConfig(k=3)
    with pytest.raises(ValueError, match=r"unknown option heads\.kk"):
        experiment_config({"heads": {"kk": 3}})


@pytest.mark.parametrize("override, match", [
    ("task.data_dir=/data", "task.data_dir names the folder a wmt14 or folder corpus is read from"),
    ("task.corpora.ding.path=/x.txt task=wmt14_en_de task.data_dir=/data", "task.corpora.ding shapes the ding"),
    ("task=debian_en_de task.corpora.ding.include_phrases=true", "drop it for task.source=debian"),
])
def test_task_options_that_would_be_ignored_are_refused(override, match):
    """A ding run with a data_dir is refused: ignoring it would miss the shipped base (other cache keys) and
    train a base for hours."""
    with pytest.raises(ValueError, match=match):
        composed(["experiment=demo", *override.split()])
    with pytest.raises(ValueError, match="the faces corpus is built here"):
        composed(["experiment=demo_sr", "task.data_dir=/data"])


@pytest.mark.parametrize("group", ["experiment", "setting", "draft"])
def test_a_misspelt_optional_group_is_refused_by_the_entry_point(group):
    """Hydra composes the defaults when an optional group names no file; the entry point says so instead
    of training the default config."""
    import subprocess

    args = {"experiment": ["experiment=deom"], "setting": ["experiment=demo", "setting=bothh"],
            "draft": ["experiment=demo", "draft=huge"]}[group]
    out = subprocess.run([sys.executable, str(REPO / "experiments" / "run.py"), *args, "logger=none"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 2, out.stderr[-500:]
    assert f"there is no {group} named" in out.stderr and "choose one of" in out.stderr
    assert "train" not in out.stdout  # refused before any stage started


def test_head_classes_implement_the_registered_architectures():
    """The config validates architectures from the registry without importing the models; the classes are
    paired with its entries, and take their chained slots (identity_p1 needed, weights may tie) from them."""
    from bpd.config import chained_archs
    from bpd.config.registry import names
    from bpd.models import HEADS

    assert tuple(HEADS) == names("head")
    assert chained_archs() == tuple(a for a, c in HEADS.items() if c.path_dependent)
    assert chained_archs() == tuple(a for a, c in HEADS.items() if c.can_tie) == ("recurrent", "attend")


def test_config_criteria_match_the_criterion_classes():
    """The criterion names are defined once, in the config; every one builds the criterion of that name."""
    from bpd.config import CRITERIA
    from bpd.decoding.criteria import make_criterion

    assert tuple(make_criterion(name).name for name in CRITERIA) == CRITERIA


@pytest.mark.parametrize("raised, code, line", [
    (KeyboardInterrupt(), 130, "interrupted: finished stages are cached; run the same command to resume."),
    ("training", 130, "interrupted: stopped base training at step 7 of 12; last checkpoint m.state.pt (step 4); "
                      "run the same command to resume."),
    (OSError(28, "No space left on device", "cache/m.pt"), 1, "error: No space left on device writing cache/m.pt; "
                                                               "free disk space there and run the same command again"),
    ("results", 1, "error: could not write the results to results/x (No space left on device); the decoded"),
])
def test_entry_points_end_ctrl_c_and_a_full_disk_with_one_line(raised, code, line, capsys):
    from hydra import compose, initialize_config_dir

    from bpd.runtime import ResultsNotSaved
    from bpd.training.loop import TrainingInterrupted

    if raised == "training":
        raised = TrainingInterrupted(line.removeprefix("interrupted: "))
    elif raised == "results":
        raised = ResultsNotSaved("could not write the results to results/x (No space left on device); the decoded "
                                 "outputs and their rows are in /tmp/bpd-results-1 instead; free space ...")

    def fails(cfg, entry):
        raise raised

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=demo"])
    with pytest.raises(SystemExit) as e:
        _common.run_experiment(fails, cfg)
    err = capsys.readouterr().err.strip()
    assert e.value.code == code and err.startswith(line) and "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("engines, refused", [(None, False), (["compiled"], False), (["eager", "compiled"], True)])
def test_int8_on_the_eager_path_is_refused_before_any_work_without_fbgemm(monkeypatch, capsys, engines, refused):
    """The eager chain's int8 needs fbgemm, the static path's does not: a run is refused up front only where one
    of the paths it decodes with is eager (the benchmark's are ``bench.engines``, not ``decode.engine``), and
    on a CPU (a GPU runs the chain in float32)."""
    import torch
    from hydra import compose, initialize_config_dir

    from bpd.models import fastpath

    monkeypatch.setattr(fastpath, "quantized_engines", lambda: ["qnnpack"])
    ran = []
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("bench", overrides=["experiment=demo_debian", "decode.proposal_precision=int8"])
    paths = None if engines is None else (lambda entry: engines)
    if not refused:
        _common.run_experiment(lambda c, entry: ran.append(c.decode.engine), cfg, engines=paths)
        assert ran == ["compiled"]
        return
    with pytest.raises(SystemExit) as e:
        _common.run_experiment(lambda c, entry: ran.append(c), cfg, engines=paths)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "decode.proposal_precision=float32" in err and not ran
    monkeypatch.setattr("bpd.runtime.pick_device", lambda name: torch.device("cuda"))
    _common.run_experiment(lambda c, entry: ran.append(c.decode.engine), cfg, engines=paths)  # a GPU: float32 chains
    assert ran == ["compiled"]


@pytest.mark.parametrize("split, task, fix", [
    ("ding:train", "debian_en_de", "ding:test or debian:test"),
    ("wmt14:test", "debian_en_de", "ding:test or debian:test"),
    ("ding:test", "ding_en_de", "this task's own are decode.split=test"),
    ("debian:dev", "faces_sr", "use test or dev for image tasks"),
])
def test_another_corpus_split_is_checked(split: str, task: str, fix: str) -> None:
    """``decode.split=<corpus>:<split>`` names another translation corpus's held-out set; anything else is
    refused before any data is read, with the fix."""
    with pytest.raises(ValueError, match=re.escape(fix)):
        composed([f"task={task}", f"decode.split={split}"])
    composed(["task=debian_en_de", "decode.split=ding:test"])  # the out-of-domain test of Table 1


def test_committed_run_ids_are_those_of_their_config():
    """The committed demo rows carry the id their config has now, so a re-run finds and
    skips them; an option set makes a new one, and one added at its default would leave it alone (``keyed``)."""
    import dataclasses
    import json

    from bpd.evaluate import run_id

    rows = [json.loads(x) for x in (REPO / "results" / "demo_debian" / "rows.jsonl").read_text().splitlines() if x]
    last = rows[-1]
    cfg, _ = composed(["experiment=demo_debian"])
    assert run_id(cfg.decode, cfg.task.name, cfg.device, Path(last["model"])) == last["run_id"]
    other = "float32" if cfg.decode.proposal_precision == "int8" else "int8"
    changed = dataclasses.replace(cfg, decode=dataclasses.replace(cfg.decode, proposal_precision=other))
    assert run_id(changed.decode, cfg.task.name, cfg.device, Path(last["model"])) != last["run_id"]


def test_a_partial_section_keeps_its_fields_defaults():
    """A dict that sets one option of a nested section leaves the others at the field's default, not at the
    section type's: the benchmark's methods keep beam search off when only its length penalty is given."""
    from bpd.config import BenchConfig
    from bpd.config.experiment import from_dict

    bench = from_dict(BenchConfig, {"methods": {"naive_greedy": False, "beam": {"alpha": 0.5}}})
    assert (bench.methods.beam.size, bench.methods.beam.alpha, bench.methods.naive_greedy) == (0, 0.5, False)
    assert from_dict(BenchConfig, {}).methods.naive_greedy is True


#: The functions of bpd/ that may take the whole ``ExperimentConfig``: the entry points' glue, which splits it into
#: where and how the process runs (``Runtime.build``) and what determines the stages' products (``Recipe.of``),
#: and ``experiment_config``, which builds one from a dict.
WHOLE_CONFIG_GLUE = {"bpd/runtime.py:Runtime.build", "bpd/stages.py:Recipe.of",
                     "bpd/config/experiment.py:experiment_config"}


def functions(body: list[ast.stmt], prefix: str = "") -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of a module's body, by qualified name (``Class.method``, ``outer.inner``)."""
    out = []
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            if not isinstance(node, ast.ClassDef):
                out.append((name, node))
            out += functions(node.body, name + ".")
    return out


def test_only_the_entry_points_glue_takes_the_whole_experiment_config():
    """A library function that takes the whole ``ExperimentConfig`` hides which of its options it reads (and a
    cache key built from it, which options name a product): the entry points split the config, and the library
    takes the runtime, the recipe or the sections it uses."""
    takers = set()
    for path in sorted((REPO / "bpd").rglob("*.py")):
        for name, fn in functions(ast.parse(path.read_text(encoding="utf-8")).body):
            a = fn.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
            if any(p.annotation is not None and "ExperimentConfig" in ast.unparse(p.annotation) for p in params):
                takers.add(f"{path.relative_to(REPO).as_posix()}:{name}")
    extra = sorted(takers - WHOLE_CONFIG_GLUE)
    assert not extra, (f"{', '.join(extra)} take(s) the whole ExperimentConfig: take the sections it reads, or the "
                       "stages' Recipe (bpd.stages.Recipe.of) with the Runtime, and let the entry point (experiments/) "
                       "pass them.")
    stale = sorted(WHOLE_CONFIG_GLUE - takers)
    assert not stale, f"{', '.join(stale)} no longer take(s) an ExperimentConfig: drop it from WHOLE_CONFIG_GLUE."


def test_defaults_are_pinned_to_the_schema():
    """Keys hash only what a config sets (``bpd.config.common.keyed``), so a changed default silently changes
    what every existing key names. This pins every config default; when it fails on purpose: if the changed
    field is keyed, bump ``SCHEMA`` and rename what it re-keys (bpd.config.common), then pin the new value here."""
    from bpd.config import ExperimentConfig
    from bpd.config.common import SCHEMA, config_hash, plain
    from bpd.config.registry import entries

    defaults = {"experiment": plain(ExperimentConfig())}
    for kind in ("task", "corpus", "method"):
        for name, e in sorted(entries(kind).items()):
            if e.options is not None:
                made = e.info.default() if kind == "method" else e.options()
                defaults[f"{kind}:{name}"] = plain(made)
    assert (SCHEMA, config_hash(defaults)) == (2, PINNED_DEFAULTS), \
        "a config default changed: see this test's docstring (bump SCHEMA if the field is keyed)"


PINNED_DEFAULTS = "092b2e4ba2"  # decode.first added (a default of 0 keeps every key)


def test_the_entry_points_import_without_side_effects(monkeypatch):
    """Importing experiments/*.py (the glue, the schemas, every entry point) changes neither ``sys.path`` nor the
    environment and ends nothing, whatever the command line holds (plugins, a misspelt option): an entry point's
    ``main`` does that (``_common.start``), not a test or a launcher that imports it."""
    import importlib

    monkeypatch.setattr(sys, "argv", ["run.py", "plugins=[tests/toys]", "decode.beam_size=0", "task.x=[y]"])
    modules = sorted(p.stem for p in (REPO / "experiments").glob("*.py"))
    saved = {name: sys.modules.pop(name) for name in modules if name in sys.modules}
    path, environ = list(sys.path), dict(os.environ)
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except SystemExit as e:
                pytest.fail(f"importing experiments/{name}.py exits ({e.code})")
            assert (sys.path, dict(os.environ)) == (path, environ), f"importing experiments/{name}.py changes them"
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
