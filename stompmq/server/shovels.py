"""Declared shovels: the broker runs each one as a task of its own and restarts it after faults.

Theory of operation
-------------------
A declaration (``transfer.Declaration``: from, to, prefetch) comes from the management API
(``PUT /api/shovels/{name}``) or a definitions file's ``[[shovels]]``; it is stored as a
``broker_meta`` row (a ``SaveShovel`` row, ``Store.write``), so a restarted broker runs it again
(``Recovery.facts(SaveShovel)``).  Each runs the very transfer loop of ``stompmq shovel``
(``transfer.Shovel``): a message is ACKed at the source only after the destination's RECEIPT,
and what a broken session left unconfirmed the source delivers again, flagged
``shovel-redelivered``.

A fault (either broker down, a connection lost, an ERROR frame) ends the session: the shovel
is ``failed`` with the error, waits (``INITIAL_BACKOFF`` doubling up to ``MAX_BACKOFF``), and
connects again (``starting``); a subscribed session is ``running`` and resets the wait.  The
first failure of an episode is logged as a warning, the retries only at debug level, the
recovery once more.  A URL's password never reaches a log line or an answer
(``Declaration.shown``; the client's errors name only host and port).

Shovels start once the broker listens (a shovel may read from the broker itself) and stop
with it; declaring a shovel again with other fields restarts it, with the same ones changes
nothing.  On a database several brokers share, each runs the shovels stored when it started
and those declared through it: more than one may consume the same source, which loses and
duplicates nothing (each message goes to one of them).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import trio

from ..client import ClientError, client_error
from ..storage.base import Store
from ..storage.rows import SaveShovel
from ..transfer import Declaration

log = logging.getLogger(__name__)

#: Seconds a shovel waits after its first failure; each further failure doubles it, up to the most.
INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: Seconds between the samples its rate is measured over (a 5-10 s window).
SAMPLE_SECONDS = 5.0


class RunningShovel:
    """One declared shovel: its sessions, its state and its counters."""

    def __init__(self, declaration: Declaration) -> None:
        self.declaration = declaration
        self.shovel = declaration.shovel()
        self.shovel.started = self._started
        self.state = "starting"
        self.error: str | None = None
        self.failures = 0  # in the current episode
        self.backoff = INITIAL_BACKOFF
        self.scope = trio.CancelScope()
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), 0)], maxlen=2)

    def describe(self) -> dict[str, Any]:
        shovel = self.shovel
        then, before = self._samples[0]
        rate = (shovel.moved - before) / max(time.monotonic() - then, 1e-3)
        return {**self.declaration.shown(), "state": self.state, "error": self.error, "moved": shovel.moved,
                "flagged": shovel.flagged, "in_flight": len(shovel.outstanding), "rate": round(rate, 1)}

    async def run(self) -> None:
        with self.scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._sample)
                await self._supervise()

    async def _sample(self) -> None:
        while True:
            await trio.sleep(SAMPLE_SECONDS)
            self._samples.append((time.monotonic(), self.shovel.moved))

    def _started(self) -> None:
        if self.failures:
            log.info("shovel %s running again after %d failed attempts", self.declaration.name, self.failures)
        self.state, self.error, self.failures, self.backoff = "running", None, 0, INITIAL_BACKOFF

    async def _supervise(self) -> None:
        name = self.declaration.name
        while True:
            self.state = "starting"
            try:
                await self.shovel.run()
                error = "the session ended"  # a declared shovel has no --max nor --until-empty
            except Exception as e:  # noqa: BLE001 - a fault of one shovel must not end the broker
                known = client_error(e)
                if known is None:
                    log.exception("shovel %s failed unexpectedly", name)
                error = str(known) if known is not None else f"{type(e).__name__}: {e}"
            self.state, self.error = "failed", error
            self.failures += 1
            if self.failures == 1:
                log.warning("shovel %s failed: %s; connecting again in %g s, then every %g s at most",
                            name, error, self.backoff, MAX_BACKOFF)
            else:
                log.debug("shovel %s failed again (%d): %s", name, self.failures, error)
            await trio.sleep(self.backoff)
            self.backoff = min(self.backoff * 2, MAX_BACKOFF)


class Shovels:
    """The broker's declared shovels, stored through ``store`` and run in ``run``'s nursery."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.shovels: dict[str, RunningShovel] = {}
        self._nursery: trio.Nursery | None = None

    def recover(self, stored: dict[str, dict[str, Any]]) -> None:
        """The shovels the store kept (a definitions file's are declared as it is applied)."""
        for name, fields in sorted(stored.items()):
            try:
                self.shovels[name] = RunningShovel(Declaration.parse(name, fields))
            except ClientError as e:  # written by another version, say: the others still run
                log.error("stored shovel %s is not valid and does not run: %s", name, e)

    def declare(self, declaration: Declaration) -> None:
        """Store and run ``declaration``, replacing a shovel of its name unless it is the same."""
        name = declaration.name
        running = self.shovels.get(name)
        if running is not None and running.declaration == declaration:
            return
        self.store.write(SaveShovel(name, declaration.stored()))
        if running is not None:
            running.scope.cancel()
        self.shovels[name] = running = RunningShovel(declaration)
        if self._nursery is not None:
            self._nursery.start_soon(running.run)
        log.info("shovel %s declared: from %s to %s", name, *(declaration.shown()[k] for k in ("from", "to")))

    def delete(self, name: str) -> bool:
        """Stop shovel ``name`` and forget it; False if there is none."""
        running = self.shovels.pop(name, None)
        if running is None:
            return False
        running.scope.cancel()
        self.store.write(SaveShovel(name, None))
        log.info("shovel %s deleted", name)
        return True

    async def run(self) -> None:
        """Run every shovel, and those declared later, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for running in self.shovels.values():
                nursery.start_soon(running.run)
            await trio.sleep_forever()
