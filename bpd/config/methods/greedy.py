"""Greedy decoding, the reference of every ratio, and greedy without a cache, a weak baseline (asked for with
``decode.methods.naive_greedy=true``; the benchmark times it by default, at batch 1)."""

from __future__ import annotations

from bpd.config.common import ENGINES
from bpd.config.methods import Role, declare

declare("greedy", Role.REFERENCE, "greedy", 0, exact=True, engines=ENGINES)
declare("naive_greedy", Role.BASELINE, "greedy without a cache", 10, options=bool, bench_default=lambda: True,
        exact=True, quadratic=True)
