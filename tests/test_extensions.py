"""Extending the harness without editing it: the three toys of tests/toys/, outside the library, loaded as a plugin
(``bpd.config.load_plugins(["tests/toys"])``, as ``BPD_PLUGINS=tests/toys`` or ``plugins=[tests/toys]`` load it): a
decoding method with options of its own and an auxiliary model its ``prepare`` builds (``toy_bigram``), a
proposal-head architecture (``toy_shared``) and a corpus with its task file (``toy_reverse``). Each is its entry
among the plugin's declarations and one module; the library names none.

The tests that use the toys load them in this process (the ``toys`` fixture) and leave the registry, and what was
made from it, as it was: the other tests see the library without them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import random_model, random_src

from bpd.config import registry
from bpd.config.registry import PLUGINS, entries, names, register

REPO = Path(__file__).resolve().parents[1]
TOYS = REPO / "tests" / "toys"
#: Each toy: its registry kind and name, and the module implementing it.
TOY_ENTRIES = [("method", "toy_bigram", "toys.bigram"), ("head", "toy_shared", "toys.heads"),
               ("corpus", "toy_reverse", "toys.corpus")]

sys.path.insert(0, str(REPO / "experiments"))
import _common  # noqa: E402


@pytest.fixture
def toys():
    """The toys loaded in this process, the entry points' schemas made with them; afterwards the registry, what
    was made from it and the schemas as they were."""
    with registry.extended([str(TOYS)]):
        _common.register()
        yield
    _common.register()


def with_plugin(args: list[str], plugin: Path = TOYS, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, PLUGINS: str(plugin)}
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, **kw)


def test_the_library_names_no_toy():
    """The toys exist only in tests/toys/: no registry entry without the plugin, no file of the library names one."""
    for kind, name, _ in TOY_ENTRIES:
        assert name not in names(kind)
    files = [p for d in ("bpd", "conf", "experiments", "corpora", "analysis") for p in (REPO / d).rglob("*")
             if p.suffix in (".py", ".yaml")]
    assert not [p for p in files if any(name in p.read_text(encoding="utf-8") for _, name, _ in TOY_ENTRIES)]


def test_a_plugin_loads_in_process_once_and_leaves_nothing_behind():
    """``load_plugins`` in a process whose configs and implementations were made already: they are made again
    with the plugin's entries (the same classes, so configs made before keep their type), loading it twice adds
    nothing, and ``extended`` leaves the registry, the configs, the implementations and the modules as before."""
    from bpd.config import DecodeConfig, MethodsConfig, TranslationTaskConfig
    from bpd.config.translate import TranslateConfig
    from bpd.decoding.registry import METHODS
    from bpd.decoding.spec import RECORD
    from bpd.models import HEADS
    from bpd.tasks.translation import CORPORA

    before = {kind: entries(kind) for kind in registry.KINDS}
    methods_type, record = MethodsConfig, dict(RECORD)
    with registry.extended([str(TOYS)]):
        registry.load_plugins([str(TOYS)])  # loaded already: skipped, its entries not registered twice
        assert registry.loaded() == (str(TOYS),) and "toys" in sys.modules
        assert DecodeConfig().methods.toy_bigram.min_count == 1 and type(DecodeConfig().methods) is methods_type
        assert TranslationTaskConfig().corpora.toy_reverse.n_train == 300
        assert TranslateConfig().methods.toy_bigram.min_count == 1
        assert "toy_bigram" in METHODS and "toy_shared" in HEADS and "toy_reverse" in CORPORA
        assert RECORD["toy_bigram"] == {"on": False, "min_count": 1}
    assert {kind: entries(kind) for kind in registry.KINDS} == before and registry.loaded() == ()
    assert not hasattr(DecodeConfig().methods, "toy_bigram") and "toy_bigram" not in METHODS
    assert "toy_shared" not in HEADS and "toy_reverse" not in CORPORA and RECORD == record
    assert not [m for m in sys.modules if m == "toys" or m.startswith("toys.")]


def test_a_plugins_declarations_are_read_without_torch(tmp_path):
    """Configs see a plugin's options (``decode.methods.toy_bigram``, ``task.corpora.toy_reverse``) and the report
    its entries, torch-free as the library's; a plugin that imports torch where it declares is refused."""
    code = ("import sys; from bpd.config import DecodeConfig, TranslationTaskConfig; "
            "from bpd.config.registry import names; assert 'torch' not in sys.modules; "
            "print(DecodeConfig().methods.toy_bigram, TranslationTaskConfig().corpora.toy_reverse, names('head'))")
    out = with_plugin(["-c", code], check=True).stdout
    assert "BigramOptions(on=False, min_count=1) ReverseOptions(n_train=300, seed=0)" in out and "'toy_shared'" in out
    heavy = tmp_path / "heavy.py"
    heavy.write_text("import torch  # noqa: F401\n")
    out = with_plugin(["-c", "import bpd.config"], plugin=heavy)
    assert out.returncode != 0 and "the plugin heavy imports torch where it declares" in out.stderr


