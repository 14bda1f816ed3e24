"""The registry: every decoding method declared once, torch-free, in bpd/config/methods/ and implemented once in
bpd/decoding/methods/ (paired by name), each filling the same row columns and reading its own options; the exact ==
greedy property of tests/test_decoding.py runs every exact method it holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bpd.config import BeamOptions, BenchConfig, CriterionConfig, DecodeConfig, MethodsConfig, RescoreOptions
from bpd.config.methods import DECODE_METHODS, Role, methods_of, role_of
from bpd.config.registry import entries, lookup, register
from bpd.decoding.method import Plan, RoundOptions
from bpd.decoding.methods.greedy import Greedy
from bpd.decoding.registry import METHODS, discover, paired
from bpd.decoding.spec import COLUMNS, RECORD, DecodeSpec, bench_specs, decode_specs, specs_for

#: A plan and options that ask every method for something.
EVERYTHING = (Plan((1, 2, 4), (CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)),
                   models=frozenset({"draft"})),
              MethodsConfig(naive_greedy=True, beam=BeamOptions(3), tree=["3x2", "beam2"],
                            rescored=[RescoreOptions(2, 0.5)]))


def test_registry_implements_the_declarations_in_their_order():
    assert tuple(METHODS) == tuple(DECODE_METHODS) == tuple(entries("method")[n].name for n in DECODE_METHODS)
    assert all(m.name == name for name, m in METHODS.items())
    assert [(m.name, m.role, m.label, m.order) for m in METHODS.values()] == [
        (name, info.role, info.label, info.order) for name, info in DECODE_METHODS.items()]
    orders = [m.order for m in METHODS.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    roles = [m.role for m in METHODS.values()]
    assert roles == sorted(roles), "tables list methods by role: keep the catalog in role order"
    assert methods_of(Role.REFERENCE) == ["greedy"]  # one reference: every ratio's denominator
    assert role_of("reference") is None and role_of(None) is None  # rows no decoding method made


def test_every_method_with_options_has_them_in_decode_and_bench_configs():
    """``decode.methods`` and ``bench.methods`` are made from the registry: one field per method that takes
    options, of the method's own type."""
    with_options = [n for n in DECODE_METHODS if entries("method")[n].options is not None]
    assert [f for f in MethodsConfig.__dataclass_fields__] == with_options
    assert isinstance(DecodeConfig().methods, MethodsConfig) and isinstance(BenchConfig().methods, MethodsConfig)
    assert BenchConfig().methods.naive_greedy and BenchConfig().methods.beam.size == 0


def test_every_method_fills_the_same_row_columns():
    specs = specs_for(*EVERYTHING)
    assert {s.method for s in specs} == set(METHODS), "every method's sweep must answer options asking for it"
    assert len({s.name for s in specs}) == len(specs), "decoder names must be unique"
    common = set(RoundOptions().columns())
    for s in specs:
        assert list(s.columns()) == ["decoder", "method", *COLUMNS], s.name
        assert list(s.record()) == ["method", *RECORD], s.name
        own = set(s.entry.columns(s.options)) - common
        assert own == set(s.entry.own_columns), s.name
        assert s.rounds == (s.columns()["criterion"] is not None) and s.columns()["k"] == s.k


def test_a_methods_options_are_declared_once_and_read_as_they_are():
    """A method's options are one type, declared beside its registration (``bpd/config/methods/``): a config holds
    it, and each decoder's options hold one value of it, under the method's name, as the config gave it (the same
    object); no implementation declares options, or what the method is (exact, engines, quadratic), of its own."""
    import dataclasses
    import importlib
    import pkgutil

    from bpd.decoding import methods as package
    from bpd.decoding.method import Options, own_fields

    shared = {f.name for f in own_fields(RoundOptions)}
    for name, m in METHODS.items():
        own = [f.name for f in own_fields(m.options) if f.name not in shared]
        assert own == ([name] if m.info.one is not None else []), name
        assert not {"options", "exact", "engines", "quadratic"} & set(vars(type(m))), name
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        assert not [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Options)
                    and c.__module__ == module.__name__ and dataclasses.is_dataclass(c)], info.name
    plan, asked = EVERYTHING
    by_method = {s.method: s.options.own for s in specs_for(plan, asked)}
    assert by_method["beam"] is asked.beam and by_method["rescored"] is asked.rescored[0]
    assert DecodeSpec("beam", beam={"size": 2}).options.beam == BeamOptions(2)


