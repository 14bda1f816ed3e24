"""An experiment's whole config (task, model, heads, training, decoding, the rest), the benchmark's, and
building both from plain nested dicts."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from bpd.config.common import CRITERIA, DTYPES, check, split_parts
from bpd.config.decode import ENGINES, CriterionConfig, DecodeConfig
from bpd.config.methods import MethodsConfig, bench_methods, check_methods
from bpd.config.model import HeadsConfig, HeadsTrainConfig, ModelConfig, TrainConfig, heads_train_config
from bpd.config.registry import entries, names
from bpd.config.task import TranslationTaskConfig, task_config


@dataclass
class DistillConfig:
    """Sequence-level distillation: a teacher (same config, another seed) beam-decodes the training sources."""

    teacher_seed: int | None = None  # null = seed + 1 (the paper's second baseline)
    beam: int = 4
    alpha: float = 0.6
    batch_size: int = 64
    shard_size: int = 2048  # sources per resumable shard
    # The heads' decoded targets (heads.targets=self or distilled) on only this many training sources (evenly
    # spaced over the training set; null = all): a corpus of 500k sentences takes hours to decode on a CPU, and
    # a heads stage of a few thousand steps sees far fewer. Their training set is then those sources' pairs.
    max_sources: int | None = None
    # The same for the distilled base model's training set (null = all, the paper's): a distilled base trained on
    # a sample would see less text than the gold base it is compared with, and Table 1's distillation row would
    # measure the smaller set along with distillation.
    base_sources: int | None = None


@dataclass
class DraftConfig:
    """Draft-model speculative decoding (``bpd.decoding.methods.draft``): a separate small base model, trained on the
    same data with the same recipe, drafts the block; set ``model`` (``draft=tiny`` on the command line) to
    add its rows beside the chain's at every k >= 2 of ``decode.ks``."""

    model: ModelConfig | None = None  # the draft's sizes (null = no draft-model rows)
    max_steps: int | None = None  # its training budget (null = train.max_steps)


@dataclass
class LoggerConfig:
    """Weights & Biases, offline by default (runs land in outputs/wandb; ``wandb sync`` uploads them)."""

    enabled: bool = True
    mode: str = "offline"  # online | offline | disabled
    project: str = "bpd"
    group: str | None = None  # null = the experiment's name, so one sweep's runs are grouped
    dir: str = "outputs"


@dataclass
class DistConfig:
    """Several GPUs / nodes (torchrun or a multi-task SLURM job); nothing to set for one process."""

    reference_world_size: int | None = None  # keep the global batch of this many GPUs (gradient accumulation)
    backend: str | None = None  # null = nccl on GPUs, gloo on CPUs
    timeout_min: float = 60.0  # how long a rank waits in a collective (rank 0 alone prepares data)


@dataclass
class PathsConfig:
    cache_dir: str = "outputs/cache"  # models, data, distillation targets: keyed by config hashes
    results_dir: str | None = None  # null = results/<name>
    shipped_dir: str = "checkpoints"  # shipped base models (make pretrain), installed when a config matches one


