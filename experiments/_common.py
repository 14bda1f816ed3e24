"""Glue shared by the Hydra entry points: plugins and typed configs set up before Hydra composes (``start``),
composed configs turned into the library's dataclasses, and user errors ended with one sentence.

The dataclasses of ``bpd/config/`` (and the entry points' own, ``_schemas.py``) are the schema of every composed
config, so ``conf/*.yaml`` only hold what differs from their defaults, every option can be overridden on the
command line (a misspelt one is refused by Hydra), and values are type-checked before anything runs.

Importing this module changes nothing (no ``sys.path``, environment or exit, and no import of ``bpd``): each
entry point's ``main`` calls ``start`` first, and tests or launchers that import an entry point get its functions.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from bpd.config import ExperimentConfig
    from bpd.evaluate import Provenance

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = str(ROOT / "conf")


def configured_plugins(argv: list[str], base: Path | None = None) -> list[str]:
    """The plugins the config names: ``plugins=[...]`` on the command line, else ``plugins:`` in ``base``
    (conf/base.yaml). Read before Hydra composes, since the schema it composes with is made from the registry the
    plugins extend."""
    base = ROOT / "conf" / "base.yaml" if base is None else base
    for arg in argv[1:]:
        if arg.lstrip("+").startswith("plugins="):
            listed = OverridesParser.create().parse_override(arg).value()  # as Hydra reads it: [a,b] or a
            return [str(p) for p in (listed if isinstance(listed, list) else [listed])]
    return [str(p) for p in (OmegaConf.load(base).get("plugins") or [])] if base.is_file() else []


def start(argv: list[str] | None = None) -> None:
    """What an entry point does before Hydra composes (its ``main`` calls it; importing changes nothing): load the
    plugins ``BPD_PLUGINS`` and the config name (``configured_plugins`` of ``argv``, default ``sys.argv``) and
    register the schemas made from the registry they extend. The jobs it starts (submitit launchers unpickle the
    entry point and import this module by name; DDP workers import ``bpd.config``) inherit both through the
    environment. A plugin that cannot load ends here with its one sentence (exit 2)."""
    named = configured_plugins(sys.argv if argv is None else argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        p for p in (str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")) if p))
    if named:
        os.environ["BPD_PLUGINS"] = ",".join(dict.fromkeys(
            [p for p in os.environ.get("BPD_PLUGINS", "").split(",") if p.strip()] + named))
    try:
        from bpd.config import load_plugins

        load_plugins(named)
    except ValueError as e:
        # bpd.config loads BPD_PLUGINS as it is imported: the PluginError may come from that import, whose failed
        # package leaves only the registry module behind.
        registry = sys.modules.get("bpd.config.registry")
        if registry is None or not isinstance(e, registry.PluginError):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    register()


def register() -> None:
    """The schemas in Hydra's ConfigStore, made from the registry as it is now (after the plugins)."""
    from _schemas import (
        BenchEntry,
        DistillEntry,
        ExperimentSchema,
        ExportEntry,
        PeersEntry,
        PretrainEntry,
        RunEntry,
        TrainEntry,
    )

    from bpd.config import ImageTaskConfig, TranslationTaskConfig
    from bpd.config.translate import TranslateConfig

    cs = ConfigStore.instance()
    for name, node in (("experiment", ExperimentSchema), ("train", TrainEntry), ("run", RunEntry),
                       ("distill", DistillEntry), ("pretrain", PretrainEntry), ("bench", BenchEntry),
                       ("export", ExportEntry), ("bench_peers", PeersEntry), ("translate", TranslateConfig)):
        cs.store(group="schema", name=name, node=node, package="_global_")
    cs.store(group="task", name="translation_schema", node=TranslationTaskConfig)
    cs.store(group="task", name="image_schema", node=ImageTaskConfig)


def to_configs(cfg: DictConfig) -> tuple[ExperimentConfig, Any]:
    """The library's ``ExperimentConfig`` (validated) and the entry point's whole typed config."""
    from bpd.config import ExperimentConfig
    from bpd.config.registry import loaded

    entry = OmegaConf.to_object(cfg)
    late = [p for p in getattr(entry, "plugins", []) if p not in loaded()]
    if late:
        raise ValueError(f"the plugins {late} are named too late (the config's types are made before it is "
                         "composed): name them on the command line (plugins=[...]) or in conf/base.yaml.")
    experiment = ExperimentConfig(**{f.name: getattr(entry, f.name) for f in fields(ExperimentConfig)})
    experiment.command = " ".join(["python", *sys.argv])
    return experiment.validate(), entry


