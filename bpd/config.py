"""Typed configuration: the one place every default lives.

``experiments/`` composes these dataclasses with Hydra (they are registered as structured configs there,
so ``conf/*.yaml`` only hold what differs from the defaults below) and hands the library plain dataclass
instances; ``bpd/`` never sees Hydra. Library users build them directly::

    cfg = ExperimentConfig(task=TranslationTaskConfig(name="folder", data_dir="corpus/"), heads=HeadsConfig(k=4))
    cfg.validate()

``experiment_config(d)`` builds one from a plain nested dict (a resolved Hydra config, a JSON file, a test),
filling every missing key with its default here and refusing unknown keys with the fix.

Defaults that had drifted apart before this module existed, and the value kept:

- output length ``a * source length + b``: a = 1.5, b = 10 (the value every shipped config used; the
  library's old fallback of 1.0 / 50 was only reached by direct API calls and by the heads stage's dev
  outputs, which used ``task.max_len`` instead). Every decoder, stage and task now uses ``output_limit``.
- ``identity_p1 = True`` (p_1 is exactly the base model, so a frozen base keeps its BLEU bit for bit; every
  shipped config but the paper-scale ones used it). The paper's variant is ``identity_p1=false``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field, fields
from typing import Any

SPLITS = ("train", "dev", "test")
HEAD_ARCHS = ("paper", "blockdiag", "medusa", "recurrent")
CRITERIA = ("exact", "topk", "distance")
DTYPES = ("float32", "bfloat16", "float16")
TARGETS = ("gold", "distilled", "self")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


# ---------------------------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------------------------


def keyed_fields(cfg: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config's fields as cache keys hash them: without ``drop``, and without the fields of its
    ``KEYED_WHEN_SET`` that are at their defaults (options added after models and data were cached, so
    that the earlier keys stay valid)."""
    unset = {k for k, default in getattr(cfg, "KEYED_WHEN_SET", {}).items() if getattr(cfg, k) == default}
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in drop and k not in unset}


@dataclass
class TranslationTaskConfig:
    """A parallel corpus: the embedded ding sentences, WMT14, or any ``{train,dev,test}.{src,tgt}`` folder."""

    name: str = "ding_en_de"  # a label for the rows
    kind: str = "translation"
    source: str = "ding"  # ding (embedded) | wmt14 | folder (any {train,dev,test}.{src,tgt} folder)
    data_dir: str | None = None  # wmt14, folder: where the text files are
    direction: str = "en-de"  # ding, wmt14: en-de (the paper's) or de-en
    ding_path: str | None = None  # ding: an explicit dictionary file (else Debian's, else apt-get download)
    include_phrases: bool = False  # ding: add the dictionary's phrase pairs to training
    tag_phrases: bool = False  # ding: mark phrase sources with a tag, so untagged sentences keep their length
    sentence_repeat: int = 1  # ding with phrases: the sentence pairs appear this many times in training
    vocab_size: int = 4000  # joint sentencepiece vocabulary
    max_len: int = 64  # training pairs longer than this (in pieces) are cut
    n_dev: int = 500  # ding: held-out sentences
    n_test: int = 1000

    #: ``decode.proposal_vocab`` (the heads propose among the most frequent target tokens) applies here.
    proposal_vocab_applies = True

    def validate(self) -> None:
        _check(self.kind == "translation", f"task.kind={self.kind!r} does not match a translation task.")
        _check(self.source in ("ding", "wmt14", "folder"),
               f"unknown task.source {self.source!r} for translation; use ding, wmt14 or folder.")
        _check(self.direction in ("en-de", "de-en"), f"task.direction must be en-de or de-en (got {self.direction!r}).")
        _check(self.vocab_size >= 8, f"task.vocab_size must be >= 8 (got {self.vocab_size}).")
        _check(self.max_len >= 2, f"task.max_len must be >= 2 (one token plus EOS; got {self.max_len}).")
        _check(self.include_phrases or (not self.tag_phrases and self.sentence_repeat == 1),
               "task.tag_phrases and task.sentence_repeat shape the phrase pairs: set task.include_phrases=true.")
        _check(self.sentence_repeat >= 1, f"task.sentence_repeat must be >= 1 (got {self.sentence_repeat}).")

    #: Fields added after data was cached: in keys only when they differ from their defaults.
    KEYED_WHEN_SET = {"tag_phrases": False, "sentence_repeat": 1}


