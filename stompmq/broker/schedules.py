"""Scheduled messages: ActiveMQ's ``AMQ_SCHEDULED_PERIOD``/``REPEAT``/``CRON`` on a delayed message.

Theory of operation
-------------------
A SEND with one of the recurring headers (``RECURRING``) is a *schedule*.  It is stored as a
delayed message (``delays.py``, the ``delayed_messages`` table) due at its first firing, so
its row is on disk before its RECEIPT like any delayed SEND's, and the broker adds two headers
to that row: ``scheduledJobId`` (ActiveMQ's name: the schedule's id, the sequence number of
its first row, kept by every copy) and ``x-schedule-left`` (the firings of the current series
still to come after this row's own: ``-1`` for ever).  Both are the broker's facts: a client
sending them has them dropped (``send_headers.BROKER_FACTS``).

When a schedule's row is due, ``fire`` does in one engine step what a promotion does plus one
insert: it deletes the row, publishes one copy into the queue (a new message, without the
scheduling headers, ``scheduledJobId`` kept), and stores the next row, due at the next firing,
with the count lowered.  The three writes are buffered in the same step, so one commit group
carries them: after a crash the store holds either the old row or the copy and the new row,
never both rows nor neither.  A schedule ends when its last firing is made, when its ``expires``
passes (the promotion drops an expired row), or when it is cancelled (``Delayed.withdraw``).

The firings (ActiveMQ's rules, docs/destinations.md): without ``CRON`` the first is at the due
time the delay headers give (at once without any), then ``REPEAT`` more, ``PERIOD`` apart.  With
``CRON`` every minute the expression names starts a series: one copy at that minute, or, when
``REPEAT`` is given, ``1 + REPEAT`` copies from ``DELAY`` after it, ``PERIOD`` apart.  Each next
firing is planned from the one before (no drift); one found late by a period or more (the
broker was down) is made at once and the next planned a period (or the next cron minute) after
now, so missed firings come one period apart, never in a burst.  Cron minutes are in the
broker's local time zone (``cron.py``).
"""

from __future__ import annotations

import logging
from typing import Protocol

from ..protocol.headers import headers_without
from ..storage.base import Store, StoredMessage
from .clock import Clock
from .cron import next_fire
from .errors import ClientError
from .queue_settings import QueueFull
from .send_headers import DUE_HEADERS, RECURRING, SCHEDULE_ID, SCHEDULE_LEFT, read_schedule
from .stats import QueueStats

log = logging.getLogger(__name__)

#: What a copy leaves out: how it was scheduled (a copy sent on elsewhere is not scheduled again).
SCHEDULING = RECURRING | DUE_HEADERS | {SCHEDULE_LEFT}


def started(headers: dict[str, str], seq: int) -> dict[str, str]:
    """The headers of a new schedule's first row (numbered ``seq``)."""
    return {**headers, SCHEDULE_ID: str(seq), SCHEDULE_LEFT: str(read_schedule(headers).repeat)}


def next_firing(row: StoredMessage, now_ms: int) -> tuple[int, dict[str, str]] | None:
    """The due time and headers of the row after ``row``, which fires now (None: it was the
    last).  A row whose headers no longer read (stored by another version) ends its schedule."""
    assert row.deliver_at is not None
    headers = row.headers
    try:
        schedule = read_schedule(headers)
        left = int(headers[SCHEDULE_LEFT])
    except (ClientError, ValueError) as e:
        log.warning("schedule %s of queue %s ends: %s", headers.get(SCHEDULE_ID), row.queue, e)
        return None
    if left != 0:
        at = row.deliver_at + schedule.period
        if at < now_ms:  # late by a period or more: the next one a period from now
            at = now_ms + schedule.period
        left = left - 1 if left > 0 else left
    elif schedule.cron is not None:
        at = next_fire(schedule.cron, max(row.deliver_at, now_ms)) + (schedule.delay if schedule.repeat else 0)
        left = schedule.repeat
    else:
        return None
    return at, {**headers, SCHEDULE_LEFT: str(left)}


class Publisher(Protocol):
    """What a firing needs of the dispatcher (``dispatch.Dispatcher`` is one): the store and
    clock, publishing into a queue, and discarding a copy that a full queue drops."""

    store: Store
    clock: Clock

    def publish(
        self,
        queue_name: str,
        headers: dict[str, str],
        body: bytes,
        priority: int,
        ack_timeout: float | None,
        expires: int | None,
        deliver_at: int | None = None,
    ) -> StoredMessage: ...

    def discard(self, msg: StoredMessage, reason: str, stats: QueueStats) -> None: ...

    def queue_stats(self, name: str) -> QueueStats: ...


def fire(dispatcher: Publisher, row: StoredMessage) -> None:
    """``row`` of a schedule is due: its copy into the queue and the next row, in this step."""
    store = dispatcher.store
    store.delete(row)
    following = next_firing(row, dispatcher.clock.wall_ms)
    headers = headers_without(row.headers, SCHEDULING)
    try:
        copy = dispatcher.publish(row.queue, headers, row.body, row.priority, row.ack_timeout, row.expires)
        store.promoted(row.seq, copy.seq)  # on a shared store: stored only if the delete takes effect
    except QueueFull:  # the copy goes as a dropped head would (dead-lettered or dropped); the schedule goes on
        row.headers = headers  # (the row is deleted: what dies is the copy)
        dispatcher.discard(row, "maxlen", dispatcher.queue_stats(row.queue))
    if following is not None and (row.expires is None or following[0] <= row.expires):
        at, headers = following
        after = dispatcher.publish(row.queue, headers, row.body, row.priority, row.ack_timeout, row.expires, at)
        store.promoted(row.seq, after.seq)
