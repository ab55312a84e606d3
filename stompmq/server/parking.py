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

A lone beat does not even wake the watcher.  Independent clients' beats arrive one at a time
(15,000 clients beating every 9 s: one each 0.6 ms), and a wake-up per beat costs more than
reading it: trio re-arms the epoll, switches to the task and back, and the process leaves and
re-enters the CPU (tens of microseconds of CPU each on a virtual machine).  So a parked socket's
``SO_RCVLOWAT`` is 2 bytes: a single ``\\n`` waits in the kernel until the heart-beat timer next
visits the connection (``drain``, from ``ClientSession.check``: it visits anyway to send the server's
own beat), or until more bytes come.  A frame, a second beat, the end of the stream or an error
wakes the watcher at once (every STOMP frame is longer than a byte, and the kernel reports the end
of the stream and errors whatever the low-water mark).  The price: a parked peer's silence counts
from the visit that found its last beat, so a silent peer is closed up to one visit late (about
the server's own beat interval), and a parked socket may hold one beat's buffer in the kernel.

Only plain TCP parks: TLS records and WebSocket messages must be decoded by their stream
before anyone can tell a heart-beat, so those connections keep reading through trio.
A parked task is cancelled as any waiting task is (``ClientSession.fail``, shutdown); the
abort takes its socket out of the epoll before the connection closes it.
"""

from __future__ import annotations

import os
import select
import socket
from typing import Protocol

import outcome
import trio

#: Bytes read from a parked socket at once: heart-beats are one or two; a frame's start is
#: handed over and the connection reads the rest itself.
PEEK_BYTES = 4096
#: Ready sockets taken per ``epoll_wait`` (the rest come at the next turn).
BATCH = 1024
#: A parked socket wakes the watcher only with this many bytes: a lone ``\n`` waits for ``drain``.
LOW_WATER = 2


class Parked(Protocol):
    """What the watcher tells a parked connection."""

    def heard(self, nbytes: int, now: float) -> None:
        """``nbytes`` of heart-beats arrived by ``now`` (0: something else arrived, which its
        task is given)."""
        ...


class Socket(Protocol):
    """What parking needs of a socket (stdlib's or trio's)."""

    def fileno(self) -> int: ...

    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...


def heart_beats_only(data: bytes) -> bool:
    """``data`` is nothing but heart-beats (EOLs: ``\\n`` or ``\\r\\n``)."""
    if data.count(b"\n") == len(data):
        return True
    rest = data.replace(b"\r\n", b"\n")
    return rest.count(b"\n") == len(rest)


Entry = tuple[trio.lowlevel.Task, Parked, Socket]


class Parking:
    """The parked sockets of one server and the task that reads their heart-beats."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._parked: dict[int, Entry] = {}

    def __len__(self) -> int:
        return len(self._parked)

    async def park(self, sock: Socket, parked: Parked) -> bytes:
        """Wait until ``sock`` has something besides heart-beats: those bytes (b"" at the end of
        the stream); ``trio.BrokenResourceError`` if reading it failed."""
        fd = sock.fileno()
        task = trio.lowlevel.current_task()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, LOW_WATER)
        self._epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = (task, parked, sock)

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            self._forget(fd)
            return trio.lowlevel.Abort.SUCCEEDED

        data: bytes = await trio.lowlevel.wait_task_rescheduled(abort)
        return data

    def _forget(self, fd: int) -> None:
        sock = self._parked.pop(fd)[2]
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):  # the epoll is closed (shutdown): nothing to undo
            pass
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
        except OSError:  # closed meanwhile: nothing to read on it again
            pass

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the parked sockets as they become readable, forever."""
        task_status.started()
        epoll, parked = self._epoll, self._parked
        while True:
            await trio.lowlevel.wait_readable(epoll.fileno())
            now = trio.current_time()
            for fd, _ in epoll.poll(0, BATCH):
                entry = parked.get(fd)
                if entry is not None:  # (else unparked earlier in this batch)
                    self._read(fd, entry, now)

    def drain(self, fd: int, now: float) -> None:
        """Read what waits in ``fd`` if it is parked (the heart-beat timer's visit: a lone beat
        did not wake the watcher)."""
        entry = self._parked.get(fd)
        if entry is not None:
            self._read(fd, entry, now)

    def _read(self, fd: int, entry: Entry, now: float) -> None:
        """Read the parked socket ``fd``: count heart-beats, hand anything else to its task."""
        try:
            data = os.read(fd, PEEK_BYTES)
        except BlockingIOError:
            return
        except OSError as e:
            error = trio.BrokenResourceError()
            error.__cause__ = e
            result: outcome.Outcome[bytes] = outcome.Error(error)
        else:
            if data and heart_beats_only(data):
                entry[1].heard(len(data), now)
                return
            result = outcome.Value(data)
        entry[1].heard(0, now)  # not silent: its task takes it from here
        self._forget(fd)
        trio.lowlevel.reschedule(entry[0], result)

    def close(self) -> None:
        """Release the epoll (the server stopped: no connection is parked any more)."""
        self._epoll.close()