def test_plugins_are_named_in_config_too(tmp_path, monkeypatch):
    """An entry point also loads the plugins its config names (``plugins=[...]`` on the command line, else
    ``plugins:`` in conf/base.yaml) in its ``start``, before Hydra composes with the schema they extend, and passes
    them to the jobs it starts (``BPD_PLUGINS``); one named only where the config is composed (an experiment file)
    is refused with where to name it."""
    from hydra import compose, initialize_config_dir

    base = tmp_path / "base.yaml"
    base.write_text("plugins: [my_ext]\n")
    assert _common.configured_plugins(["run.py", "plugins=[tests/toys,b]"], base) == ["tests/toys", "b"]
    assert _common.configured_plugins(["run.py", "+plugins=tests/toys"], base) == ["tests/toys"]
    assert _common.configured_plugins(["run.py", "decode.ks=[2]"], base) == ["my_ext"]
    assert _common.configured_plugins(["run.py"]) == []  # conf/base.yaml names none
    monkeypatch.delenv(PLUGINS, raising=False)  # start sets both for the jobs it starts: restored after the test
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.chdir(REPO)
    with registry.extended([]):
        _common.start(["run.py", "plugins=[tests/toys]"])
        assert registry.loaded() == ("tests/toys",) and os.environ[PLUGINS] == "tests/toys"
        with initialize_config_dir(config_dir=_common.CONF_DIR, version_base="1.3"):
            ok = compose("run", overrides=["plugins=[tests/toys]", "decode.methods.toy_bigram.on=true"])
            late = compose("run", overrides=["plugins=[tests/toys,other]"])
        assert _common.to_configs(ok)[0].decode.methods.toy_bigram.on is True
        with pytest.raises(ValueError, match=r"the plugins \['other'\] are named too late"):
            _common.to_configs(late)
    _common.register()


def test_an_entry_registered_late_is_refused():
    """What was made from the registry (``MethodsConfig``, the task configs' corpora, the implementations) would
    lack an entry registered after it outside a plugin's loading: refused, with where to register it."""
    for kind in ("method", "corpus"):
        with pytest.raises(RuntimeError, match=f"the {kind} 'late' is registered after configs or implementations"):
            register(kind, "late")
    assert "late" not in entries("method")


def test_each_toy_is_its_entry_and_one_module(toys):
    from bpd.config import DecodeConfig, TranslationTaskConfig
    from bpd.decoding.registry import METHODS
    from bpd.models import HEADS
    from bpd.tasks.translation import CORPORA

    implemented = {"method": type(METHODS["toy_bigram"]), "head": HEADS["toy_shared"],
                   "corpus": type(CORPORA["toy_reverse"])}
    for kind, name, module in TOY_ENTRIES:
        assert entries(kind)[name].module == implemented[kind].__module__ == module
    assert list(METHODS)[-1] == "toy_bigram"  # its order (70): listed last
    assert DecodeConfig().methods.toy_bigram.on is False and TranslationTaskConfig().corpora.toy_reverse.n_train == 300


class ToyTask:
    """What a method's ``prepare`` reads of a task: its training pairs' targets."""

    criterion_kwargs: dict = {}

    def __init__(self, targets: list[list[int]]) -> None:
        self.targets = targets

    def pairs(self, split: str) -> ToyTask:
        return self

    def __len__(self) -> int:
        return len(self.targets)

    def tgt(self, i: int) -> torch.Tensor:
        return torch.tensor(self.targets[i])


