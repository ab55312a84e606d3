"""Resource alarms: publishers wait while the disk is nearly full or the process too large.

Theory of operation
-------------------
``ResourceAlarms.check`` compares the free space of the store's directory with
``--disk-free-limit`` and the process's resident memory with ``--memory-high-watermark``;
the runtime calls it every ``CHECK_SECONDS``.  While either alarm is set, a connection's
reader stops at its next SEND (``Hold.ALARM`` at its read gate, server/flow.py; not at a
``/control`` verb, which may be the purge that frees the space) until every alarm has
cleared.  The frames before that SEND are handled, so a consumer keeps acknowledging and
subscribing, and a connection that both consumes and produces drains until it publishes.
This is the flow control of slow consumers and of a disk that is behind, one more reason not
to read a producer's socket at the same gate, not a new mechanism; a blocked producer's
heart-beats wait in its socket, so it is not closed for silence.

The measurements are functions given to the constructor, so a test can drive the alarms
in virtual time with made-up numbers.  The limits may be changed while the broker runs
(``set_limits``, from the management API): an operator who freed disk space elsewhere, or
who knows the machine has room, clears an alarm without a restart.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

#: Seconds between two checks: quick enough that a filling disk is caught within a second.
CHECK_SECONDS = 1.0
#: The resources alarms watch, in the order they are shown.
RESOURCES = ("disk", "memory")


def disk_free(path: str) -> int:
    """Bytes an unprivileged process may still write in the file system holding ``path``."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def memory_used() -> int:
    """Resident bytes of this process (/proc/self/statm; the peak where there is no /proc)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def total_memory() -> int:
    """Bytes of RAM in the machine."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_limit(watermark: float | None) -> int | None:
    """A watermark of at most 1 is a fraction of the machine's RAM, above 1 a byte count."""
    if watermark is None:
        return None
    return int(watermark * total_memory()) if watermark <= 1 else int(watermark)


class ResourceAlarms:
    """Which resource alarms are set, and a way to wait until none is."""

    def __init__(
        self,
        disk_path: str | None = None,
        disk_free_limit: int | None = None,
        memory_high_watermark: float | None = None,
        *,
        measure_disk: Callable[[str], int] = disk_free,
        measure_memory: Callable[[], int] = memory_used,
    ) -> None:
        self.disk_path = disk_path  # None: the store is not on this machine's disk (memory, PostgreSQL)
        self.disk_free_limit = disk_free_limit
        self.memory_limit = memory_limit(memory_high_watermark)
        self._measure_disk, self._measure_memory = measure_disk, measure_memory
        self.active: set[str] = set()
        #: The latest measurements (None: not measured), for the API and the dashboard.
        self.disk_free: int | None = None
        self.memory_used: int | None = None
        self._cleared = trio.Event()
        self._cleared.set()

    def set_limits(self, disk_free_limit: int | None, memory_high_watermark: float | None) -> None:
        """New limits (None: that alarm off), applied at once."""
        self.disk_free_limit = disk_free_limit
        self.memory_limit = memory_limit(memory_high_watermark)
        self.check()

    def check(self) -> None:
        """Measure, then set or clear each alarm (with a log line when one changes)."""
        if self.disk_path is not None:
            try:
                self.disk_free = self._measure_disk(self.disk_path)
            except OSError as e:  # the directory vanished: keep the last verdict, say why once
                if self.disk_free is not None:
                    log.warning("cannot measure the free disk space of %s: %s", self.disk_path, e.strerror or e)
                self.disk_free = None
        self.memory_used = self._measure_memory()
        limit = self.disk_free_limit
        self._judge("disk", None if limit is None or self.disk_free is None else self.disk_free < limit,
                    f"{_mib(self.disk_free)} free in {self.disk_path}, limit {_mib(limit)} (--disk-free-limit)")
        limit = self.memory_limit
        self._judge("memory", None if limit is None else self.memory_used >= limit,
                    f"{_mib(self.memory_used)} resident, limit {_mib(limit)} (--memory-high-watermark)")

    def _judge(self, resource_name: str, over: bool | None, why: str) -> None:
        if over is None:  # not watched (or not measurable now): clear
            over = False
        if over and resource_name not in self.active:
            if not self.active:  # the first alarm: readers now wait for this event; a second
                self._cleared = trio.Event()  # one must not replace it (nobody would set theirs)
            self.active.add(resource_name)
            log.warning("%s alarm set: %s; publishers are blocked", resource_name, why)
        elif not over and resource_name in self.active:
            self.active.discard(resource_name)
            log.warning("%s alarm cleared: %s", resource_name, why)
            if not self.active:
                self._cleared.set()

    async def wait_cleared(self) -> None:
        """Return once no alarm is set."""
        while self.active:
            await self._cleared.wait()

    def describe(self) -> dict[str, object]:
        """The alarms, limits and measurements, as the management API shows them."""
        return {
            "alarms": [r for r in RESOURCES if r in self.active],
            "disk": {"path": self.disk_path, "free": self.disk_free, "limit": self.disk_free_limit,
                     "alarm": "disk" in self.active},
            "memory": {"used": self.memory_used, "limit": self.memory_limit, "alarm": "memory" in self.active},
        }

    async def run(self) -> None:
        """Check every ``CHECK_SECONDS`` for the broker's lifetime."""
        while True:
            self.check()
            await trio.sleep(CHECK_SECONDS)


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 1024**2:.1f} MiB"
