"""What the machine was doing while something was timed: how much CPU other processes took.

A speedup measured while another job runs can be far off the quiet machine's: with every core already given
to the decoder's threads, a busy neighbour makes the threads wait for each other, and greedy's many small
steps pay that wait more often than blockwise's fewer, larger rounds (issue 46: 1.68x at k̂ 1.15). Pairing
cancels a load that comes and goes, not a steady one, so the timed rows carry the load itself and are
flagged when it took CPU the decoder needed.

On Linux the busy time of all cores comes from ``/proc/stat`` and this process's own CPU time from
``time.process_time`` (all its threads); their difference over the wall time is the CPU, in cores, that the
rest of the machine used. Elsewhere only the load average is known.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
#: Other processes may use this much of the cores the timed threads need before a row is called busy: below
#: it, a shell or a logger; above it, a neighbour that takes turns with the decoder's threads.
BUSY_SPILL_CORES = 0.25


@dataclass(frozen=True)
class CpuSample:
    wall_s: float
    own_cpu_s: float
    busy_s: float | None  # all cores' busy time since boot (None: not on Linux)
    cores: int


def sample(stat: Path = PROC_STAT) -> CpuSample:
    """The counters a load measurement differences: wall time, this process's CPU time, the cores' busy time."""
    busy, cores = None, os.cpu_count() or 1
    try:
        lines = stat.read_text().splitlines()
        fields = [int(x) for x in lines[0].split()[1:]]
        # user nice system idle iowait irq softirq steal (guest time is already inside user): idle and iowait
        # are the two that are not busy.
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit()) or cores
    except (OSError, ValueError, IndexError):
        pass
    return CpuSample(time.perf_counter(), time.process_time(), busy, cores)


def load_columns(start: CpuSample, end: CpuSample, threads: int) -> dict[str, float | int | bool | None]:
    """The row columns of the load between two samples: ``load_other_cores`` (the CPU, in cores, that other
    processes used on average), ``load_self_cores`` (this process's), ``load_cores``, ``loadavg_1m`` and
    ``timing_busy``: whether the others spilled onto the cores the ``threads`` timed threads needed."""
    wall = max(end.wall_s - start.wall_s, 1e-9)
    own = (end.own_cpu_s - start.own_cpu_s) / wall
    other = None
    if start.busy_s is not None and end.busy_s is not None:
        # Clock ticks are coarse (10 ms): a short interval may read a little below this process's own time.
        other = max(0.0, (end.busy_s - start.busy_s) / wall - own)
    try:
        loadavg = os.getloadavg()[0]
    except OSError:
        loadavg = None
    cores = end.cores
    if other is not None:
        busy = other > max(0, cores - threads) + BUSY_SPILL_CORES
    else:  # no /proc/stat: the run queue beyond our threads, from the load average
        busy = loadavg is not None and loadavg - threads > max(0, cores - threads) + BUSY_SPILL_CORES
    return {"load_other_cores": None if other is None else round(other, 3), "load_self_cores": round(own, 3),
            "load_cores": cores, "loadavg_1m": None if loadavg is None else round(loadavg, 2), "timing_busy": busy}