def test_the_toy_method_decodes_as_greedy_from_its_options(toys, monkeypatch):
    """``decode.methods.toy_bigram`` asks for its decoders (its check refuses a bad value); its ``prepare`` builds
    its bigram table from the task's training targets, which ``decode`` needs; with exact acceptance its tokens are
    greedy's. The exact == greedy property of tests/test_decoding.py draws it, and the toy head, once its test
    entries are given."""
    import test_decoding
    from toys.bigram import Bigram

    from bpd.config import experiment_config
    from bpd.decoding import greedy_decode
    from bpd.decoding.method import Resources
    from bpd.decoding.spec import decode_specs, prepare
    from bpd.models import HEADS

    cfg = experiment_config({"decode": {"ks": [2, 4], "criteria": [{"name": "exact"}, {"name": "topk", "param": 2}],
                                        "methods": {"beam": {"size": 0}, "toy_bigram": {"on": True}}}})
    specs = [s for s in decode_specs(cfg.decode, 4) if s.method == "toy_bigram"]
    assert [s.name for s in specs] == ["toy_bigram_m1_k2_exact", "toy_bigram_m1_k4_exact", "toy_bigram_m1_k2_topk2",
                                       "toy_bigram_m1_k4_topk2"]
    assert specs[0].columns()["bigram_min_count"] == 1
    model = random_model(24, 4, seed=3, head_noise=0.05)
    src, max_len = random_src(3, 6, 24, seed=3), 14
    greedy = greedy_decode(model, src, max_len=max_len).tokens
    run = prepare(specs, ToyTask(greedy), model, Resources())
    for spec in specs:
        res = spec.entry.decode(model, src, max_len, spec.options, run)
        test_decoding.check_contract(res, 3, max_len, model.eos_id)
        if spec.criterion == "exact":
            assert res.tokens == greedy and max(max(b) for b in res.block_sizes) > 1, spec.name
    with pytest.raises(ValueError, match="needs the bigram table"):
        specs[0].entry.decode(model, src, max_len, specs[0].options)
    assert Bigram.fit([[5, 6, 5, 6, 5, 7]], 10, 1).table(2)[[1, 5, 6]].tolist() == [1, 6, 5]  # BOS -> 5 once
    with pytest.raises(ValueError, match="decode.methods.toy_bigram.min_count must be >= 1"):
        experiment_config({"decode": {"methods": {"toy_bigram": {"min_count": 0}}}}).validate()

    monkeypatch.setitem(test_decoding.EXACT_OPTIONS, "toy_bigram", lambda c: {"k": c.k} if c.k > 1 else None)
    monkeypatch.setitem(test_decoding.AUXILIARY, "toy_bigram",
                        lambda model, greedy, seed: Bigram.fit(greedy, model.cfg.vocab_size, model.bos_id))
    assert "toy_shared" in HEADS  # the property draws every registered architecture
    for seed, engine in enumerate(("eager", "static")):
        test_decoding.check_exact_decoders(seed, 16, 3, 2, 4, 10, "toy_shared", 0.05, seed == 0, "2x1", False,
                                           engine=engine)


def test_the_toy_head_trains_and_decodes(toys, tmp_path):
    """``heads.arch=toy_shared`` trains as any architecture (a frozen base stays bit-identical), its checkpoint loads
    back into it, and exact blockwise decoding with it gives greedy's tokens."""
    from test_training import fresh_model, toy_batches

    from bpd.config import HeadsConfig, TrainConfig
    from bpd.decoding import blockwise_decode, greedy_decode
    from bpd.training.checkpoint import load_model
    from bpd.training.loop import TrainOutput, train

    model = fresh_model(k=3, heads_arch="toy_shared", identity_p1=True)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not n.startswith("heads.")}
    train(model, toy_batches(), TrainConfig(lr=3e-3, warmup_steps=2, max_steps=8, ckpt_every=100),
          TrainOutput(tmp_path / "h.pt", progress=False), heads=HeadsConfig(k=3, arch="toy_shared", training="frozen"))
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)
    assert model.heads.offset.abs().sum() > 0  # trained: it starts at zero
    loaded, _ = load_model(tmp_path / "h.pt")
    assert loaded.heads.arch == "toy_shared"
    src = random_src(2, 5, 20, seed=1)
    assert blockwise_decode(loaded, src, k=3, max_len=12).tokens == greedy_decode(loaded, src, max_len=12).tokens


def test_the_toy_corpus_is_a_task_from_its_yaml_and_an_evaluation_runs_the_three(toys, tmp_path):
    """``task=toy_reverse`` (its YAML beside the plugin, on Hydra's search path) composes into a task config with the
    corpus's own options; the task builds its corpus, and an evaluation on it, with the toy head, decodes the toy
    method's rows, identical to greedy."""
    from hydra import compose, initialize_config_dir
    from toy import evaluate_toy, staged, toy_config, toy_task

    from bpd import stages

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        composed = compose("config", overrides=[f"hydra.searchpath=[file://{TOYS / 'conf'}]", "task=toy_reverse",
                                                "task.corpora.toy_reverse.n_train=200"])
    task_cfg = _common.to_configs(composed)[0].task
    assert (task_cfg.source, task_cfg.vocab_size, task_cfg.corpora.toy_reverse.n_train) == ("toy_reverse", 60, 200)
    cfg = toy_config(tmp_path, task=dataclasses.asdict(task_cfg), heads={"arch": "toy_shared"},
                     train={"max_steps": 10}, heads_train={"max_steps": 6},
                     decode={"ks": [3], "criteria": [{"name": "exact"}], "n_examples": 8, "timing_repeats": 1,
                             "methods": {"beam": {"size": 0}, "toy_bigram": {"on": True}}})
    task = toy_task(cfg)
    assert task.folder.name.startswith("toy_reverse_") and len(task.pairs("train")) == 200
    rows = evaluate_toy(cfg, task, staged(stages.ensure_heads, cfg, task))
    toy = [r for r in rows if r["method"] == "toy_bigram"]
    assert [r["decoder"] for r in toy] == ["toy_bigram_m1_k3_exact"]
    assert all(r["identical_to_greedy"] == 1.0 and r["heads_arch"] == "toy_shared" for r in toy)
