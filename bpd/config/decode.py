"""Decoding: block sizes, acceptance criteria, each method's own options (``decode.methods``, read by their owners
in ``bpd.config.methods``) and the output-length rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from bpd.config.common import CRITERIA, ENGINES, SPLITS, check, split_parts
from bpd.config.methods import MethodsConfig, check_methods
from bpd.config.registry import entries
from bpd.config.task import other_corpora

#: What ``decode.proposal_precision`` may be (``ProposalHeads.set_proposal_precision``).
PROPOSAL_PRECISIONS = ("float32", "int8")


@dataclass
class CriterionConfig:
    """One acceptance criterion, decoded at every k of ``decode.ks`` and every minimum block size."""

    name: str = "exact"  # exact | topk | distance
    param: float | None = None  # topk: n (default 2); distance: epsilon (default 2)
    min_block_sizes: list[int] = field(default_factory=lambda: [1])


@dataclass
class DecodeConfig:
    """What the evaluation stage decodes and how."""

    split: str = "test"  # or another corpus's held-out set, scored out of domain: ding:test, debian:test
    n_examples: int | None = None  # null = the whole split
    # The first example decoded: a long evaluation runs as chunks (first=0, n, 2n, ... with n_examples=n), each its
    # own run id and rows, so a killed one resumes at the chunk it was in (analysis/pool_chunks.py pools them).
    first: int = 0
    batch_size: int = 1  # the paper's wall-clock setting; > 1 works too
    ks: list[int] = field(default_factory=lambda: [2, 4, 8])  # decode-time k (<= heads.k)
    criteria: list[CriterionConfig] = field(
        default_factory=lambda: [CriterionConfig("exact"), CriterionConfig("topk", 2.0)]
    )
    max_len_a: float = 1.5  # translation: output limit = a * source length + max_len_extra
    max_len_extra: int = 10
    dtype: str = "float32"  # float32 | bfloat16
    threads: int | None = None  # CPU threads while decoding (null = unchanged)
    # Each batch is timed this many times per decoder, interleaved with greedy's: the speedup's paired interval
    # (1: one pass, no interval). Outputs and quality come from the first.
    timing_repeats: int = 2
    proposal_vocab: int | None = None  # translation: heads propose among the N most frequent target tokens
    # int8: the recurrent/attend proposal chain multiplies by int8 weights (CPU; exact decoding stays greedy's,
    # k-hat may move: docs/benchmark.md)
    proposal_precision: str = "float32"
    # eager | static | compiled: the path greedy and blockwise decoding take (bpd.decoding.engine); methods
    # without a static path (beam, trees, rescoring, draft models) decode eagerly, and their rows say so
    engine: str = "eager"
    # Each method's own options, by method name: {beam: {size: 4, alpha: 0.6}, naive_greedy: false, tree: [3x2x1,
    # beam4], rescored: [{beam: 4, weight: 0.5}]} (bpd/config/methods/)
    methods: MethodsConfig = field(default_factory=MethodsConfig)
    skip_existing: bool = True  # an evaluation whose run id already has rows is not redone

    #: What a run id leaves out: whether to redo a run is not part of what it is (a redo keeps the id it redoes),
    #: nor is how often it is timed (the same outputs).
    NOT_KEYED = ("skip_existing", "timing_repeats")

    def validate(self, trained_k: int | None = None) -> None:
        corpus, split = split_parts(self.split)
        other = entries("corpus")[corpus].info if corpus in entries("corpus") else None
        check(split in SPLITS and (corpus is None or (other is not None and other.scores_others
                                                      and split in other.other_splits)),
               f"unknown decode.split {self.split!r}; use test, dev or train, or another corpus's held-out "
               f"sentences as {' or '.join(c + ':test' for c in other_corpora('translation'))} (':dev' too), or "
               "the photo corpus's face test set as faces:test (its whole test split: photos:test).")
        check(self.batch_size >= 1, f"decode.batch_size must be >= 1 (got {self.batch_size}).")
        check(self.first >= 0, f"decode.first must be >= 0, the index of the first example decoded (got {self.first}).")
        check(self.n_examples is None or self.n_examples >= 1,
               f"decode.n_examples must be >= 1, or null for the whole split (got {self.n_examples}).")
        check(min(self.max_len_a, self.max_len_extra) >= 0 and self.max_len_a + self.max_len_extra > 0,
               f"decode.max_len_a and max_len_extra must be >= 0, not both 0 (got {self.max_len_a} and "
               f"{self.max_len_extra}): the output limit is a * source length + extra tokens.")
        check(self.threads is None or self.threads >= 1,
               f"decode.threads must be >= 1, or null to leave them unchanged (got {self.threads}).")
        check(self.timing_repeats >= 1,
               f"decode.timing_repeats must be >= 1 (1 = one timed pass, no interval; got {self.timing_repeats}).")
        check(self.dtype in ("float32", "bfloat16"), f"unknown decode.dtype {self.dtype!r}; use float32 or bfloat16.")
        check(self.proposal_vocab is None or self.proposal_vocab >= 1,
               f"decode.proposal_vocab={self.proposal_vocab}: use a positive number of tokens, or null.")
        check(self.proposal_precision in PROPOSAL_PRECISIONS,
               f"decode.proposal_precision={self.proposal_precision!r}: use one of {', '.join(PROPOSAL_PRECISIONS)}.")
        check(self.engine in ENGINES, f"unknown decode.engine {self.engine!r}; use one of {', '.join(ENGINES)}.")
        check(bool(self.ks), "decode.ks must list at least one k.")
        bad = [k for k in self.ks if k < 1 or (trained_k is not None and k > trained_k)]
        check(not bad,
               f"decode.ks {bad} not in 1..{trained_k} (the trained heads.k); lower decode.ks or raise heads.k.")
        for c in self.criteria:
            check(c.name in CRITERIA, f"unknown acceptance criterion {c.name!r}; choose one of {', '.join(CRITERIA)}.")
            check(all(m >= 1 for m in c.min_block_sizes), f"decode.criteria min_block_sizes must be >= 1 ({c}).")
        check_methods(self.methods, "decode.methods")

    def fit_ks(self, trained_k: int) -> list[int]:
        """Drop the decode-time ks above ``trained_k`` when at least one k fits, and return the dropped ones: a
        sweep over ``heads.k`` with the default ``decode.ks`` decodes each job at the ks its heads allow instead of
        aborting at its first job. When none fits, nothing is dropped and ``validate`` refuses the config."""
        kept = [k for k in self.ks if k <= trained_k]
        dropped = [k for k in self.ks if k > trained_k]
        if kept and dropped:
            self.ks = kept
            return dropped
        return []

    def output_limit(self, src_len: int) -> int:
        """Translation output length limit a * source length + b (fairseq's max_len_a / max_len_b): a weak
        model's degenerate repetitions stop early instead of costing tens of wasted steps per sentence."""
        return output_limit(src_len, self.max_len_a, self.max_len_extra)


def output_limit(src_len: int, a: float = 1.5, b: int = 10) -> int:
    """The one output-length rule for sequences without a fixed length: ``int(a * src_len) + b``."""
    return int(a * src_len) + b
