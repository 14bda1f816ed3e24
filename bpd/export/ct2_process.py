"""A CTranslate2 peer that decodes in a worker process of its own, driven call by call over a pipe.

Why a process: a CTranslate2 translator alive in the process slows our ``torch.compile``d decode path several
times over (results/bench-peers/FINDINGS.md; the two libraries' OpenMP runtimes are the likely cause), so the
process that times our decoders never imports ctranslate2. The worker is started by ``spawn`` (a fresh
interpreter, nothing inherited from the parent's thread pools), loads the converted model on the thread count
the parent gives it (``ct2_translator``: ``intra_threads``, one ``inter_threads``) and decodes one batch per
request with ``ct2_greedy``, so the parent's round-robin still interleaves it with our decoders batch by batch.

The conversion runs apart too (``convert_apart``): CTranslate2's converter imports ctranslate2 itself.

It times each decode itself (``timed``): the pipe's round trip and the pickling are not CTranslate2's decoding
and would be counted against it only because it runs apart.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
import weakref
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_SPAWN = multiprocessing.get_context("spawn")
#: How long a worker may take to stop before it is killed.
STOP_TIMEOUT_S = 10.0


class CT2Process:
    """Greedy decoding (``bpd.decoding.peers.ct2_greedy``) of the converted model in ``ct2_dir`` in a worker
    process: a peer (``(sources, max_len) -> tokens``) that also reports the worker's time for a call. The worker
    stops with ``close()``, when this object is collected, or when the parent exits (a daemon process)."""

    def __init__(self, ct2_dir: str | Path, vocab: Sequence[str], eos_id: int, threads: int) -> None:
        self._conn, child = _SPAWN.Pipe()
        self._proc = _SPAWN.Process(target=serve, args=(child, str(ct2_dir), list(vocab), int(eos_id), int(threads)),
                                    name=f"ct2:{Path(ct2_dir).name}", daemon=True)
        self._proc.start()
        child.close()  # the worker's end lives in the worker: its exit then reads as EOF here
        self._finalizer = weakref.finalize(self, _stop, self._conn, self._proc)
        #: The worker's process id, which it reports once its model is loaded.
        self.pid: int = self._answer()

    def timed(self, sources: Sequence[Sequence[int]], max_len: int) -> tuple[list[list[int]], float]:
        """The batch's outputs and the seconds the worker's decode of it took."""
        self._conn.send(([[int(t) for t in s] for s in sources], int(max_len)))
        tokens, seconds = self._answer()
        return tokens, seconds

    def __call__(self, sources: Sequence[Sequence[int]], max_len: int) -> list[list[int]]:
        return self.timed(sources, max_len)[0]

    def close(self) -> None:
        self._finalizer()

    def _answer(self) -> Any:
        try:
            ok, value = self._conn.recv()
        except EOFError:
            self._proc.join(STOP_TIMEOUT_S)
            raise RuntimeError(f"the CTranslate2 worker {self._proc.name} exited (code {self._proc.exitcode})"
                               ) from None
        if not ok:
            raise RuntimeError(f"the CTranslate2 worker {self._proc.name} failed:\n{value}")
        return value


def serve(conn: Connection, ct2_dir: str, vocab: list[str], eos_id: int, threads: int) -> None:
    """The worker: load the translator, answer its pid, then decode each ``(sources, max_len)`` request until
    ``None`` or the parent's end closes. Every answer is ``(ok, value)``; a failure sends its traceback."""
    from bpd.decoding.peers import ct2_greedy
    from bpd.export.ct2 import ct2_translator

    try:
        peer = ct2_greedy(ct2_translator(ct2_dir, threads), vocab, eos_id)
    except Exception:
        conn.send((False, traceback.format_exc()))
        return
    conn.send((True, os.getpid()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        try:
            t0 = time.perf_counter()
            tokens = peer(*request)
            conn.send((True, (tokens, time.perf_counter() - t0)))
        except Exception:
            conn.send((False, traceback.format_exc()))


def _stop(conn: Connection, proc: multiprocessing.process.BaseProcess) -> None:
    try:
        conn.send(None)
    except OSError:  # the worker is gone already
        pass
    proc.join(STOP_TIMEOUT_S)
    if proc.is_alive():
        proc.kill()
        proc.join()
    conn.close()


def convert_apart(hf_dir: str | Path, out_dir: str | Path, quantization: str) -> Path:
    """``convert_ct2`` in a spawned process of its own, so that the caller's process never loads ctranslate2."""
    from bpd.export.ct2 import convert_ct2

    with ProcessPoolExecutor(max_workers=1, mp_context=_SPAWN) as pool:
        return pool.submit(convert_ct2, hf_dir, out_dir, quantization).result()
