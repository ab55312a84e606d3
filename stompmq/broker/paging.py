"""Paging: a queue's ready messages read from the store a page at a time, into its window.

``Dispatcher.pump`` asks for a page when a queue's window runs low (``request``); the runtime
performs the read (``Reads``) and ``_page_loaded`` merges it into the window and pumps again.  A
failed read is retried after ``PAGE_RETRY_SECONDS`` (a deadline of kind ``PAGE_RETRY``, which
the engine maps to ``retry``), the window "loading" meanwhile so no pump asks again.  On a
store several brokers share, a queue another broker wants reads only what its subscribers
have room for plus ``READ_AHEAD`` (claim on demand, dispatch.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from ..storage.base import Store, StoredMessage, StoreError
from .queue import Queue
from .reads import Reads, StoreRead
from .session import Subscription
from .timers import Deadlines
from .window import PageRequest

log = logging.getLogger(__name__)

#: The deadline kind of a failed page read's retry.
PAGE_RETRY = "page-retry"
#: Seconds before a failed page read is retried (a full disk refuses reads until writes commit).
PAGE_RETRY_SECONDS = 0.1
#: Ready messages a queue keeps claimed beyond its subscribers' room while another broker's
#: subscribers want it too: a subscriber refills without a read per message, and no broker
#: builds a backlog of its own.
READ_AHEAD = 10
#: Messages at most in a page read the store filters by header (storage/header_filter.py): a
#: read scans the rows it leaves out too, 200 matches in 20,000 rows at a 1 % match (4 ms on
#: SQLite), and the subscribers take the first pages while the store scans for the next.
FILTERED_PAGE = 200


class Paging:
    def __init__(self, reads: Reads, deadlines: Deadlines, queues: dict[str, Queue[Subscription]],
                 pump: Callable[[Queue[Subscription]], None],
                 deactivate_if_idle: Callable[[Queue[Subscription]], None]) -> None:
        self.reads = reads
        self.deadlines = deadlines
        self.queues = queues  # the dispatcher's queues in memory: a page for one that left is dropped
        self.pump = pump
        self.deactivate_if_idle = deactivate_if_idle
        self.page_reads = 0  # pages asked of the store

    def request(self, queue: Queue[Subscription]) -> None:
        """Ask the store for the next page of ``queue``'s ready messages (its window runs low)."""
        most = None
        if queue.claim_until:  # claim on demand: what the subscribers can take, and the read-ahead
            # (the tail not deducted: only a read that reaches it, or finds nothing before it,
            # brings it into the window; what it claims beyond the room the next pump gives back)
            most = READ_AHEAD + queue.room() - queue.window.size
            if most < READ_AHEAD // 2 or most <= 0:
                return  # (not a read per message: once half the read-ahead is gone)
        matching = queue.header_filter()
        if matching is not None:  # (pages the store filters: what it scans, the broker delivers)
            most = FILTERED_PAGE if most is None else min(most, FILTERED_PAGE)
        request = queue.window.start_page(most)
        name = queue.name
        self.page_reads += 1
        if matching is not None:
            queue.window.filtered(request)

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.load_ready(name, request.after, request.limit, matching)

        self.reads.submit(StoreRead(fetch, partial(self._page_loaded, queue, request), partial(self._page_failed, queue)))

    def _page_loaded(self, queue: Queue[Subscription], request: PageRequest, rows: Sequence[StoredMessage]) -> None:
        # (a read from the start finds parked messages too: they are in memory already)
        queue.window.page_loaded(request, rows, queue.inflight if not queue.parked else
                                 queue.parked_seqs().union(queue.inflight), bool(queue.claim_until))
        if self.queues.get(queue.name) is queue:
            # Another broker freed rows while this page was read: look back now, before the pump
            # asks for the next page.  After it, the look back found that read in flight and was
            # put off again, behind every read while the subscribers had room: none read the
            # freed rows, and each counted a skip that kept the queue out of memory for good.
            if queue.window.rewind:
                queue.window.look_back(queue.window.rewind_first)
            self.pump(queue)
            self.deactivate_if_idle(queue)

    def _page_failed(self, queue: Queue[Subscription], error: StoreError) -> None:
        # The window stays "loading" until the retry, so no pump asks again meanwhile: a store
        # that refuses reads (a full disk, until the buffered writes commit) is not hammered.
        # The store logs its outage once (storage/outage.py): each retry here is only debug.
        log.debug("paging queue %s failed, retrying: %s", queue.name, error)
        self.deadlines.arm(PAGE_RETRY_SECONDS, PAGE_RETRY, queue)

    def retry(self, queue: Queue[Subscription]) -> None:
        """The PAGE_RETRY deadline: ask again if the page is still wanted."""
        queue.window.page_failed()
        if self.queues.get(queue.name) is queue:
            self.pump(queue)  # asks again while the page is still wanted
            self.deactivate_if_idle(queue)
