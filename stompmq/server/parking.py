"""Idle plain TCP connections, parked: one watcher reads every parked socket's heart-beats.

Theory of operation
-------------------
With 15,000 idle clients beating every 10 s, 1,500 heart-beats arrive each second, and each
woke its connection's task: trio re-armed the socket's one-shot epoll registration, switched
to the task, which read one byte, parsed it and waited again.  Here a connection whose last
read was heart-beats only, with nothing of a frame left over (``Connection._reader``), parks:
its socket joins one level-triggered epoll of our own, registered once, and its task waits
for nothing trio has to poll.  One task (``run``) waits for that epoll to be readable, takes
every ready socket at once and reads each: heart-beats (``\\n``, ``\\r\\n``) are counted there
(``Parked.heard``: the bytes and the time, so the peer's silence is measured as before) and the
connection stays parked; anything else (a frame's bytes, the end of the stream, an error)
leaves the epoll and goes to the connection's task, which handles it as its own read.

Many beats a second are read in batches ``REST`` apart.  Independent clients' beats arrive
one at a time (15,000 clients beating every 9 s: one each 0.6 ms), and a wake-up per beat
costs more than reading it: trio re-arms the epoll, switches to the task and back, and the
process leaves and re-enters the CPU (on a virtual machine each wake-up from sleep costs tens
of microseconds of CPU).  So once more than ``BUSY`` sockets a second were ready (measured
over a second or more), the watcher rests after each batch until the next multiple of
``REST`` (``--heart-beat-batch``): at most 1/``REST`` wake-ups a second however many
connections beat, and the heart-beat timer's ticks (50 ms) fall on that grid, so a tick and a
rest's end share a wake-up.  The price, on such a server only: a parked connection's frame
that arrives during a rest waits for its end (up to ``REST``).  Below ``BUSY`` the watcher
waits on the epoll after each batch, and a frame is taken the moment it arrives.

Only plain TCP parks: TLS records and WebSocket messages must be decoded by their stream
before anyone can tell a heart-beat, so those connections keep reading through trio.
A parked task is cancelled as any waiting task is (``Connection.fail``, shutdown); the
abort takes its socket out of the epoll before the connection closes it.
"""

from __future__ import annotations

import math
import os
import select
from typing import Protocol

import outcome
import trio

#: Bytes read from a parked socket at once: heart-beats are one or two; a frame's start is
#: handed over and the connection reads the rest itself.
PEEK_BYTES = 4096
#: Ready sockets taken per ``epoll_wait`` (the rest come at the next turn).
BATCH = 1024
#: Ready sockets a second above which the watcher rests between batches (``run``): under it,
#: a wake-up per beat costs less than 1 % of a core.
BUSY = 200
#: Seconds the watcher rests after a batch when busy, by default (``--heart-beat-batch``): at
#: most 200 batches a second, and at most this long for a parked connection's first frame.
REST = 0.005


class Parked(Protocol):
    """What the watcher tells a parked connection."""

    def heard(self, nbytes: int, now: float) -> None:
        """``nbytes`` of heart-beats arrived at ``now``."""
        ...


def heart_beats_only(data: bytes) -> bool:
    """``data`` is nothing but heart-beats (EOLs: ``\\n`` or ``\\r\\n``)."""
    if data.count(b"\n") == len(data):
        return True
    rest = data.replace(b"\r\n", b"\n")
    return rest.count(b"\n") == len(rest)


class Parking:
    """The parked sockets of one server and the task that reads their heart-beats."""

    def __init__(self, rest: float = REST) -> None:
        self._rest = rest  # 0: never rest
        self._epoll = select.epoll()
        self._parked: dict[int, tuple[trio.lowlevel.Task, Parked]] = {}

    def __len__(self) -> int:
        return len(self._parked)

    async def park(self, fd: int, parked: Parked) -> bytes:
        """Wait until the socket ``fd`` has something besides heart-beats: those bytes (b"" at
        the end of the stream); ``trio.BrokenResourceError`` if reading it failed."""
        task = trio.lowlevel.current_task()
        self._epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = (task, parked)

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            self._forget(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        data: bytes = await trio.lowlevel.wait_task_rescheduled(abort)
        return data

    def _forget(self, fd: int) -> None:
        del self._parked[fd]
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):  # the epoll is closed (shutdown): nothing to undo
            pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the parked sockets as they become readable, forever: when busy, a batch at most
        every ``REST``."""
        task_status.started()
        fd = self._epoll.fileno()
        since, ready, busy = trio.current_time(), 0, False  # ready sockets counted since ``since``
        while True:
            await trio.lowlevel.wait_readable(fd)
            while True:
                now = trio.current_time()
                taken = self._take(now)
                ready += taken
                if now - since >= 1.0:
                    busy = self._rest > 0 and ready > BUSY * (now - since)
                    since, ready = now, 0
                if not (taken and busy):
                    break
                await trio.sleep_until((math.floor(now / self._rest) + 1) * self._rest)

    def _take(self, now: float) -> int:
        """Read every ready parked socket (up to ``BATCH``) at ``now``; how many were ready."""
        parked = self._parked
        ready = self._epoll.poll(0, BATCH)
        for fd, _ in ready:
            entry = parked.get(fd)
            if entry is None:  # unparked earlier in this batch
                continue
            try:
                data = os.read(fd, PEEK_BYTES)
            except BlockingIOError:
                continue
            except OSError as e:
                error = trio.BrokenResourceError()
                error.__cause__ = e
                self._forget(fd)
                trio.lowlevel.reschedule(entry[0], outcome.Error(error))
                continue
            if data and heart_beats_only(data):
                entry[1].heard(len(data), now)
                continue
            self._forget(fd)
            trio.lowlevel.reschedule(entry[0], outcome.Value(data))
        return len(ready)

    def close(self) -> None:
        """Release the epoll (the server stopped: no connection is parked any more)."""
        self._epoll.close()
