"""Draft-model speculative decoding: its rows come with a draft model (``draft.model``, trained by its own
stage), at every k >= 2 and criterion; it takes no options here."""

from __future__ import annotations

from bpd.config.common import ENGINES
from bpd.config.methods import Role, declare

declare("draft", Role.BEYOND, "draft model", 60, auxiliary=True, exact=True, engines=ENGINES)