@dataclass
class ImageTaskConfig:
    """Super-resolution: embedded photograph patches (faces_sr) or CelebA (celeba_sr)."""

    name: str = "faces_sr"  # a label for the rows
    kind: str = "image"
    source: str = "faces"  # faces (embedded photograph patches) | celeba
    data_dir: str | None = None  # celeba: img_align_celeba/*.jpg and list_eval_partition.txt
    lr_size: int = 4
    hr_size: int = 16  # 16x16x3 = 768 tokens per image; the paper's 8 -> 32 is lr_size=8 hr_size=32
    n_train: int | None = 16384  # faces: patches drawn; celeba: a cap (null = the whole split)
    n_dev: int | None = 128
    n_test: int | None = 256
    seed: int = 0  # faces: which patches are drawn

    proposal_vocab_applies = False  # intensities: a restricted proposal vocabulary makes no sense

    def validate(self) -> None:
        _check(self.kind == "image", f"task.kind={self.kind!r} does not match an image task.")
        _check(self.source in ("faces", "celeba"),
               f"unknown task.source {self.source!r} for images; use faces or celeba.")
        _check(self.lr_size >= 1 and self.hr_size % self.lr_size == 0,
               f"task.hr_size ({self.hr_size}) must be a multiple of task.lr_size ({self.lr_size}).")


TaskConfig = TranslationTaskConfig | ImageTaskConfig
TASK_KINDS: dict[str, type] = {"translation": TranslationTaskConfig, "image": ImageTaskConfig}


# ---------------------------------------------------------------------------------------------------------------
# Model, heads, training
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """The Transformer's sizes (``conf/model/*.yaml`` name them: tiny, small, transformer_base, ...)."""

    name: str = "tiny"  # a label for the rows
    d_model: int = 128
    n_heads: int = 4
    d_ff: int = 512
    n_enc_layers: int = 2
    n_dec_layers: int = 2
    dropout: float = 0.1
    positions: str = "sinusoidal"  # sinusoidal | learned (image models use row/column/channel tables)
    share_embeddings: bool = True  # source, target and output embeddings tied (translation)
    max_positions: int | None = None  # null: the task decides (translation: 4 * task.max_len + 64)
    # Images: the decoder also sees, at each output position, the low-resolution intensity that position
    # upsamples (beside attending to the encoded image), so the model need only learn the detail.
    aligned_input: bool = False

    #: Fields added after models were cached: in keys only when they differ from their defaults.
    KEYED_WHEN_SET = {"aligned_input": False}

    def validate(self) -> None:
        _check(self.d_model % self.n_heads == 0,
               f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads}).")
        _check(self.positions in ("sinusoidal", "learned"),
               f"unknown model.positions {self.positions!r}; use sinusoidal or learned.")


