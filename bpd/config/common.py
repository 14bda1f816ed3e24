"""What every config module shares: the allowed values of enumerated options, the validation error, and
how a config becomes a cache key."""

from __future__ import annotations

import dataclasses
from typing import Any

SPLITS = ("train", "dev", "test")

CRITERIA = ("exact", "topk", "distance")
DTYPES = ("float32", "bfloat16", "float16")
TARGETS = ("gold", "distilled", "self")


def split_parts(split: str) -> tuple[str | None, str]:
    """``"ding:test"`` -> ``("ding", "test")``: another corpus's split, scored with this task's tokenizer; a
    plain ``"test"`` -> ``(None, "test")``."""
    corpus, _, name = split.rpartition(":")
    return corpus or None, name


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def keyed_fields(cfg: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config's fields as cache keys hash them: without ``drop``, and without the fields of its
    ``KEYED_WHEN_SET`` that are at their defaults (options added after models and data were cached, so
    that the earlier keys stay valid)."""
    unset = {k for k, default in getattr(cfg, "KEYED_WHEN_SET", {}).items() if getattr(cfg, k) == default}
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in drop and k not in unset}