@dataclass
class ExperimentConfig:
    """A whole experiment: data -> base model -> [distillation] -> heads -> evaluation."""

    name: str = "adhoc"  # results go to results/<name>/
    setting: str | None = None  # a label for the rows: regular | distillation | finetune | both | ...
    seed: int = 0
    threads: int | None = None  # CPU threads for torch (null = torch's default)
    device: str = "auto"  # auto | cpu | cuda | cuda:1
    base_targets: str = "gold"  # gold | distilled: what the base model p_1 trains on
    task: Any = field(default_factory=TranslationTaskConfig)  # TranslationTaskConfig | ImageTaskConfig
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    heads_train: HeadsTrainConfig = field(default_factory=HeadsTrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    draft: DraftConfig = field(default_factory=DraftConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    command: str | None = None  # the command line that made this config (recorded in rows)
    shipped: bool = True  # start from a shipped base model when one matches this config (false: train anew)

    @property
    def results_dir(self) -> str:
        return self.paths.results_dir or f"results/{self.name}"

    @property
    def heads_train_config(self) -> TrainConfig:
        return heads_train_config(self.train, self.heads_train)

    @property
    def teacher_seed(self) -> int:
        return self.seed + 1 if self.distill.teacher_seed is None else self.distill.teacher_seed

    def validate(self) -> ExperimentConfig:
        """Every option checked at once, before any data is read or anything is trained."""
        check(self.threads is None or self.threads >= 1,
               f"threads must be >= 1, or null for torch's default (got {self.threads}).")
        check(self.seed >= 0 and (self.distill.teacher_seed is None or self.distill.teacher_seed >= 0),
               f"seed and distill.teacher_seed must be >= 0 (got {self.seed} and {self.distill.teacher_seed}): "
               "the image tasks' numpy generators refuse negative seeds.")
        check(self.base_targets in ("gold", "distilled"),
               f"unknown base_targets {self.base_targets!r}; use gold or distilled.")
        self.task.validate()
        self.model.validate()
        if self.draft.model is not None:
            self.draft.model.validate()
            check(self.draft.max_steps is None or self.draft.max_steps >= 1,
                   f"draft.max_steps must be >= 1, or null for train.max_steps (got {self.draft.max_steps}).")
        check(self.distill.base_sources is None or self.distill.base_sources >= 1,
               f"distill.base_sources must be >= 1, or null to decode every training source "
               f"(got {self.distill.base_sources}).")
        check(self.distill.max_sources is None or self.distill.max_sources >= 1,
               f"distill.max_sources must be >= 1, or null to decode every training source "
               f"(got {self.distill.max_sources}).")
        self.heads.validate()
        self.train.validate("train")
        self.heads_train_config  # noqa: B018 (validates the overlay)
        dropped = self.decode.fit_ks(self.heads.k)
        if dropped:
            print(f"note: decode.ks {dropped} are above heads.k={self.heads.k} and are skipped; decoding at "
                  f"decode.ks={list(self.decode.ks)}.")
        self.decode.validate(self.heads.k)
        corpus = split_parts(self.decode.split)[0]
        # A held-out set that only some corpora's folders hold (the face test set: the photo corpus's).
        holders = [n for n, e in entries("corpus").items() if corpus in e.info.holds]
        check(not holders or self.task.source in holders,
               f"decode.split={self.decode.split} is a held-out set that the {' or '.join(holders)} corpus holds: "
               f"use it with task.source={' or '.join(holders)}.")
        check(corpus is None or bool(holders) or (self.task.kind == "translation" and corpus != self.task.source),
               f"decode.split={self.decode.split} scores a translation model on another corpus's sentences; "
               + (f"this task's own are decode.split={split_parts(self.decode.split)[1]}."
                  if self.task.kind == "translation" else f"use test or dev for {self.task.kind} tasks."))
        check(self.decode.proposal_vocab is None or self.task.proposal_vocab_applies,
               f"decode.proposal_vocab restricts a translation vocabulary; set it to null for {self.task.kind} tasks.")
        check(self.heads.proposal_vocab is None or self.task.proposal_vocab_applies,
               f"heads.proposal_vocab restricts a translation vocabulary; set it to null for {self.task.kind} tasks.")
        vocab = getattr(self.task, "vocab_size", None)  # translation tasks only (image tasks refused above)
        for where, n in (("decode", self.decode.proposal_vocab), ("heads", self.heads.proposal_vocab)):
            # A larger number would be cut to the vocabulary silently, and the rows would record it uncut.
            check(n is None or vocab is None or n <= vocab,
                   f"{where}.proposal_vocab={n} is above task.vocab_size={vocab}; use at most the vocabulary, "
                   "or null for all of it.")
        check(self.heads.targets != "self" or self.heads.k > 1 or not self.heads.identity_p1,
               "heads.targets=self needs heads to train (heads.k > 1).")
        check(not self.model.aligned_input or self.task.kind == "image",
               "model.aligned_input aligns output pixels with input pixels: set it to false for translation.")
        check(self.task.kind == "image" or not (self.train.ordinal_sigma or self.heads_train.ordinal_sigma),
               "train.ordinal_sigma spreads targets over neighbouring intensities: set it to 0 for translation.")
        check(not self.heads.ahead or self.model.aligned_input,
               "heads.ahead=true reads the upsampled guess under each output position of an image model: set "
               "model.aligned_input=true (super-resolution), or heads.ahead=false.")
        learned = self.model.aligned_input and self.model.aligned_upsample == "learned"
        check(learned or not self.train.upsampler_steps,
               "train.upsampler_steps fits the learned upsampler of an image model: set model.aligned_input=true and "
               "model.aligned_upsample=learned, or train.upsampler_steps=0.")
        return self


@dataclass
class BenchConfig:
    """``experiments/bench.py`` (make bench): greedy vs blockwise timed side by side in one process."""

    batch_sizes: list[int] = field(default_factory=lambda: [1, 8, 32])
    ks: list[int] = field(default_factory=lambda: [2, 4, 6, 8, 10])  # those above the trained k are skipped
    criteria: list[CriterionConfig] = field(
        default_factory=lambda: [CriterionConfig("exact"), CriterionConfig("topk", 2.0)]
    )
    repeats: int = 3  # at least this many passes over the inputs per batch size
    max_repeats: int = 14  # ... and more, up to this, until every speedup's 95% interval is within ci_target
    ci_target: float = 0.03  # relative half-width of the interval (0.03 = +-3%)
    # ... at these batch sizes; the others take `repeats` passes (their few batches rarely reach +-3% within
    # the cap, and the repeats would double the bench's time)
    ci_batch_sizes: list[int] = field(default_factory=lambda: [1])
    n_examples: dict[int, int] = field(default_factory=lambda: {1: 100, 8: 256, 32: 512})
    # Each method's own options, as decode.methods; here naive greedy is on (batch 1: the recompute-everything
    # baseline the reference code used) and beam search off. The chain is timed at l = 1 only.
    methods: MethodsConfig = field(default_factory=bench_methods)
    archs: list[str] | None = None  # compare head architectures (missing ones are trained)
    arch_train_steps: int = 300  # heads of another architecture: trained this many steps (the same on any machine)
    arch_train_minutes: float | None = 10.0  # ... with this cap (rows record when it binds)
    dtype: str = "float32"  # float32 | bfloat16 | float16 (half precision: for GPUs)
    compile: bool = False  # torch.compile the decoder layers, for both decoders
    # the decode paths timed, in the same passes (bpd.decoding.engine); each path's rows take greedy on that path
    # as their reference, the first path's greedy is every other path's second reference
    engines: list[str] = field(default_factory=lambda: ["eager", "compiled"])
    floors: bool = True  # measure the memory bandwidth and put each step's floor beside its cost
    step_repeats: int = 200
    results_dir: str = "results/bench"
    # Spec-Bench's per-example records (results_dir/specbench/), on demand: megabytes per run, while the rows
    # already carry what they sum to (speedup_specbench, mean_accepted_tokens).
    specbench_records: bool = False

    def validate(self) -> None:
        """Bad benchmark options refused before any model is trained or timed (a float16 request must not
        run, and be recorded as, float32)."""
        check(bool(self.batch_sizes) and all(b >= 1 for b in self.batch_sizes),
               f"bench.batch_sizes must be a non-empty list of sizes >= 1 (got {list(self.batch_sizes)}).")
        check(bool(self.ks) and all(k >= 1 for k in self.ks),
               f"bench.ks must be a non-empty list of block sizes >= 1 (got {list(self.ks)}).")
        check(1 <= self.repeats <= self.max_repeats,
               f"bench.repeats must be >= 1 and <= bench.max_repeats (got {self.repeats} and {self.max_repeats}).")
        check(self.ci_target > 0, f"bench.ci_target must be > 0 (a relative half-width; got {self.ci_target}).")
        bad_n = {b: n for b, n in (self.n_examples or {}).items() if n is None or n < 1}
        check(not bad_n, f"bench.n_examples gives batch size(s) {sorted(bad_n)} no examples ({bad_n}); use >= 1 "
                         "per batch size, or leave a size out to time the whole split.")
        check(self.dtype in DTYPES, f"unknown bench.dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}.")
        bad = [a for a in (self.archs or []) if a not in names("head")]
        check(not bad, f"unknown head architecture {bad[0] if bad else ''!r} in bench.archs; "
                        f"choose from {', '.join(names('head'))}.")
        for c in self.criteria:
            check(c.name in CRITERIA, f"unknown acceptance criterion {c.name!r}; choose one of {', '.join(CRITERIA)}.")
        check_methods(self.methods, "bench.methods")
        bad_e = [e for e in self.engines if e not in ENGINES]
        check(bool(self.engines) and not bad_e and len(set(self.engines)) == len(self.engines),
               f"bench.engines {list(self.engines)}: list distinct decode paths among {', '.join(ENGINES)}.")


def from_dict(cls: type, d: Any, where: str = "") -> Any:
    """``cls`` from a (possibly partial) nested dict: missing keys take their defaults (a nested section's own
    missing keys those of the field's default, e.g. ``bench.methods``' beam search off), nested dataclasses (and
    lists of them) are built from their type hints, an unknown key is refused with the fix. Instances of ``cls``
    pass through unchanged."""
    if isinstance(d, cls):
        return d
    d = {} if d is None else d
    if not isinstance(d, dict):
        raise ValueError(f"{where.rstrip('.') or cls.__name__} must be a mapping of options (got {d!r}).")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ValueError(f"unknown option {', '.join(where + u for u in unknown)}; "
                         f"{where.rstrip('.') or cls.__name__} takes {', '.join(known)}.")
    hints = typing.get_type_hints(cls)
    made = {f.name: f.default_factory for f in fields(cls) if f.default_factory is not dataclasses.MISSING}
    return cls(**{name: _typed(hints[name], _over(made[name]() if name in made else None, value), f"{where}{name}")
                  for name, value in d.items()})


def _over(default: Any, value: Any) -> Any:
    """A partial dict laid over a default dataclass instance, key by key and section by section (a plain
    value as it is)."""
    if not (dataclasses.is_dataclass(default) and isinstance(value, dict)):
        return value
    merged = {f.name: getattr(default, f.name) for f in fields(default)}
    for k, v in value.items():
        merged[k] = _over(merged[k], v) if k in merged else v
    return merged


def _typed(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if where == "task":  # a union of configs: the value's kind says which
        kind = value.kind if not isinstance(value, dict) else value.get("kind", "translation")
        return from_dict(task_config(kind), value, "task.")
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, where + ".")
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        return [from_dict(args[0], v, where + ".") for v in value]
    if tuple in (typing.get_origin(hint), *map(typing.get_origin, args)):
        return tuple(value)
    return value


def experiment_config(d: dict[str, Any] | ExperimentConfig) -> ExperimentConfig:
    """An ``ExperimentConfig`` from a nested dict (missing keys take the defaults above); not yet validated."""
    return from_dict(ExperimentConfig, d)