def test_evaluation_and_bench_sweeps():
    """The evaluation decodes every minimum block size and k = 1 only as plain exact; the bench times l = 1 at
    every k and no beam; both start with greedy."""
    crits = [CriterionConfig("exact", None, [1, 2]), CriterionConfig("topk", 2.0)]
    ev = decode_specs(DecodeConfig(ks=[1, 2], methods=MethodsConfig(beam=BeamOptions(2)), criteria=crits), 4)
    assert [s.name for s in ev] == ["greedy", "beam2_a0.6", "blockwise_k1_exact", "blockwise_k2_exact",
                                    "blockwise_k2_exact_l2", "blockwise_k2_topk2"]
    bench = bench_specs(BenchConfig(criteria=crits), [1, 2])
    assert [s.name for s in bench] == ["greedy", "naive_greedy", "blockwise_k1_exact", "blockwise_k2_exact",
                                       "blockwise_k1_topk2", "blockwise_k2_topk2"]
    assert bench_specs(BenchConfig(criteria=crits[:1]), [2], models={"draft"})[-1].name == "draft_k2_exact"


def test_bad_specs_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="unknown decoding method 'nope'"):
        DecodeSpec("nope")
    with pytest.raises(ValueError, match="'greedy' takes the options none"):
        DecodeSpec("greedy", k=2)
    with pytest.raises(ValueError, match="4 deep"):
        DecodeSpec("tree", k=4, tree="2x2x2x2")
    with pytest.raises(ValueError, match="unknown acceptance criterion"):
        DecodeSpec("draft", k=2, criterion="vibes")
    with pytest.raises(ValueError, match=r"rescored needs beam >= 1 and weight >= 0 \(got beam=0"):
        DecodeSpec("rescored", k=2, rescored={"beam": 0})
    with pytest.raises(ValueError, match="a beam search decoder needs beam.size >= 1"):
        DecodeSpec("beam", beam=BeamOptions(0))
    with pytest.raises(ValueError, match="either a BeamDecoding or its option values"):
        DecodeSpec("beam", RoundOptions())


