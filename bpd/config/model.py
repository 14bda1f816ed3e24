"""The model's sizes, the proposal heads, and training (the base stage's ``train`` and the heads stage's
overlay ``heads_train``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from bpd.config.common import TARGETS, check, keyed
from bpd.config.heads import chained_archs
from bpd.config.registry import lookup


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
    # How that intensity is upsampled: nearest (the LR pixel the output pixel lies in) | bicubic (the
    # bicubic interpolation of the LR image at the output pixel, a better first guess than its nearest
    # neighbour, so the model starts from the bicubic baseline and learns the correction) | learned (bicubic plus a
    # small convolutional network's correction, fitted to the training patches before the base trains:
    # ``train.upsampler_steps``, bpd/models/upsampler.py), so that a base which copies its guess can beat bicubic.
    aligned_upsample: str = "nearest"
    upsampler_channels: int = 64  # the learned upsampler's width and depth (convolutions over the LR image)
    upsampler_layers: int = 5
    # The table that embeds that intensity is the output layer's own rows (scaled as token embeddings are), so
    # a freshly built model already scores the upsampled intensity highest: it starts from bicubic's answer
    # instead of learning to copy it through 256 separate embeddings.
    aligned_tied: bool = False

    def validate(self) -> None:
        for name in ("d_model", "n_heads", "d_ff"):
            check(getattr(self, name) >= 1, f"model.{name} must be >= 1 (got {getattr(self, name)}).")
        for name in ("n_enc_layers", "n_dec_layers"):
            check(getattr(self, name) >= 0, f"model.{name} must be >= 0 (got {getattr(self, name)}).")
        check(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1) (got {self.dropout}).")
        check(self.max_positions is None or self.max_positions >= 1,
               f"model.max_positions must be >= 1, or null to let the task decide (got {self.max_positions}).")
        check(self.d_model % self.n_heads == 0,
               f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads}).")
        check(self.positions in ("sinusoidal", "learned"),
               f"unknown model.positions {self.positions!r}; use sinusoidal or learned.")
        check(self.aligned_upsample in ("nearest", "bicubic", "learned"),
               f"unknown model.aligned_upsample {self.aligned_upsample!r}; use nearest, bicubic or learned.")
        check(self.upsampler_channels >= 1 and self.upsampler_layers >= 2,
               f"model.upsampler_channels must be >= 1 and upsampler_layers >= 2 (got {self.upsampler_channels} "
               f"and {self.upsampler_layers}).")
        check(self.aligned_input or not self.aligned_tied, "model.aligned_tied ties the aligned input's table: set "
               "model.aligned_input=true too.")


@dataclass
class HeadsConfig:
    """k proposal heads on top of the base model, and how they are trained."""

    k: int = 8
    arch: str = "paper"  # paper | blockdiag | medusa | recurrent | attend: registered in bpd/config/heads.py
    d_ff: int | None = None  # per-slot hidden size; null = the model's d_ff
    identity_p1: bool = True  # p_1 stays exactly the base model (false: the paper's p_1 through the new layer)
    # recurrent / attend: every proposal slot uses the same weights (its own first-layer bias tells it its
    # depth), so the proposal chain streams one slot's weights instead of k - 1 (docs/beyond.md).
    tie_slots: bool = False
    # paper / blockdiag / medusa on an image model with model.aligned_input: each proposal slot also reads the
    # upsampled guess under the token it guesses (the decoder state read its own position's only).
    ahead: bool = False
    training: str = "frozen"  # frozen | finetune (the base trains jointly with the heads)
    loss: str = "mean"  # mean over heads | sampled (the paper: one random head per batch)
    p1_weight: float = 1.0  # mean loss: p_1 counts this many times one proposal head (1 = plain mean)
    targets: str = "gold"  # gold | distilled (teacher beam outputs) | self (base model's greedy outputs)
    eval_vs_self: bool = True  # also log per-head dev accuracy against the base model's own outputs
    # Translation: proposal heads learn to propose among the N most frequent target tokens only (the ids
    # decode.proposal_vocab=N restricts decoding to): their loss is a softmax over those N, and a target
    # outside them is left out, since such a head could never propose it. p_1 keeps the whole vocabulary.
    proposal_vocab: int | None = None
    # Proposal slots learn p_1's whole distribution at the position they guess (teacher forced on the targets),
    # not only the target token there: self-distillation with soft targets (Medusa-2). With self targets the
    # argmax of that distribution is the target token; the rest says how close the other tokens came.
    soft_targets: bool = False
    # Fine-tuning: p_1's loss adds this many times its KL divergence from the base model's own p_1 (a frozen copy
    # taken before the first step, teacher forced on the same targets), so the shared decoder moves where the
    # proposal slots gain and p_1's outputs stay put. 0: p_1 learns the targets alone (the paper's recipe).
    p1_distill: float = 0.0

    #: What is logged, not trained: left out of cache keys.
    NOT_KEYED = ("eval_vs_self",)

    def validate(self) -> None:
        check(self.k >= 1, f"heads.k must be >= 1 (got {self.k}).")
        # 0 would read as "unset" where the heads are built and silently give the model's d_ff.
        check(self.d_ff is None or self.d_ff >= 1,
               f"heads.d_ff must be >= 1, or null for the model's d_ff (got {self.d_ff}).")
        chained = lookup("head", self.arch, "heads.arch").info.chained
        check(not chained or self.identity_p1,
               f"heads.arch={self.arch} needs heads.identity_p1=true: its first slot reads p_1's token.")
        check(not self.tie_slots or chained,
               f"heads.tie_slots=true needs slots that run one after another ({', '.join(chained_archs())}), not "
               f"heads.arch={self.arch}.")
        check(not self.ahead or not chained,
               f"heads.ahead=true adds to slots that guess from the decoder state alone (paper, blockdiag, medusa), "
               f"not heads.arch={self.arch}.")
        check(not self.ahead or self.identity_p1, "heads.ahead=true needs heads.identity_p1=true.")
        check(self.training in ("frozen", "finetune"),
               f"unknown heads.training {self.training!r}; use frozen or finetune.")
        check(self.loss in ("mean", "sampled"), f"unknown heads.loss {self.loss!r}; use mean or sampled.")
        check(self.p1_weight > 0, f"heads.p1_weight must be > 0 (got {self.p1_weight}); 1 is the plain mean.")
        check(self.targets in TARGETS, f"unknown heads.targets {self.targets!r}; use gold, distilled or self.")
        check(self.proposal_vocab is None or self.proposal_vocab >= 1,
               f"heads.proposal_vocab={self.proposal_vocab}: use a positive number of tokens, or null.")
        check(self.p1_distill >= 0, f"heads.p1_distill must be >= 0 (got {self.p1_distill}); 0 is off.")
        check(self.p1_distill == 0 or (self.training == "finetune" and self.identity_p1),
               "heads.p1_distill keeps a fine-tuned p_1 near the base model's own: it needs heads.training=finetune "
               "and heads.identity_p1=true (or heads.p1_distill=0).")
        check(not self.soft_targets or self.identity_p1,
               "heads.soft_targets=true distils p_1's distributions into the proposal slots, so p_1 must be the base "
               "model's own (heads.identity_p1=true).")


@dataclass
class TrainConfig:
    """One training stage's optimisation and budget (``train:``; the heads stage overlays ``heads_train:``)."""

    lr: float = 2.0e-3  # peak learning rate
    warmup_steps: int = 300
    betas: tuple[float, float] = (0.9, 0.997)  # tensor2tensor's Adam beta2
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # 0 = off
    label_smoothing: float = 0.1
    # Image tasks: each target's (1 - label_smoothing) share spread over neighbouring intensities as a Gaussian of
    # this standard deviation in levels (ordinal soft labels), so that the model learns that near intensities are
    # alike; 0 = the one-hot target.
    ordinal_sigma: float = 0.0
    input_noise: float = 0.0  # share of decoder input tokens swapped for other batch tokens (bpd.training.noise)
    # Image models with model.aligned_upsample=learned: the upsampler's own fit before the base stage's first step
    # (Adam steps of upsampler_batch training patches, squared error, cosine-decayed from upsampler_lr); 0 = none
    # (the upsampler stays bicubic). The heads stages ignore it (their base brings its fitted upsampler).
    upsampler_steps: int = 0
    upsampler_batch: int = 64
    upsampler_lr: float = 1.0e-3
    # A step budget, so the same command trains the same model on any machine (the tiny model's 1,500 steps
    # take about 5 min on 2 CPU cores); the minutes are a safety cap, recorded in the rows when it binds.
    max_steps: int = 1_500
    max_minutes: float | None = 60.0
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
    # A shorter run of this same stage (its .pt or .state.pt) to continue instead of starting at step 0: the
    # schedule does not depend on the budget, so this trains the same model in fewer steps
    # (bpd/training/continuation.py checks that the file exists and that the runs match).
    continue_from: str | None = None

    #: Fields that change how a model is trained, not which model: left out of cache keys.
    NOT_KEYED = ("loader_workers", "continue_from")

    def product(self) -> dict[str, Any]:
        """The fields that determine the trained model (what cache keys hash: ``keyed``)."""
        return keyed(self)

    def validate(self, where: str = "train") -> None:
        # A run that takes no step would still write a "finished" checkpoint that later stages build on.
        check(self.max_steps >= 1, f"{where}.max_steps must be >= 1 (got {self.max_steps}).")
        check(self.max_minutes is None or self.max_minutes > 0,
               f"{where}.max_minutes must be > 0, or null for no time cap (got {self.max_minutes}).")
        check(self.lr > 0, f"{where}.lr must be > 0 (got {self.lr}).")
        check(self.warmup_steps >= 0 and self.grad_accum >= 1,
               f"{where}.warmup_steps must be >= 0 and grad_accum >= 1 "
               f"(got {self.warmup_steps} and {self.grad_accum}).")
        check(self.max_tokens >= 1, f"{where}.max_tokens must be >= 1 (got {self.max_tokens}).")
        check(self.base_lr_scale >= 0,
               f"{where}.base_lr_scale must be >= 0 (0 = the base does not move; got {self.base_lr_scale}).")
        check(self.weight_decay >= 0 and self.grad_clip >= 0 and 0.0 <= self.label_smoothing < 1.0,
               f"{where}.weight_decay and grad_clip must be >= 0 and label_smoothing in [0, 1) (got "
               f"{self.weight_decay}, {self.grad_clip} and {self.label_smoothing}).")
        check(self.ordinal_sigma >= 0, f"{where}.ordinal_sigma must be >= 0 (0 = off; got {self.ordinal_sigma}).")
        check(min(self.eval_every, self.ckpt_every, self.log_every) >= 1,
               f"{where}.eval_every, ckpt_every and log_every must be >= 1.")
        check(self.score_every >= 0, f"{where}.score_every must be >= 0 (0 = never; got {self.score_every}).")
        check(self.upsampler_steps >= 0 and self.upsampler_batch >= 1 and self.upsampler_lr > 0,
               f"{where}.upsampler_steps must be >= 0, upsampler_batch >= 1 and upsampler_lr > 0 (got "
               f"{self.upsampler_steps}, {self.upsampler_batch} and {self.upsampler_lr}).")
        check(0.0 <= self.input_noise < 1.0, f"{where}.input_noise must be in [0, 1) (got {self.input_noise}).")
        check(self.best_on in ("loss", "score"), f"{where}.best_on must be loss or score (got {self.best_on!r}).")
        check(self.best_on == "loss" or self.score_every > 0,
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
    """The heads stage's training config: ``train`` with the non-null ``heads_train`` values over it.

    All but ``continue_from``, which names a run of one stage: ``train.continue_from`` continues the base model's
    run, and the heads stage continues only what ``heads_train.continue_from`` names."""
    values = {f.name: getattr(overlay, f.name) for f in fields(overlay) if getattr(overlay, f.name) is not None}
    out = dataclasses.replace(train, **{"continue_from": None, **values})
    out.validate("heads_train (or train)")
    return out
