"""Typed configuration: the one place every default lives.

``experiments/`` composes these dataclasses with Hydra (they are registered as structured configs there,
so ``conf/*.yaml`` only hold what differs from the defaults below) and hands the library plain dataclass
instances; ``bpd/`` never sees Hydra. Library users build them directly::

    cfg = ExperimentConfig(task=TranslationTaskConfig(name="folder", data_dir="corpus/"), heads=HeadsConfig(k=4))
    cfg.validate()

``experiment_config(d)`` builds one from a plain nested dict (a resolved Hydra config, a JSON file, a test),
filling every missing key with its default here and refusing unknown keys with the fix.

Defaults that every caller shares, and why each value:

- output length ``a * source length + b``: a = 1.5, b = 10 (what every shipped config uses); every decoder, stage
  and task takes it from ``output_limit``, so the heads stage's dev outputs and direct API calls get the same limit.
- ``identity_p1 = True`` (p_1 is exactly the base model, so a frozen base keeps its BLEU bit for bit; every
  shipped config but the paper-scale ones uses it). The paper's variant is ``identity_p1=false``.

Modules: ``registry`` (methods, heads, tasks and corpora by name, with their own options, and the plugins
``BPD_PLUGINS`` names), ``common`` (allowed values; ``SCHEMA`` and ``keyed``: what cache keys and run ids hash),
``methods`` (each decoding method's declaration and options), ``corpora`` (each corpus's declaration and options),
``task``, ``model`` (model, heads, training), ``decode`` and ``experiment`` (the whole experiment, the benchmark,
``from_dict``); every name is importable from here.
"""

from bpd.config.common import (
    CRITERIA,
    DTYPES,
    SCHEMA,
    SPLITS,
    TARGETS,
    cache_key,
    check,
    keyed,
    split_parts,
)
from bpd.config.decode import CriterionConfig, DecodeConfig, output_limit
from bpd.config.experiment import (
    BenchConfig,
    DistConfig,
    DistillConfig,
    DraftConfig,
    ExperimentConfig,
    LoggerConfig,
    PathsConfig,
    experiment_config,
    from_dict,
)
from bpd.config.heads import chained_archs
from bpd.config.methods import MethodsConfig
from bpd.config.methods.beam import BeamOptions
from bpd.config.methods.rescored import RescoreOptions
from bpd.config.methods.tree import check_tree_shapes, parse_tree_shape
from bpd.config.model import HeadsConfig, HeadsTrainConfig, ModelConfig, TrainConfig, heads_train_config
from bpd.config.registry import load_plugins
from bpd.config.task import ImageTaskConfig, TaskConfig, TranslationTaskConfig, corpora, task_config

__all__ = [
    "BeamOptions",
    "BenchConfig",
    "CRITERIA",
    "CriterionConfig",
    "DTYPES",
    "DecodeConfig",
    "DistConfig",
    "DistillConfig",
    "DraftConfig",
    "ExperimentConfig",
    "HeadsConfig",
    "HeadsTrainConfig",
    "ImageTaskConfig",
    "LoggerConfig",
    "MethodsConfig",
    "ModelConfig",
    "PathsConfig",
    "RescoreOptions",
    "SPLITS",
    "split_parts",
    "task_config",
    "TARGETS",
    "TaskConfig",
    "TrainConfig",
    "TranslationTaskConfig",
    "check",
    "corpora",
    "chained_archs",
    "check_tree_shapes",
    "experiment_config",
    "from_dict",
    "heads_train_config",
    "SCHEMA",
    "cache_key",
    "keyed",
    "load_plugins",
    "output_limit",
    "parse_tree_shape",
]
