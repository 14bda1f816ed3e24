"""The entry points' typed configs (Hydra schemas): ``ExperimentConfig`` as Hydra composes it and each entry
point's own options (``stage`` of train.py, ``checkpoint`` of run.py, ``bench`` of bench.py), which live in
its own schema and primary config (``conf/<entry>.yaml``), never in the experiment config the library sees.

Importing this module imports ``bpd.config`` (and so the plugins ``BPD_PLUGINS`` names): the entry points import it
only once ``_common.start`` has loaded them, so that a plugin that cannot load ends with one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bpd.config import BenchConfig, ExperimentConfig


@dataclass
class ExperimentSchema(ExperimentConfig):
    """``ExperimentConfig`` as Hydra composes it: the task group's file picks the task's schema."""

    task: Any = None
    # Plugins (bpd.config.registry): read from the command line or conf/base.yaml before composing
    # (``configured_plugins``); ``to_configs`` refuses any named only later (an experiment or setting file).
    plugins: list[str] = field(default_factory=list)


@dataclass
class TrainEntry(ExperimentSchema):
    stage: str = "all"  # base | heads | all (heads and everything they need)


@dataclass
class RunEntry(ExperimentSchema):
    checkpoint: str | None = None  # evaluate this checkpoint instead of training the one the config names


@dataclass
class DistillEntry(ExperimentSchema):
    stage: str = "data"  # data (the distilled training set) | all (then base and heads on it)


@dataclass
class PretrainEntry(ExperimentSchema):
    models: list[str] = field(default_factory=lambda: ["base"])  # base | teacher | distilled (translation)
    export: bool = True  # write the finished models to paths.shipped_dir with their manifests


@dataclass
class BenchEntry(ExperimentSchema):
    bench: BenchConfig = field(default_factory=BenchConfig)


@dataclass
class ExportEntry(ExperimentSchema):
    models: list[str] = field(default_factory=lambda: ["base"])  # base (the shipped one) | heads | draft
    export_dir: str = "outputs/export"  # <export_dir>/<checkpoint stem>/{hf,ct2-float32,ct2-int8}
    check: bool = True  # logits and greedy outputs against ours on the test split (results/export/rows.jsonl)
    check_examples: int | None = None  # the first this many test sentences (null: all)
    results_dir: str = "results/export"  # where the check rows go (make export: outputs/results/export unless RECORD=1)


@dataclass
class PeersEntry(ExperimentSchema):
    bench: BenchConfig = field(default_factory=BenchConfig)
    export_dir: str = "outputs/export"
    prompt_lookup: int = 10  # prompt-lookup decoding's n-gram guess length (HF's prompt_lookup_num_tokens)
