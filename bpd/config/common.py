"""What every config module shares: the allowed values of enumerated options, the validation error, and
how a config becomes a cache key (``SCHEMA``, ``keyed``, ``cache_key``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

SPLITS = ("train", "dev", "test")

CRITERIA = ("exact", "topk", "distance")
DTYPES = ("float32", "bfloat16", "float16")
TARGETS = ("gold", "distilled", "self")
#: What ``decode.engine`` may be (``bpd.decoding.engine``): the eager reference path; the static path's fixed-shape
#: functions run as they are; the same compiled (inductor on a CPU, CUDA graphs on a GPU).
ENGINES = ("eager", "static", "compiled")


def split_parts(split: str) -> tuple[str | None, str]:
    """``"ding:test"`` -> ``("ding", "test")``: another corpus's split, scored with this task's tokenizer; a
    plain ``"test"`` -> ``(None, "test")``."""
    corpus, _, name = split.rpartition(":")
    return corpus or None, name


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


#: The cache and row schema: every cache key and run id hashes it (``cache_key``). Bumped when keys would name
#: something else under the same config: a changed default, an option that now means another product, another
#: key rule. A bump renames, in the same change, the cached products and committed rows it re-keys.
SCHEMA = 2


def config_hash(*parts: Any) -> str:
    """A short stable hash of JSON-able parts."""
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def cache_key(*parts: Any) -> str:
    """The key of a cached product or an evaluation (its run id): ``parts`` under this ``SCHEMA``."""
    return config_hash({"schema": SCHEMA}, *parts)


def keyed(cfg: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config's fields as keys hash them: those that differ from their declared defaults, nested configs
    (``task.corpora``, ``decode.methods``) by their own differing fields, without ``drop`` and the fields a
    class declares ``NOT_KEYED`` (where or how a product is made, not which product).

    Only what a config sets counts, so an option added with a default that does what the code did before leaves
    every key alone: the new option's default is part of the old products' recipe. A default that changes is
    a schema change (``SCHEMA``)."""
    skip = set(drop) | set(getattr(cfg, "NOT_KEYED", ()))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in skip:
            continue
        if dataclasses.is_dataclass(value):
            nested = keyed(value)
            if nested:
                out[f.name] = nested
        elif plain(value) != plain(_default(f)):
            out[f.name] = plain(value)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def plain(value: Any) -> Any:
    """Dataclasses, tuples and lists as JSON holds them, so a value compares equal to its default however given."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