@dataclass
class HeadsConfig:
    """k proposal heads on top of the base model, and how they are trained."""

    k: int = 8
    arch: str = "paper"  # paper | blockdiag | medusa | recurrent (bpd/models/heads/)
    d_ff: int | None = None  # per-slot hidden size; null = the model's d_ff
    identity_p1: bool = True  # p_1 stays exactly the base model (false: the paper's p_1 through the new layer)
    training: str = "frozen"  # frozen | finetune (the base trains jointly with the heads)
    loss: str = "mean"  # mean over heads | sampled (the paper: one random head per batch)
    p1_weight: float = 1.0  # mean loss: p_1 counts this many times one proposal head (1 = plain mean)
    targets: str = "gold"  # gold | distilled (teacher beam outputs) | self (base model's greedy outputs)
    eval_vs_self: bool = True  # also log per-head dev accuracy against the base model's own outputs

    def validate(self) -> None:
        _check(self.k >= 1, f"heads.k must be >= 1 (got {self.k}).")
        _check(self.arch in HEAD_ARCHS, f"unknown heads.arch {self.arch!r}; choose one of {', '.join(HEAD_ARCHS)}.")
        _check(self.arch != "recurrent" or self.identity_p1,
               "heads.arch=recurrent needs heads.identity_p1=true: its first slot reads p_1's token.")
        _check(self.training in ("frozen", "finetune"),
               f"unknown heads.training {self.training!r}; use frozen or finetune.")
        _check(self.loss in ("mean", "sampled"), f"unknown heads.loss {self.loss!r}; use mean or sampled.")
        _check(self.p1_weight > 0, f"heads.p1_weight must be > 0 (got {self.p1_weight}); 1 is the plain mean.")
        _check(self.targets in TARGETS, f"unknown heads.targets {self.targets!r}; use gold, distilled or self.")


@dataclass
class TrainConfig:
    """One training stage's optimisation and budget (``train:``; the heads stage overlays ``heads_train:``)."""

    lr: float = 2.0e-3  # peak learning rate
    warmup_steps: int = 300
    betas: tuple[float, float] = (0.9, 0.997)  # tensor2tensor's Adam beta2
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # 0 = off
    label_smoothing: float = 0.1
    max_steps: int = 100_000
    max_minutes: float | None = 5.0  # wall-clock cap; whichever of steps/minutes comes first
    max_tokens: int = 2048  # padded tokens per micro-batch
    grad_accum: int = 1
    bf16: bool = False
    eval_every: int = 500
    ckpt_every: int = 200
    log_every: int = 20
    base_lr_scale: float = 1.0  # fine-tuning: base parameters learn at lr * base_lr_scale
    keep_best: bool = False  # early stopping on dev (the final checkpoint holds the best weights)
    patience: int | None = None  # evaluations without improvement before stopping (single process)
    loader_workers: int | None = None  # DataLoader processes collating batches (null: 0 on a CPU, 4 on a GPU)
    score_every: int = 0  # greedy-decode the dev set and score it (BLEU, PSNR) every N steps (0 = never)
    score_examples: int | None = 200  # dev examples scored (null = all)
    best_on: str = "loss"  # keep_best / patience watch: loss (p_1's dev loss) | score (the dev score)

    #: Fields that change how a model is trained, not which model: left out of cache keys.
    RUNTIME_ONLY = ("loader_workers",)
    #: Fields added after models were cached: in cache keys only when they differ from their defaults, so
    #: that the keys (and the models) of earlier configs stay valid.
    KEYED_WHEN_SET = {"score_every": 0, "score_examples": 200, "best_on": "loss"}

    def product(self) -> dict[str, Any]:
        """The fields that determine the trained model (what cache keys hash)."""
        return keyed_fields(self, drop=self.RUNTIME_ONLY)

    def validate(self, where: str = "train") -> None:
        # A run that takes no step would still write a "finished" checkpoint that later stages build on.
        _check(self.max_steps >= 1, f"{where}.max_steps must be >= 1 (got {self.max_steps}).")
        _check(self.max_minutes is None or self.max_minutes > 0,
               f"{where}.max_minutes must be > 0, or null for no time cap (got {self.max_minutes}).")
        _check(self.lr > 0, f"{where}.lr must be > 0 (got {self.lr}).")
        _check(self.warmup_steps >= 0 and self.grad_accum >= 1,
               f"{where}.warmup_steps must be >= 0 and grad_accum >= 1 "
               f"(got {self.warmup_steps} and {self.grad_accum}).")
        _check(self.max_tokens >= 1, f"{where}.max_tokens must be >= 1 (got {self.max_tokens}).")
        _check(min(self.eval_every, self.ckpt_every, self.log_every) >= 1,
               f"{where}.eval_every, ckpt_every and log_every must be >= 1.")
        _check(self.score_every >= 0, f"{where}.score_every must be >= 0 (0 = never; got {self.score_every}).")
        _check(self.best_on in ("loss", "score"), f"{where}.best_on must be loss or score (got {self.best_on!r}).")
        _check(self.best_on == "loss" or self.score_every > 0,
               f"{where}.best_on=score needs {where}.score_every > 0 (how often the dev set is scored).")


