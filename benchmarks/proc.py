"""What a process uses, read from /proc: CPU seconds (of a process, a thread, or a process and
its children) and resident memory, for the benchmarks' per-message figures.
"""

from __future__ import annotations

import os
import threading
import time

#: The kernel's clock ticks per second: the unit of /proc/PID/stat's CPU fields.
TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(path: str) -> list[str]:
    """The fields of a /proc ``stat`` file after the command name (which may hold spaces):
    index 1 is the parent's pid, 11 and 12 utime and stime, 13 and 14 the waited-for children's."""
    with open(path) as f:
        return f.read().rpartition(")")[2].split()


def cpu_seconds(pid: int, thread: int | None = None, children: bool = False) -> float:
    """User + system CPU seconds of process ``pid`` so far (of its thread ``thread`` only, if
    given; with the children it waited for, if ``children``): on a loaded machine CPU per
    message is much steadier than a wall-clock rate."""
    fields = stat_fields(f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat")
    return sum(int(x) for x in fields[11:15 if children else 13]) / TICKS


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The broker's resident memory now (VmRSS) or at its peak so far (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def sample_rss(pid: int, samples: list[tuple[float, int]], stop: threading.Event) -> None:
    start = time.monotonic()
    while not stop.wait(1.0):
        samples.append((time.monotonic() - start, rss_kib(pid)))


def tree_cpu_seconds(pid: int) -> float:
    """CPU used so far by process ``pid`` and by every process it started (those that exited
    included): a PostgreSQL server's postmaster with its backends, WAL writer and checkpointer."""
    total = cpu_seconds(pid, children=True)
    for entry in os.listdir("/proc"):
        try:
            if int(stat_fields(f"/proc/{entry}/stat")[1]) == pid:
                total += cpu_seconds(int(entry), children=True)
        except (OSError, ValueError):
            continue  # not a process, or one that exited meanwhile
    return total
