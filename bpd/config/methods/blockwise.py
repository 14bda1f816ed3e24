"""The paper's blockwise chain: it takes the shared block sizes and criteria (``decode.ks``, ``decode.criteria``)
and no options of its own."""

from __future__ import annotations

from bpd.config.common import ENGINES
from bpd.config.methods import Role, declare

declare("blockwise", Role.CHAIN, "chain (the paper)", 30, exact=True, engines=ENGINES)
