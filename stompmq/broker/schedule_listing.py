"""Schedules as the management API, ``stompmq admin`` and the dashboard show them: listed, cancelled.

Theory of operation
-------------------
Every delayed message is a schedule here, as every delayed message is a job in ActiveMQ's
scheduler: a one-off (``delay``, ``deliver-at``, ``AMQ_SCHEDULED_DELAY`` or an absolute time
alone) fires once, a recurring one (schedules.py) fires until its count runs out.  So the listing
is the ``delayed_messages`` rows of a vhost in next-firing order, a range of their due-time
index read in pages (``Store.browse_due``, which claims nothing on a shared store), and a
schedule's id is ``scheduledJobId`` (a recurring schedule keeps it across its rows) or, for a
one-off, its sequence number.  A store that keeps nothing has every delayed message in memory
(``Delayed.heap``): the listing reads that.

A cancel finds the row by id (a walk over the rows in due order: the cold path of an operator,
``SCAN_LIMIT`` rows at most) and withdraws it (``Delayed.withdraw``): out of memory if it is
there, deleted from the store either way, so the firing never happens.  A row that fired while
the cancel looked is ``MOVED``: its next row has another sequence number, and the caller looks
again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ..storage.base import Store, StoredMessage
from .control import Deferred
from .delays import Delayed, DueWalk, Key
from .send_headers import CRON, PERIOD, SCHEDULE_ID, SCHEDULE_LEFT

#: A cancel's answers: done; no schedule has the id; it fired meanwhile (look again).
CANCELLED, MISSING, MOVED = "cancelled", "missing", "moved"
#: A cancel's answer and the schedule's queue (None: no such schedule).
Cancel = tuple[str, str | None]
#: Rows a cancel reads at most while looking for its id, and in one read.
SCAN_LIMIT, SCAN_PAGE = 1_000_000, 1000


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One schedule: where it goes, when it fires next and how often after."""

    id: str
    queue: str
    next_at: int  # epoch ms of the next firing
    remaining: int | None  # copies still to come, the next one included (None: no end)
    period: int  # ms between copies (0: none)
    cron: str | None
    priority: int
    body_bytes: int


@dataclass(frozen=True, slots=True)
class SchedulePage:
    rows: list[ScheduleRow]
    after: Key | None  # the key to ask the next page after (None: this was the last page)


def schedule_id(msg: StoredMessage) -> str:
    return msg.headers.get(SCHEDULE_ID) or str(msg.seq)


def schedule_row(msg: StoredMessage) -> ScheduleRow:
    assert msg.deliver_at is not None
    headers = msg.headers
    left = headers.get(SCHEDULE_LEFT)
    cron = headers.get(CRON)
    if left is None:
        remaining: int | None = 1
    else:
        remaining = None if cron is not None or left.startswith("-") else int(left) + 1
    period = int(headers.get(PERIOD, "0")) if left is not None else 0
    return ScheduleRow(schedule_id(msg), msg.queue, msg.deliver_at, remaining, period, cron, msg.priority,
                       len(msg.body))


class Schedules:
    """The schedules of one engine (``Broker.schedules``)."""

    def __init__(self, delayed: Delayed, store: Store) -> None:
        self.delayed = delayed
        self.store = store

    def _in_memory(self) -> list[StoredMessage]:
        return [msg for _, _, msg in sorted(self.delayed.heap)]

    def page(self, after: Key | None, limit: int) -> Deferred[SchedulePage]:
        """Up to ``limit`` schedules after the key ``after``, the next to fire first."""
        if not self.store.durable:
            held = [m for m in self._in_memory() if after is None or (m.deliver_at, m.seq) > after]
            return Deferred(lambda store: _now(held[:limit + 1]), lambda rows: _page(rows, limit))

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.browse_due(after, limit + 1)  # one more: is there a next page?

        return Deferred(fetch, lambda rows: _page(rows, limit))

    def find(self, wanted: str) -> Deferred[StoredMessage | None]:
        """The row of schedule ``wanted`` (None: there is none)."""
        if not self.store.durable:
            found = next((m for m in self._in_memory() if schedule_id(m) == wanted), None)
            return Deferred(lambda store: _now(found), lambda row: row)

        async def fetch(store: Store) -> StoredMessage | None:
            walk, read = DueWalk(store, SCAN_PAGE), 0
            while not walk.done and read < SCAN_LIMIT:
                rows = await walk.next_page()
                for msg in rows:
                    if schedule_id(msg) == wanted:
                        return msg
                read += len(rows)
            return None

        return Deferred(fetch, lambda row: row)

    def cancel(self, wanted: str, check: Callable[[str], None] | None = None) -> Deferred[Cancel]:
        """Cancel the schedule ``wanted``: ``CANCELLED``, ``MISSING`` or ``MOVED``, with its queue.
        ``check(queue)`` may refuse it (by raising) once the schedule is found.  (On a shared
        store the delete of a row another broker holds does not take effect: ``find`` tells.)"""
        return Deferred(self.find(wanted).fetch, partial(self._withdraw, check))

    def _withdraw(self, check: Callable[[str], None] | None, row: StoredMessage | None) -> Cancel:
        if row is None:
            return MISSING, None
        if check is not None:
            check(row.queue)
        return CANCELLED if self.delayed.withdraw(row) else MOVED, row.queue


async def _now(value: object) -> object:
    return value


def _page(rows: Sequence[StoredMessage], limit: int) -> SchedulePage:
    shown = [schedule_row(msg) for msg in rows[:limit]]
    last = rows[limit - 1] if len(rows) > limit else None
    return SchedulePage(shown, None if last is None or last.deliver_at is None else (last.deliver_at, last.seq))
