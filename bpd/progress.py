"""Progress bars that suit where the output goes. A module of its own, importing nothing of bpd, so that
the decoders below the result rows (``bpd.tracking``) can show progress too."""

from __future__ import annotations

import sys


def progress_interval() -> float:
    """tqdm refresh interval: lively in a terminal, sparse in a log file (one line every 30 s)."""
    return 0.1 if sys.stderr.isatty() else 30.0