def provenance(cfg: ExperimentConfig, draft_path: Path | None = None) -> Provenance:
    """The experiment's side of an evaluation's rows (its labels, and how its model was made); refused when the
    config asks for draft-model decoding (``draft.model``) and ``draft_path`` is missing: its rows would silently
    be left out."""
    from bpd.evaluate import Provenance

    if cfg.draft.model is not None and draft_path is None:
        raise ValueError("draft-model decoding (draft.model) needs the trained draft model: build it with "
                         "`python experiments/train.py stage=draft` and the same overrides (experiments/run.py "
                         "builds it before evaluating).")
    return Provenance(cfg.task.name, {
        "experiment": cfg.name,
        "model_preset": cfg.model.name,
        "heads_training": cfg.heads.training,
        "heads_targets": cfg.heads.targets,
        "heads_loss": cfg.heads.loss,
        "heads_p1_weight": cfg.heads.p1_weight,
        "heads_p1_distill": cfg.heads.p1_distill,
        "distilled": cfg.base_targets == "distilled",
        "setting": cfg.setting,
        "seed": cfg.seed,
        "command": cfg.command,
    })


#: Config groups that are ``optional`` in conf/base.yaml: Hydra skips a named option that has no file.
OPTIONAL_GROUPS = ("experiment", "setting", "draft")


def check_optional_choices() -> None:
    """An ``experiment=``, ``setting=`` or ``draft=`` that names no file is refused: Hydra would silently
    compose the defaults instead, and a misspelt experiment would train the default config for hours."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    choices = HydraConfig.get().runtime.choices
    for group in OPTIONAL_GROUPS:
        name = choices.get(group)
        if name and not (Path(CONF_DIR) / group / f"{name}.yaml").is_file():
            options = sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))
            raise ValueError(f"there is no {group} named {name!r}; choose one of {', '.join(options)} "
                             f"(the files in conf/{group}/).")


#: Errors of the disk rather than of the code: a full disk or quota ends with one sentence, not a traceback.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def run_experiment(fn: Callable[[ExperimentConfig, Any], object], cfg: DictConfig,
                   engines: Callable[[Any], list[str]] | None = None) -> object:
    """Run an entry point's ``fn`` on its composed config, as the library's ``ExperimentConfig`` and the entry's own
    typed config; user errors (missing data, bad values, corrupt checkpoints) end with one sentence
    (exit 2), a full disk too (exit 1), and Ctrl-C with where it stopped and how to resume (exit 130).
    ``engines``: the decode paths the entry point runs, given its whole config (``decode.engine`` unless given;
    the benchmark's are ``bench.engines``), so that what one of them cannot run is refused before any work."""
    def call() -> object:
        check_optional_choices()
        experiment, entry = to_configs(cfg)
        paths = engines(entry) if engines is not None else [experiment.decode.engine]
        if experiment.decode.proposal_precision == "int8" and "eager" in paths:
            # refused before any training, not at the evaluation (the static path's int8 needs no fbgemm, and on a
            # GPU the chain runs in float32)
            from bpd.models.fastpath import precision_on, require_int8
            from bpd.runtime import pick_device

            if precision_on(pick_device(experiment.device), "int8") == "int8":
                require_int8()
        if experiment.threads:
            import torch

            torch.set_num_threads(experiment.threads)
        from bpd.decoding import step_store

        step_store.use_store(Path(experiment.paths.cache_dir) / "compiled")  # built once, beside the stages
        return fn(experiment, entry)

    return guarded(call)


def _disk_full_in(e: BaseException | None) -> OSError | None:
    """The full-disk ``OSError`` that ``e`` is or was raised from (its causes and contexts), if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            return e
        e = e.__cause__ or e.__context__
    return None


def guarded(call: Callable[[], object]) -> object:
    """``call()`` with ``run_experiment``'s endings for user errors, a full disk and Ctrl-C (entry points whose config
    is not an experiment, such as translate.py, use it directly)."""
    from bpd.runtime import ResultsNotSaved
    from bpd.training.checkpoint import CheckpointError
    from corpora.debian import ArchiveError

    try:
        return call()
    except ResultsNotSaved as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except (FileNotFoundError, ValueError, CheckpointError, ArchiveError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        # A full disk may arrive wrapped: inductor's InductorError around the OSError of a compiled step's build.
        full = _disk_full_in(e)
        if full is None:
            raise
        print(f"error: {full.strerror} writing {full.filename or 'a file'}; free disk space there and run the same "
              "command again (finished stages are cached, training resumes from its last checkpoint).",
              file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        # Training says where it stopped; elsewhere (data, decoding) every finished stage is cached.
        why = str(e) or "finished stages are cached; run the same command to resume."
        print(f"\ninterrupted: {why}", file=sys.stderr)
        sys.exit(130)