def _overlay_fields() -> list[tuple[str, Any, Any]]:
    """``heads_train``'s fields: every ``TrainConfig`` field, optional (null = the ``train`` value)."""
    out = []
    for f in fields(TrainConfig):
        default = False if f.name == "keep_best" else None
        out.append((f.name, f"{f.type} | None", field(default=default)))
    return out


#: Overrides of ``train`` for the heads stage. Every field is null (= train's value) except ``keep_best``,
#: which is off: early stopping watches p_1's dev loss, a base-model criterion.
HeadsTrainConfig = dataclasses.make_dataclass("HeadsTrainConfig", _overlay_fields())
HeadsTrainConfig.__module__ = __name__  # so that its string annotations resolve here


def heads_train_config(train: TrainConfig, overlay: Any) -> TrainConfig:
    """The heads stage's training config: ``train`` with the non-null ``heads_train`` values over it."""
    values = {f.name: getattr(overlay, f.name) for f in fields(overlay) if getattr(overlay, f.name) is not None}
    out = dataclasses.replace(train, **values)
    out.validate("heads_train (or train)")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class CriterionConfig:
    """One acceptance criterion, decoded at every k of ``decode.ks`` and every minimum block size."""

    name: str = "exact"  # exact | topk | distance
    param: float | None = None  # topk: n (default 2); distance: epsilon (default 2)
    min_block_sizes: list[int] = field(default_factory=lambda: [1])


@dataclass
class RescoreConfig:
    """Draft rescoring (``bpd.decoding.rescore``): the chain's block chosen from the heads' ``beam`` best
    candidates per depth by log p_heads + ``weight`` * log p_bigram (a model of the training targets)."""

    beam: int = 4
    weight: float = 0.5


@dataclass
class DecodeConfig:
    """What the evaluation stage decodes and how."""

    split: str = "test"
    n_examples: int | None = None  # null = the whole split
    batch_size: int = 1  # the paper's wall-clock setting; > 1 works too
    beam_size: int = 4  # also decode with beam search (0 = skip)
    alpha: float = 0.6  # beam length penalty
    ks: list[int] = field(default_factory=lambda: [2, 4, 8])  # decode-time k (<= heads.k)
    criteria: list[CriterionConfig] = field(
        default_factory=lambda: [CriterionConfig("exact"), CriterionConfig("topk", 2.0)]
    )
    max_len_a: float = 1.5  # translation: output limit = a * source length + max_len_extra
    max_len_extra: int = 10
    dtype: str = "float32"  # float32 | bfloat16
    threads: int | None = None  # CPU threads while decoding (null = unchanged)
    naive_greedy: bool = False  # also the recompute-everything greedy (slow; a weak-baseline reference)
    proposal_vocab: int | None = None  # translation: heads propose among the N most frequent target tokens
    trees: list[str] = field(default_factory=list)  # also tree verification: shapes "3x2x1" (widths), "beam4"
    rescore: list[RescoreConfig] = field(default_factory=list)  # also rescored chains: [{beam: 4, weight: 0.5}]
    skip_existing: bool = True  # an evaluation whose run id already has rows is not redone

    def validate(self, trained_k: int | None = None) -> None:
        _check(self.split in SPLITS, f"unknown decode.split {self.split!r}; use test, dev or train.")
        _check(self.batch_size >= 1, f"decode.batch_size must be >= 1 (got {self.batch_size}).")
        _check(self.n_examples is None or self.n_examples >= 1,
               f"decode.n_examples must be >= 1, or null for the whole split (got {self.n_examples}).")
        _check(self.beam_size >= 0, f"decode.beam_size must be >= 0 (0 = no beam search; got {self.beam_size}).")
        _check(self.dtype in ("float32", "bfloat16"), f"unknown decode.dtype {self.dtype!r}; use float32 or bfloat16.")
        _check(self.proposal_vocab is None or self.proposal_vocab >= 1,
               f"decode.proposal_vocab={self.proposal_vocab}: use a positive number of tokens, or null.")
        _check(bool(self.ks), "decode.ks must list at least one k.")
        bad = [k for k in self.ks if k < 1 or (trained_k is not None and k > trained_k)]
        _check(not bad,
               f"decode.ks {bad} not in 1..{trained_k} (the trained heads.k); lower decode.ks or raise heads.k.")
        for c in self.criteria:
            _check(c.name in CRITERIA, f"unknown acceptance criterion {c.name!r}; choose one of {', '.join(CRITERIA)}.")
            _check(all(m >= 1 for m in c.min_block_sizes), f"decode.criteria min_block_sizes must be >= 1 ({c}).")
        check_tree_shapes(self.trees, "decode.trees")
        for r in self.rescore:
            _check(r.beam >= 1 and r.weight >= 0,
                   f"decode.rescore needs beam >= 1 and weight >= 0 (got beam={r.beam}, weight={r.weight}).")

    def output_limit(self, src_len: int) -> int:
        """Translation output length limit a * source length + b (fairseq's max_len_a / max_len_b): a weak
        model's degenerate repetitions stop early instead of costing tens of wasted steps per sentence."""
        return output_limit(src_len, self.max_len_a, self.max_len_extra)


