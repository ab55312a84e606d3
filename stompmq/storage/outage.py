"""A store outage as the operator sees it: one log line when it starts, one when it ends.

Why a record of its own: during an outage every commit retry, page read, lease renewal and
sequence refill fails, several times a second; logging each drowned the one fact an operator
needs (the store is down since T, and for how long it was) in hundreds of lines.  Every
failure and every success of the database reports here instead: the first failure starts
the outage (logged with its error), the first success after it ends it (logged with its
length), and what happened in between only counts.  ``count`` and ``seconds()`` feed
/metrics.
"""

from __future__ import annotations

import logging

import trio

log = logging.getLogger(__name__)


class Outage:
    """Whether the store is down now, since when, and how often and how long it was down."""

    __slots__ = ("name", "since", "failures", "count", "_past_seconds")

    def __init__(self, name: str) -> None:
        self.name = name  # the store, as logs name it (no password)
        self.since: float | None = None  # trio time of the first failure of the outage going on
        self.failures = 0  # failed attempts in the outage going on
        self.count = 0  # outages since start
        self._past_seconds = 0.0  # of the outages that ended

    def failed(self, error: BaseException) -> None:
        """A write or read failed: the store is down (from now, unless it was already)."""
        self.failures += 1
        if self.since is None:
            self.since = trio.current_time()
            self.count += 1
            log.warning("store %s is unavailable, retrying (receipts wait for it): %s", self.name, error)

    def succeeded(self) -> None:
        """A write or read succeeded: an outage going on is over."""
        since = self.since
        if since is not None:
            seconds = trio.current_time() - since
            self._past_seconds += seconds
            log.warning("store %s is available again after %.1f s (%d failed attempts)",
                        self.name, seconds, self.failures)
            self.since, self.failures = None, 0

    def seconds(self) -> float:
        """Seconds the store was down since start, the outage going on included."""
        since = self.since
        return self._past_seconds + (trio.current_time() - since if since is not None else 0.0)
