"""Locks that keep two jobs from making the same product: a cached model, a run's rows.

Two sweeps sharing ``outputs/cache`` (two multiruns, SLURM array jobs whose settings share a base model)
would otherwise both train the same model into the same files. A ``FileLock`` is a lock file created with
``O_CREAT | O_EXCL`` (atomic on local disks and on NFS), holding the owner's host, pid and start time,
its modification time refreshed by a heartbeat while it is held. A waiter takes over a lock that is stale:
its heartbeat stopped for ``stale_s`` (the owner was killed, or its node died), or its owner is a dead
process on this host. Kernel ``flock`` locks would need no staleness rule, but many cluster filesystems
do not support them.

``exclusive(path)`` is the pattern the stages use: every process (every DDP rank) of one job waits while
rank 0 polls for the lock, then all of them learn whether another job finished the product meanwhile.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from bpd.training import distributed as dist


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class FileLock:
    def __init__(self, path: str | Path, stale_s: float = 120.0, heartbeat_s: float = 20.0) -> None:
        self.path = Path(path)
        self.stale_s, self.heartbeat_s = stale_s, heartbeat_s
        self._stop: threading.Event | None = None
        self._token = ""

    # -- taking and giving back ----------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lock if it is free or stale; False if a live owner holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):  # a second try after taking over a stale lock
            self._token = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()})
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._take_over_if_stale():
                    return False
                continue
            with os.fdopen(fd, "w") as f:
                f.write(self._token)
            self._start_heartbeat()
            return True
        return False

    def acquire(self, poll_s: float = 2.0, log: Callable[[str], None] = print) -> None:
        waited = False
        while not self.try_acquire():
            if not waited:
                log(f"waiting for {self.path.name}: {self.owner() or 'another job'} holds it")
                waited = True
            time.sleep(poll_s)

    def release(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        try:
            if self.path.read_text() == self._token:  # never remove a lock another job has taken over
                self.path.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- staleness ------------------------------------------------------------------------------------------
    def owner(self) -> str | None:
        try:
            info = json.loads(self.path.read_text())
            return f"pid {info['pid']} on {info['host']}"
        except (OSError, ValueError, KeyError):
            return None

    def _take_over_if_stale(self) -> bool:
        try:
            text, age = self.path.read_text(), time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True  # released meanwhile: try again
        try:
            info = json.loads(text)
            dead = info["host"] == socket.gethostname() and not _alive(int(info["pid"]))
        except (ValueError, KeyError):
            dead = age > 5.0  # unreadable: a lock file cut while being written, by a killed owner
        if not (dead or age > self.stale_s):
            return False
        # Move it aside under a unique name, then check that what moved is what was judged stale (another
        # waiter may have taken over in between: then put the fresh lock back).
        aside = self.path.with_name(f"{self.path.name}.stale-{os.getpid()}-{time.time_ns()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return True
        if aside.read_text() != text:
            os.replace(aside, self.path)
            return False
        aside.unlink()
        print(f"warning: took over the stale lock {self.path.name} (held by {text}; "
              f"{'its process is gone' if dead else f'no heartbeat for {age:.0f} s'})")
        return True

    def _start_heartbeat(self) -> None:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_s):
                try:
                    os.utime(self.path)
                except FileNotFoundError:
                    return

        threading.Thread(target=beat, daemon=True).start()
        self._stop = stop


@contextmanager
def exclusive(lock_path: str | Path, done: Callable[[], bool], poll_s: float = 2.0) -> Iterator[bool]:
    """Hold ``lock_path`` (rank 0 of this job holds it for all ranks) and yield whether the product is
    already ``done`` (another job made it while this one waited): the caller then skips making it."""
    main = dist.world_size() <= 1 or torch.distributed.get_rank() == 0
    lock = FileLock(lock_path) if main else None
    waited = False
    while True:  # every rank polls with rank 0, so no collective waits longer than one poll
        got = dist.broadcast_object(lock.try_acquire() if lock else None)
        if got:
            break
        if main and not waited:
            print(f"waiting for {Path(lock_path).name}: {lock.owner() or 'another job'} is making it")
            waited = True
        time.sleep(poll_s)
    try:
        yield dist.broadcast_object(done() if main else None)
    finally:
        if lock:
            lock.release()