def parse_tree_shape(text: str) -> tuple[int, list[int]]:
    """The one grammar of tree-shape strings (``decode.trees``, ``bench.trees``, ``tree_decode``): ``"beam4"`` ->
    (4, []), a budget of 4 nodes per depth; ``"3x2x1"`` -> (0, [3, 2, 1]), candidates per node at each depth."""
    t = str(text).strip().lower()
    if re.fullmatch(r"beam[1-9][0-9]*", t):
        return int(t[4:]), []
    if re.fullmatch(r"[1-9][0-9]*(x[1-9][0-9]*)*", t):
        return 0, [int(w) for w in t.split("x")]
    raise ValueError(f"unknown tree shape {text!r}; use widths per depth like '3x2x1' or a budget like 'beam4'.")


def check_tree_shapes(trees: list[str], where: str) -> None:
    for t in trees:
        try:
            parse_tree_shape(t)
        except ValueError:
            _check(False, f"unknown tree shape {t!r} in {where}; use widths per depth like '3x2x1' or a budget "
                          "like 'beam4'.")


def output_limit(src_len: int, a: float = 1.5, b: int = 10) -> int:
    """The one output-length rule for sequences without a fixed length: ``int(a * src_len) + b``."""
    return int(a * src_len) + b


# ---------------------------------------------------------------------------------------------------------------
# The rest of an experiment
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DistillConfig:
    """Sequence-level distillation: a teacher (same config, another seed) beam-decodes the training sources."""

    teacher_seed: int | None = None  # null = seed + 1 (the paper's second baseline)
    beam: int = 4
    alpha: float = 0.6
    batch_size: int = 64
    shard_size: int = 2048  # sources per resumable shard


