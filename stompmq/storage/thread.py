"""The database thread: blocking database calls, one at a time, in order, off the trio thread.

Theory of operation
-------------------
Why one dedicated thread and not ``trio.to_thread``: a database connection must
stay on the thread that made it, SQL databases serialise a connection's work
anyway, and commit groups must reach the disk in ticket order.  One long-lived
thread fed by a FIFO ``queue.SimpleQueue`` gives all three for free: jobs run
one at a time, in the order the trio side submitted them, so a read queued
right behind a commit group sees that group's writes.

Replies go back with ``TrioToken.run_sync_soon``, one per job (a commit group or
a page), never one per message, and land in a :class:`Job` the trio side awaits.
Nothing here knows what a database is: the thread runs callables, and at its
end one last ``finish`` callable (the backend's close).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar, TypeVarTuple

import trio

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Job(Generic[T]):
    """The reply to one job submitted to the database thread, awaited on the trio thread."""

    __slots__ = ("_done", "_value", "_error")

    _value: T  # set only when the job succeeded

    def __init__(self) -> None:
        self._done = trio.Event()
        self._error: Exception | None = None

    def succeed(self, value: T) -> None:
        """Called on the trio thread when the job returned ``value``."""
        self._value = value
        self._done.set()

    def fail(self, error: Exception) -> None:
        """Called on the trio thread when the job raised ``error``."""
        self._error = error
        self._done.set()

    async def wait(self) -> Exception | None:
        """Wait until the job ran; return what it raised, None if it succeeded."""
        await self._done.wait()
        return self._error

    async def result(self) -> T:
        """Wait until the job ran; return its value or raise its error."""
        error = await self.wait()
        if error is not None:
            raise error
        return self._value


class DatabaseThread:
    """Runs jobs one at a time, in submission order, on one thread; replies on the trio thread."""

    def __init__(
        self, name: str, finish: Callable[[], None], token: trio.lowlevel.TrioToken
    ) -> None:
        """``finish`` runs on the thread as its last act, after every job queued before
        ``stop()``, whatever happened before (it releases the database)."""
        self._finish = finish
        self._token = token
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._stopped = trio.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable[[*Ts], T], *args: *Ts) -> Job[T]:
        """Queue ``fn(*args)`` behind every job submitted before it; the Job holds its result."""
        job: Job[T] = Job()

        def run() -> None:  # on the database thread
            try:
                value = fn(*args)
            except Exception as exc:
                self._reply(job.fail, exc)
            else:
                self._reply(job.succeed, value)

        self._jobs.put(run)
        return job

    async def call(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """``fn(*args)`` on the thread, behind every job submitted before it."""
        return await self.submit(fn, *args).result()

    async def stop(self) -> None:
        """Run ``finish`` on the thread (after every queued job) and end the thread."""
        self._jobs.put(None)
        await self._stopped.wait()
        self._thread.join()  # the thread has replied as its last act: this returns at once

    def _main(self) -> None:
        try:
            while (run := self._jobs.get()) is not None:
                run()
        finally:
            try:
                self._finish()
            finally:
                self._reply(self._stopped.set)

    def _reply(self, fn: Callable[[*Ts], object], *args: *Ts) -> None:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass  # nobody is left to tell
