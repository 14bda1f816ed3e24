"""A resume checkpoint on request: SIGUSR1 makes training write its resume state at the next step boundary and
go on. Periodic checkpoints lose up to ``ckpt_every`` steps when a process is stopped from outside; a job that
knows it will be stopped (a sitting that ends, a batch job near its time limit: ``sbatch --signal=USR1@120``)
loses nothing this way. The signal only sets a flag: the save happens between steps, where the weights and the
optimizer state are whole.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class CheckpointRequests:
    """Installs the SIGUSR1 handler for the ``with`` block (main thread only: Python delivers signals there;
    elsewhere, and on systems without SIGUSR1, requests are simply never made) and restores the previous one."""

    def __init__(self) -> None:
        self._pending = False
        self._previous: object = None
        self._installed = False

    def __enter__(self) -> CheckpointRequests:
        if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGUSR1, self._request)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGUSR1, self._previous)  # type: ignore[arg-type]
            self._installed = False

    def _request(self, signum: int, frame: FrameType | None) -> None:
        self._pending = True

    def take(self) -> bool:
        """Whether a checkpoint was asked for since the last call."""
        pending, self._pending = self._pending, False
        return pending