@dataclass
class DraftConfig:
    """Draft-model speculative decoding (``bpd.decoding.draft``): a separate small base model, trained on the
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
        _check(self.base_targets in ("gold", "distilled"),
               f"unknown base_targets {self.base_targets!r}; use gold or distilled.")
        self.task.validate()
        self.model.validate()
        if self.draft.model is not None:
            self.draft.model.validate()
            _check(self.draft.max_steps is None or self.draft.max_steps >= 1,
                   f"draft.max_steps must be >= 1, or null for train.max_steps (got {self.draft.max_steps}).")
        self.heads.validate()
        self.train.validate("train")
        self.heads_train_config  # noqa: B018 (validates the overlay)
        self.decode.validate(self.heads.k)
        _check(self.decode.proposal_vocab is None or self.task.proposal_vocab_applies,
               f"decode.proposal_vocab restricts a translation vocabulary; set it to null for {self.task.kind} tasks.")
        _check(self.heads.targets != "self" or self.heads.k > 1 or not self.heads.identity_p1,
               "heads.targets=self needs heads to train (heads.k > 1).")
        _check(not self.model.aligned_input or self.task.kind == "image",
               "model.aligned_input aligns output pixels with input pixels: set it to false for translation.")
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
    naive_greedy: bool = True  # batch 1: the recompute-everything baseline the reference code used
    trees: list[str] = field(default_factory=list)  # also tree verification with these shapes (as decode.trees)
    rescore: list[RescoreConfig] = field(default_factory=list)  # also rescored chains (as decode.rescore)
    archs: list[str] | None = None  # compare head architectures (missing ones are trained)
    arch_train_steps: int = 300  # heads of another architecture: trained this many steps (the same on any machine)
    arch_train_minutes: float | None = 10.0  # ... with this cap (rows record when it binds)
    dtype: str = "float32"  # float32 | bfloat16 | float16 (half precision: for GPUs)
    compile: bool = False  # torch.compile the decoder layers, for both decoders
    step_repeats: int = 200
    results_dir: str = "results/bench"

    def validate(self) -> None:
        """Bad benchmark options refused before any model is trained or timed (a float16 request must not
        run, and be recorded as, float32)."""
        _check(bool(self.batch_sizes) and all(b >= 1 for b in self.batch_sizes),
               f"bench.batch_sizes must be a non-empty list of sizes >= 1 (got {list(self.batch_sizes)}).")
        _check(bool(self.ks) and all(k >= 1 for k in self.ks),
               f"bench.ks must be a non-empty list of block sizes >= 1 (got {list(self.ks)}).")
        _check(1 <= self.repeats <= self.max_repeats,
               f"bench.repeats must be >= 1 and <= bench.max_repeats (got {self.repeats} and {self.max_repeats}).")
        _check(self.ci_target > 0, f"bench.ci_target must be > 0 (a relative half-width; got {self.ci_target}).")
        _check(self.dtype in DTYPES, f"unknown bench.dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}.")
        bad = [a for a in (self.archs or []) if a not in HEAD_ARCHS]
        _check(not bad, f"unknown head architecture {bad[0] if bad else ''!r} in bench.archs; "
                        f"choose from {', '.join(HEAD_ARCHS)}.")
        for c in self.criteria:
            _check(c.name in CRITERIA, f"unknown acceptance criterion {c.name!r}; choose one of {', '.join(CRITERIA)}.")
        check_tree_shapes(self.trees, "bench.trees")


# ---------------------------------------------------------------------------------------------------------------
# Building from plain dicts
# ---------------------------------------------------------------------------------------------------------------


def from_dict(cls: type, d: Any, where: str = "") -> Any:
    """``cls`` from a (possibly partial) nested dict: missing keys take their defaults, nested dataclasses
    (and lists of them) are built from their type hints, an unknown key is refused with the fix. Instances of
    ``cls`` pass through unchanged."""
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
    return cls(**{name: _typed(hints[name], value, f"{where}{name}") for name, value in d.items()})


def _typed(hint: Any, value: Any, where: str) -> Any:
    if value is None:
        return None
    if where == "task":  # a union of configs: the value's kind says which
        kind = value.kind if not isinstance(value, dict) else value.get("kind", "translation")
        _check(kind in TASK_KINDS, f"unknown task.kind {kind!r}; use {' or '.join(TASK_KINDS)}.")
        return from_dict(TASK_KINDS[kind], value, "task.")
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


__all__ = ["BenchConfig", "CriterionConfig", "DecodeConfig", "DistConfig", "DistillConfig", "ExperimentConfig",
           "HeadsConfig", "HeadsTrainConfig", "ImageTaskConfig", "LoggerConfig", "ModelConfig", "PathsConfig",
           "TaskConfig", "TrainConfig", "TranslationTaskConfig", "experiment_config", "from_dict",
           "heads_train_config", "output_limit"]