def test_the_registry_is_read_without_torch():
    """The report and configs see every method, head architecture, task kind and corpus, with their options'
    types, without importing torch (bpd.config is the lowest layer)."""
    code = ("import sys; from bpd.config.registry import entries, KINDS; import bpd.config.methods; "
            "assert 'torch' not in sys.modules and 'bpd.decoding' not in sys.modules; "
            "print({k: list(entries(k)) for k in KINDS})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'greedy'" in out and "'draft'" in out


#: Six option variants' run ids under this schema (model m.pt; then with draft d.pt).
RUN_IDS = [
    ({}, ("4e8f12d07e", "8794dae79c")),
    ({"beam": {"size": 0}}, ("aefa596669", "1fe21829e5")),
    ({"beam": {"size": 2, "alpha": 1.0}}, ("60975694d1", "e89dbd6266")),
    ({"naive_greedy": True}, ("88b92bff11", "385ce81cb6")),
    ({"tree": ["3x2", "beam4"]}, ("2ac397e2fa", "ef7c8706fd")),
    ({"rescored": [{"beam": 4, "weight": 0.5}, {"beam": 2}]}, ("57b66deb8c", "6b0f11f643")),
]


@pytest.mark.parametrize("variant, ids", RUN_IDS)
def test_run_ids_are_pinned(variant, ids):
    """Run ids change only with the schema (``bpd.config.common.SCHEMA``): committed rows and cached products are
    found by them."""
    from bpd.config import experiment_config
    from bpd.evaluate import run_id

    cfg = experiment_config({"decode": {"methods": variant}})
    about = (cfg.decode, cfg.task.name, cfg.device)
    assert (run_id(*about, Path("m.pt")), run_id(*about, Path("m.pt"), Path("d.pt"))) == ids


def test_a_name_is_registered_once_and_looked_up_with_the_choices():
    with pytest.raises(ValueError, match="the method 'greedy' is registered twice"):
        register("method", "greedy")
    with pytest.raises(ValueError, match="unknown registry kind"):
        register("sampler", "nucleus")
    with pytest.raises(ValueError, match="unknown heads.arch 'wide'; choose one of paper, "):
        lookup("head", "wide", "heads.arch")


def test_every_declared_method_has_one_implementation():
    """A declaration without a decoder, a decoder without a declaration, or two decoders of one name are refused
    when the registry loads."""
    found = discover()
    assert [type(m) for m in paired(found).values()] == [type(m) for m in METHODS.values()]

    class Mine(Greedy):
        name = "mine"

    with pytest.raises(RuntimeError, match=r"implemented without a declaration \['mine'\]"):
        paired([*found, Mine()])
    with pytest.raises(RuntimeError, match=r"declared without an implementation \['greedy'\]"):
        paired([m for m in found if m.name != "greedy"])
    with pytest.raises(RuntimeError, match=r"implemented twice \['greedy'\]"):
        paired([*found, Greedy()])


def test_task_kinds_and_corpora_come_from_the_registry():
    """Each registered task kind has its config and its Task class; each corpus its ``Corpus`` subclass in its
    task kind's module, paired with its registration (no ``source ==`` branches)."""
    from bpd.config import ImageTaskConfig, TranslationTaskConfig, corpora, task_config
    from bpd.tasks import TASKS, image, translation

    assert (task_config("translation"), task_config("image")) == (TranslationTaskConfig, ImageTaskConfig)
    assert tuple(TASKS) == tuple(entries("task"))
    assert tuple(translation.CORPORA) == corpora("translation") and tuple(image.CORPORA) == corpora("image")
    with pytest.raises(ValueError, match="unknown task.kind 'audio'; choose one of translation, image"):
        task_config("audio")
    with pytest.raises(ValueError, match="unknown task.source 'europarl' for translation; use ding, debian, wmt14"):
        TranslationTaskConfig(source="europarl").validate()


#: The modules of bpd/config/ whose types every method, head and corpus shares: all but the declarations (the
#: methods' package, corpora.py and heads.py, where entries name themselves) and the registry.
SHARED = sorted(p for p in (Path(__file__).resolve().parents[1] / "bpd" / "config").glob("*.py")
                if p.name not in ("__init__.py", "corpora.py", "heads.py", "registry.py"))
#: Shared config fields named after a method, each with why it is not that method's option.
NAMED_FIELDS = {
    ("ExperimentConfig", "draft"): "the draft model's sizes and budget, trained by its own stage, which hashes them",
    ("DistillConfig", "beam"): "the distillation teacher's beam width (bpd/targets.py), not beam search's options",
}


def test_shared_configs_name_no_method_head_or_corpus():
    """A method's, head's or corpus's options are its own (``decode.methods.<name>``, ``task.corpora.<name>``):
    no shared config type has a field named after one (``<name>`` or ``<name>_...``) beyond ``NAMED_FIELDS``, and
    no shared config module compares a value with one's name (its entry says what the comparison would: the photo
    corpus ``holds`` the face test set, so ``decode.split=faces:test`` asks which corpus holds it)."""
    import ast
    import dataclasses
    import importlib

    own = {n for kind in ("method", "head", "corpus") for n in entries(kind)}
    named, compared = set(), []
    for path in SHARED:
        module = importlib.import_module(f"bpd.config.{path.stem}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
            # A dataclass that declares no field of its own has its fields made from the registry, one per entry
            # (``TranslationCorpora``): named after each by design.
            if dataclasses.is_dataclass(cls) and any(isinstance(n, ast.AnnAssign) for n in node.body):
                named |= {(node.name, f.name) for f in dataclasses.fields(cls)
                          if any(f.name == n or f.name.startswith(n + "_") for n in own)}
            if isinstance(node, ast.Compare):
                compared += [f"{path.name}:{node.lineno} {c.value!r}" for side in (node.left, *node.comparators)
                             for c in ast.walk(side) if isinstance(c, ast.Constant) and c.value in own]
    assert not compared, f"shared configs compare with a method's, head's or corpus's name: {compared}"
    assert named == set(NAMED_FIELDS), f"shared config fields named after one: {sorted(named - set(NAMED_FIELDS))}"
