"""A queue's ages: the timestamps of its oldest ready and oldest unacked message.

Read when asked (a scrape, the management API), never kept up to date on the hot path.  A
durable queue's ready messages are in the store, which finds the head of each priority level by
an index seek (storage/ages.py); its unacked ones are the store's delivered rows, every broker's
on a shared database, plus the deliveries in flight here (an auto-ack delivery is never marked
delivered in the store).  A queue of the memory store is all in this broker's memory: its
window's levels, the messages parked for their group's owner, its deliveries in flight.

A stream consumer group's lag is known in memory: entries after its committed offset, and the
time of the first of them from the stream's tail or its segment marks (``group_lags``).
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from ..storage.ages import NO_AGES, QueueAges, older
from ..storage.base import Store
from .queue import Queue
from .stream_log import Stream
from .streams import Streams

#: What a store read needs: ``answer(await fetch(store))`` (control.Deferred's two halves).
AgesRead = tuple[Callable[[Store], Awaitable[QueueAges]], Callable[[QueueAges], QueueAges]]


class GroupLag(NamedTuple):
    """A stream consumer group's lag: entries after its committed offset, and the timestamp of
    the first of them (epoch ms; None when it has none)."""

    stream: str
    group: str
    committed: int
    entries: int
    oldest_ms: int | None


def ages_here(queue: Queue[Any] | None) -> QueueAges:
    """The ages ``queue`` has in this broker's memory (None: not active here)."""
    if queue is None:
        return NO_AGES
    ready = queue.window.oldest()
    if queue.parked:
        for waiting in queue.parked.values():
            if waiting:
                ready = older(ready, waiting[0].timestamp)
    unacked = min((msg.timestamp for msg in queue.inflight.values()), default=None)
    return ready, unacked


def queue_ages(queues: dict[str, Queue[Any]], durable: bool, name: str) -> AgesRead:
    """Queue ``name``'s ages (``queues``: the active ones), through a store read where the
    store holds the queue."""
    if not durable:
        here = ages_here(queues.get(name))
        return (lambda store: _known(here)), (lambda ages: ages)

    def fetch(store: Store) -> Awaitable[QueueAges]:
        return store.queue_ages(name)

    def answer(stored: QueueAges) -> QueueAges:
        return stored[0], older(stored[1], ages_here(queues.get(name))[1])

    return fetch, answer


async def _known(ages: QueueAges) -> QueueAges:
    """``ages``, as a store read would give them (the memory store's are all at hand)."""
    return ages


def group_lags(streams: Streams) -> list[GroupLag]:
    """Every consumer group of every stream with its lag in entries and the timestamp of the
    first entry it has not consumed (None: none).  From memory: the entry itself while it is in
    the stream's tail, else the first entry of its segment (a mark), at most a segment earlier,
    so the age in seconds errs on the old side, which is the side to alert on."""
    return [lag for stream in streams.streams.values() for lag in stream_lags(stream)]


def stream_lags(stream: Stream) -> list[GroupLag]:
    """``stream``'s consumer groups' lags (``group_lags``), by group name."""
    lags = []
    for group, committed in sorted(stream.groups.items()):
        lag = max(0, stream.next - committed)
        lags.append(GroupLag(stream.name, group, committed, lag, _entry_time(stream, committed) if lag else None))
    return lags


def _entry_time(stream: Stream, offset: int) -> int | None:
    first = stream.tail_first
    if offset >= first and offset - first < len(stream.tail):
        return stream.tail[offset - first].timestamp
    marks = stream.marks
    if not marks:
        return None
    index = bisect.bisect_right(marks, offset, key=lambda mark: mark[0]) - 1
    return marks[max(index, 0)][1]
