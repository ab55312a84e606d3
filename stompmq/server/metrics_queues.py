"""Which queues ``/metrics`` has per-queue series for, and their counts.

The busiest queues since start (messages published plus delivered through this broker) come
first, up to ``--metrics-top-queues``; the rest of the places go to the queues holding the most
messages in the store, touched since start or not, so a restart does not hide a backlog; and every
dead-letter queue holding messages (``--dlq-prefix``) is listed besides, up to as many again, so
an alert on dead letters sees those from before the last restart.  The counts come from the
store's queue list (``Broker.list_queues``: a page of names with their counts), read in pages of
``MAX_PAGE``, at most ``MAX_SCANNED`` queues per vhost and scrape.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..broker.control import MAX_PAGE

if TYPE_CHECKING:
    from ..broker import Broker

#: Queues of one vhost a scrape reads the counts of at most (beyond them, only the busiest).
MAX_SCANNED = 10_000


@dataclass(frozen=True, slots=True)
class ListedQueue:
    vhost: str
    name: str
    ready: int
    unacked: int
    consumers: int


async def listed_queues(engines: Mapping[str, Broker], answer: Callable[[Broker, Any], Awaitable[Any]],
                        limit: int) -> list[ListedQueue]:
    """The queues with per-queue series, busiest first, then by messages held, then the DLQs;
    ``answer`` reads an engine's answer (``Management.answer``: from the store when deferred)."""
    counted: dict[tuple[str, str], ListedQueue] = {}
    for vhost, engine in engines.items():
        after: str | None = ""
        scanned = 0
        while after is not None and scanned < MAX_SCANNED:
            page = await answer(engine, engine.list_queues(after, MAX_PAGE))
            for row in page.rows:
                counted[vhost, row.name] = ListedQueue(vhost, row.name, row.ready, row.unacked, row.consumers)
            scanned += len(page.rows)
            after = page.next_after
    stats = {(vhost, name): s for vhost, engine in engines.items() for name, s in engine.queue_stats.items()}
    listed = dict.fromkeys(heapq.nlargest(limit, stats, key=lambda n: stats[n].published + stats[n].delivered))
    holding = [key for key, queue in counted.items() if queue.ready + queue.unacked]
    for key in heapq.nlargest(limit, holding, key=lambda k: counted[k].ready + counted[k].unacked):
        if len(listed) >= limit:
            break
        listed.setdefault(key)
    prefix = engines[next(iter(engines))].config.dlq_prefix
    dead = sorted(key for key in holding if prefix and key[1].startswith(prefix) and key not in listed)
    listed.update(dict.fromkeys(dead[:limit]))
    return [counted.get(key) or ListedQueue(*key, 0, 0, 0) for key in listed]
