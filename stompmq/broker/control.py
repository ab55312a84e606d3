"""``/control/...`` destinations: introspection and administration answered in the RECEIPT.

A control SEND names ``/control/VERB/KIND/NAME``.  The verb table below is the
whole surface; an unknown verb or kind is an ERROR.  A handler returns either
the RECEIPT headers at once or, when it must read the store first (counting
the messages of a durable queue), a ``Deferred`` answer: the engine has the
runtime read the store and answers in order with the session's other
receipts.  A control SEND without ``receipt`` still runs.  Handlers use only
the public methods of the dispatcher and the router.

Counts follow ocamlmq: ``num-messages`` counts ready and unacked messages;
``num-ready`` and ``num-unacked`` split it.

``list_queues`` pages through every queue by name for ``/control/list-queues``
(which leaves out temporary reply queues: their names are capabilities) and the
management API alike: the store's page (``Store.queue_page``) merged
with the queues only this broker knows (active, or published to since start).
When the store's page is full, names past its last one wait for the next page,
so no queue is skipped however the two sources interleave.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ..protocol import Frame
from ..storage.ages import QueueAges, older
from ..storage.base import QueueCount, Store, StoredMessage, by_order
from .ages import ages_here, queue_ages
from .destinations import Destination, parse_destination
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import ROUTING_KEY_HEADER, declaration_options, parse_weight
from .key_exchanges import TYPES as KEY_TYPES
from .policy_apply import AppliedPolicies
from .policy_match import Effective, header_text
from .queue_settings import QueueSettings
from .routing import STREAM_TARGET, Router
from .stats import QueueStats
from .stream_control import StreamControl
from .streams import Streams
from .temp_queues import TEMP_QUEUE_PREFIX

Headers = dict[str, str]
R = TypeVar("R")
#: Most queues one page of ``list_queues`` may hold (a client asking for more gets this many).
MAX_PAGE = 1000


class Deferred(Generic[R]):
    """An answer that needs a store read: ``answer(await fetch(store))`` gives the headers
    (or, for the management API, the result).

    A plain class rather than a frozen dataclass: mypyc (setup.py's compiled engine) cannot
    build a generic dataclass; ``Final`` keeps the fields read-only for mypy."""

    __slots__ = ("fetch", "answer")

    def __init__(self, fetch: Callable[[Store], Awaitable[Any]], answer: Callable[[Any], R]) -> None:
        self.fetch: Final = fetch
        self.answer: Final = answer


Answer = Headers | Deferred[Headers]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue in a listing: counts now, counters since the broker started."""

    name: str
    ready: int
    unacked: int
    consumers: int
    oldest_ready_ms: int | None
    oldest_unacked_ms: int | None
    stats: QueueStats | None


@dataclass(frozen=True, slots=True)
class QueuePage:
    rows: list[QueueRow]
    next_after: str | None  # pass as ``after`` for the next page; None: this was the last


class Control:
    def __init__(self, dispatcher: Dispatcher, router: Router, streams: Streams, policies: AppliedPolicies,
                 bind_target: Callable[[Destination], str]) -> None:
        #: the name a binding to a destination is stored under, by its kind (kinds/registry.py)
        self.bind_target = bind_target
        self.policies = policies  # a declaration takes effect through it (with the policies' settings)
        self.dispatcher = dispatcher
        self.streams = streams
        self.stream_control = StreamControl(streams)
        self.router = router
        self._verbs: dict[tuple[str, str], Callable[[str, Frame], Answer]] = {
            ("count-msgs", "queue"): self._count_msgs,
            ("count-subscribers", "queue"): self._count_queue_subscribers,
            ("list-consumers", "queue"): self._list_consumers,
            ("count-subscribers", "topic"): self._count_topic_subscribers,
            ("stats", "topic"): self._topic_stats,
            ("purge", "queue"): self._purge,
            ("delete", "queue"): self._delete_queue,
            ("settings", "queue"): self._queue_settings,
            ("declare", "queue"): self._declare_queue,
            ("declare", "exchange"): self._declare_exchange,
            ("delete", "exchange"): self._delete_exchange,
            ("bind", "exchange"): self._bind,
            ("unbind", "exchange"): self._unbind,
            ("list-bindings", "exchange"): self._list_bindings,
            ("stats", "exchange"): self._exchange_stats,
            ("declare", "stream"): self._declare_stream,
            ("stream-offsets", "stream"): self._stream_offsets,
            ("settings", "stream"): self._stream_settings,
            ("stream-group", "stream"): self._stream_group,
            ("purge", "stream"): self._purge_stream,
            ("delete", "stream"): self._delete_stream,
        }

    def run(self, path: str, frame: Frame) -> Answer:
        if path == "list-queues":
            return self._list_queues(frame)
        verb, _, rest = path.partition("/")
        kind, _, name = rest.partition("/")
        handler = self._verbs.get((verb, kind))
        if handler is None:
            raise ClientError(f"unknown control destination /control/{path}")
        if not name:
            raise ClientError(f"/control/{verb}/{kind}/ needs a name")
        return handler(name, frame)

    # -- queues -------------------------------------------------------------------------------
    def _count_msgs(self, name: str, frame: Frame) -> Answer:
        """Ready and unacked messages of ``name``, never negative: the deliveries in flight here
        are counted at the instant the store's count is of (``Store.queue_size``), since a count
        read later would miss the messages sent, delivered or acked meanwhile."""
        dispatcher = self.dispatcher

        def unacked_here() -> int:
            queue = dispatcher.queues.get(name)
            return len(queue.inflight) if queue is not None else 0

        if not dispatcher.store.durable:
            queue = dispatcher.queues.get(name)
            unacked = unacked_here()
            return _counts((queue.size if queue is not None else 0) + unacked, unacked)

        if dispatcher.store.shared:  # every broker's deliveries in flight count

            async def fetch_both(store: Store) -> tuple[int, int]:
                total = await store.count(name)
                # Two reads of a database other brokers write meanwhile: at most what was there.
                return total, min(total, await store.count_unacked(name))

            return Deferred(fetch_both, lambda counts: _counts(*counts))

        def fetch(store: Store) -> Awaitable[tuple[int, int, int]]:
            return store.queue_size(name, unacked_here)

        return Deferred(fetch, lambda counted: _counts(counted[0], counted[2]))

    def _count_queue_subscribers(self, name: str, frame: Frame) -> Answer:
        queue = self.dispatcher.queues.get(name)
        return {"num-subscribers": str(queue.nsubs if queue is not None else 0)}

    def _list_consumers(self, name: str, frame: Frame) -> Answer:
        """This broker's subscriptions to the queue, oldest first, as ``consumer-N-*`` headers:
        who they are, how they take messages and what they take (``selector`` when they sift)."""
        queue = self.dispatcher.queues.get(name)
        members = queue.members if queue is not None else []
        headers = {"num-consumers": str(len(members))}
        for i, sub in enumerate(members):
            headers[f"consumer-{i}-session"] = sub.session.id
            headers[f"consumer-{i}-subscription"] = sub.id
            headers[f"consumer-{i}-ack"] = sub.ack_mode.value
            headers[f"consumer-{i}-prefetch"] = str(sub.prefetch)
            headers[f"consumer-{i}-unacked"] = str(len(sub.unacked))
            headers[f"consumer-{i}-priority"] = str(sub.priority)
            if sub.selector is not None:
                headers[f"consumer-{i}-selector"] = sub.selector.text
        return headers

    def _count_topic_subscribers(self, name: str, frame: Frame) -> Answer:
        return {"num-subscribers": str(self.router.topics.count(name))}

    def _topic_stats(self, name: str, frame: Frame) -> Answer:
        """Subscribers a publish to ``name`` reaches, what they missed (each one that missed any,
        sorted by session and id), and the broker-wide overflow totals."""
        overflow = self.router.overflow
        subs = [sub for sub in self.router.topics.matching(name) if not sub.session.closed]
        missed = sorted((sub for sub in subs if sub in overflow.dropped), key=lambda s: (s.session.id, s.id))
        headers = {
            "num-subscribers": str(len(subs)),
            "num-dropped": str(sum(overflow.dropped[sub] for sub in missed)),
            "topic-overflow": overflow.policy,
            "total-dropped": str(overflow.total_dropped),
            "total-disconnected": str(overflow.total_disconnected),
            "total-lagging": str(overflow.total_lagging),
        }
        for i, sub in enumerate(missed):
            headers[f"subscription-{i}-session"] = sub.session.id
            headers[f"subscription-{i}-id"] = sub.id
            headers[f"subscription-{i}-dropped"] = str(overflow.dropped[sub])
        return headers
    def _list_queues(self, frame: Frame) -> Deferred[Headers]:
        """``after`` and ``limit`` headers page; the RECEIPT carries ``queue-N-*`` headers."""
        limit = _page_limit(frame.headers.get("limit"))
        listing = self.list_queues(frame.headers.get("after", ""), limit)

        def answer(fetched: tuple[list[QueueCount], dict[str, QueueRow]]) -> Headers:
            page = listing.answer(fetched)
            # A reply queue's name is what lets a client write to it: not for every client to list.
            rows = [row for row in page.rows if not row.name.startswith(TEMP_QUEUE_PREFIX)]
            headers = {"num-queues": str(len(rows))}
            if page.next_after is not None:
                headers["next-after"] = page.next_after
            for i, row in enumerate(rows):
                headers[f"queue-{i}-name"] = row.name
                headers[f"queue-{i}-ready"] = str(row.ready)
                headers[f"queue-{i}-unacked"] = str(row.unacked)
                headers[f"queue-{i}-consumers"] = str(row.consumers)
            return headers

        return Deferred(listing.fetch, answer)

    def list_queues(self, after: str, limit: int) -> Deferred[QueuePage]:
        """A page of queues named after ``after``; ``answer`` gives a ``QueuePage``.

        This broker's own counts (ready in memory, deliveries in flight) are taken at the
        instant the store's counts are of (``Store.queue_page``'s snapshot): taken when the
        answer arrives, deliveries made meanwhile of messages the store's count predates made
        ``ready`` (stored minus in flight) negative under a busy consumer.
        """
        limit = max(1, min(limit, MAX_PAGE))
        dispatcher = self.dispatcher

        def here() -> dict[str, QueueRow]:
            # Every active queue has counters (Dispatcher.activate), so ``stats`` names them all,
            # and an active queue on the page is among the ``limit`` first of them.
            names = heapq.nsmallest(limit, (name for name in dispatcher.stats if name > after))
            return {name: self._row_here(name) for name in names}

        def fetch(store: Store) -> Awaitable[tuple[list[QueueCount], dict[str, QueueRow]]]:
            return store.queue_page(after, limit, here)

        return Deferred(fetch, lambda fetched: self._queue_page(limit, *fetched))

    def _row_here(self, name: str) -> QueueRow:
        """Queue ``name`` as this broker holds it now."""
        queue = self.dispatcher.queues.get(name)
        stats = self.dispatcher.stats.get(name)
        if queue is None:
            return QueueRow(name, 0, 0, 0, None, None, stats)
        return QueueRow(name, queue.size, len(queue.inflight), queue.nsubs, *ages_here(queue), stats)

    def _queue_page(self, limit: int, store_rows: list[QueueCount], here: dict[str, QueueRow]) -> QueuePage:
        stored = {row.name: row for row in store_rows}
        names = here.keys() | stored.keys()
        if len(store_rows) == limit:  # the store has more: names past its page come next time
            names = {name for name in names if name <= store_rows[-1].name}
        page = sorted(names)[:limit]
        rows = []
        for name in page:
            # A queue only the store lists was not active here when the counts were taken.
            row = here.get(name) or QueueRow(name, 0, 0, 0, None, None, self.dispatcher.stats.get(name))
            count = stored.get(name)
            if count is not None:
                unacked = max(count.unacked, row.unacked)
                row = dataclasses.replace(row, ready=count.messages - unacked, unacked=unacked,
                                          oldest_ready_ms=count.oldest_ready_ms,
                                          oldest_unacked_ms=older(count.oldest_unacked_ms, row.oldest_unacked_ms))
            rows.append(row)
        more = len(page) == limit
        return QueuePage(rows, page[-1] if more else None)

    def queue_ages(self, name: str) -> Deferred[QueueAges]:
        """The timestamps of queue ``name``'s oldest ready and oldest unacked message (ages.py)."""
        dispatcher = self.dispatcher
        return Deferred(*queue_ages(dispatcher.queues, dispatcher.store.durable, name))

    def peek(self, name: str, count: int) -> Deferred[list[StoredMessage]]:
        """Up to ``count`` ready messages of queue ``name`` in delivery order, consuming none
        (what a browsing subscriber would see first); deliveries in flight here are skipped."""
        dispatcher = self.dispatcher

        def unsettled() -> set[int]:
            queue = dispatcher.queues.get(name)
            return set(queue.inflight) if queue is not None else set()

        if not dispatcher.store.durable:  # every message is in memory
            queue = dispatcher.queues.get(name)
            held = [] if queue is None else queue.window.messages() + [
                msg for waiting in (queue.parked or {}).values() for msg in waiting]
            ready = sorted(held, key=by_order)[:count]
            return Deferred(lambda store: _ready(ready), lambda rows: rows)

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.browse(name, None, count + len(unsettled()))

        return Deferred(fetch, lambda rows: [msg for msg in rows if msg.seq not in unsettled()][:count])

    def _purge(self, name: str, frame: Frame) -> Answer:
        """Drop the queue's ready messages; with ``delayed:true`` its delayed messages not yet
        due too (every schedule of the queue: a walk over the vhost's delayed messages), their
        count in the RECEIPT's ``delayed`` (Dramatiq's ``flush``, RabbitMQ's purge of ``Q.DQ``)."""
        delayed = frame.headers.get("delayed", "false")
        if delayed not in ("true", "false"):
            raise ClientError(f"delayed must be true or false, not {delayed!r}")
        if delayed == "false":
            self.dispatcher.purge(name)
            return {}

        def answer(rows: list[StoredMessage]) -> Headers:
            # The ready ones first: what fell due since the walk is among them, and a store's
            # purge drops the operations on the queue's rows buffered before it, the deletes of
            # the delayed rows too, so those must come after it.
            self.dispatcher.purge(name)
            return {"delayed": str(self.dispatcher.delayed.withdraw_all(rows))}

        return Deferred(self.dispatcher.delayed.of_queue(name), answer)

    def _declare_queue(self, name: str, frame: Frame) -> Answer:
        """Give the queue a policy (queue_settings.py), replacing any earlier declaration; a new
        queue counts against ``max_queues`` from now on (limits.py)."""
        if name not in self.dispatcher.bounds.declared:
            self.dispatcher.admit_queue(name)
        self.policies.declare(name, QueueSettings.parse(frame.headers))
        self.dispatcher.queue_stats(name)
        return {}

    def _queue_settings(self, name: str, frame: Frame) -> Answer:
        """The queue's effective settings, each with ``KEY-source`` saying where it came from
        (``declaration``, ``policy NAME`` or ``operator-policy NAME``: policy_match.py)."""
        return settings_answer(self.dispatcher.bounds.effective(name))

    def _stream_settings(self, name: str, frame: Frame) -> Answer:
        """The stream's retention as ``_queue_settings`` shows a queue's (``default``: the flags)."""
        stream = self.streams.streams.get(name)
        if stream is None:
            raise ClientError(f"no stream {name!r}")
        return settings_answer(self.streams.settings(stream))

    def _delete_queue(self, name: str, frame: Frame) -> Answer:
        if name in self.dispatcher.bounds.declared:
            self.policies.declare(name, None)
        self.dispatcher.purge(name)
        self.router.unbind_everywhere(name)
        queue = self.dispatcher.queues.get(name)
        if queue is not None:  # emptied: without consumers it leaves memory, and the listings
            self.dispatcher.deactivate_if_idle(queue)
        self.dispatcher.forget_stats(name)
        return {}

    # -- streams ------------------------------------------------------------------------------
    def _declare_stream(self, name: str, frame: Frame) -> Answer:
        self.streams.declare(name, frame.headers)
        return {}

    def _purge_stream(self, name: str, frame: Frame) -> Answer:
        self.streams.purge(name)
        return {}

    def _delete_stream(self, name: str, frame: Frame) -> Answer:
        self.streams.delete(name)
        self.router.unbind_everywhere(STREAM_TARGET + name)
        return {}

    def _stream_offsets(self, name: str, frame: Frame) -> Answer:
        """Answered once everything appended so far is committed (the RECEIPT waits for it), so
        a reader that reads up to ``next-offset`` reads only entries a restart keeps.  On a shared
        store the answer is the stream's counter row, read behind everything buffered.  With
        ``timestamp: MS`` it also names the first offset at or after MS (``timestamp-offset``)."""
        timestamp = frame.headers.get("timestamp")
        if timestamp is not None:
            found = self.stream_control.offset_at(name, timestamp)
            return found if isinstance(found, dict) else Deferred(*found)
        if self.dispatcher.store.shared:
            return Deferred(*self.streams.offsets_read(name))
        return self.streams.offsets(name)

    def _stream_group(self, name: str, frame: Frame) -> Answer:
        """A consumer group's committed offset and lag; with ``offset`` (or ``forget:true``) it
        sets (or forgets) it first.  Needs ``read`` on the stream, as a group's ACKs do."""
        group = self.stream_control.set_group(name, frame.headers)
        if self.dispatcher.store.shared:
            return Deferred(*self.stream_control.group_read(name, group))
        return self.stream_control.group_answer(name, group)

    # -- exchanges ----------------------------------------------------------------------------
    def _declare_exchange(self, name: str, frame: Frame) -> Answer:
        if "/" in name:
            raise ClientError(f"exchange name {name!r} must not contain '/'")
        kind = frame.headers.get("type")
        if kind in KEY_TYPES:
            self.router.declare_key_exchange(name, kind)
        else:
            self.router.declare_exchange(name, declaration_options(frame.headers))
        return {}

    def _delete_exchange(self, name: str, frame: Frame) -> Answer:
        self.router.delete_exchange(name)
        return {}

    def _bind(self, name: str, frame: Frame) -> Answer:
        """Bind a queue; binding an already bound queue again updates its weight."""
        if name in self.router.key_exchanges:
            self.router.bind_key(name, self._bound(frame), frame.headers.get(ROUTING_KEY_HEADER, ""))
            return {}
        self.router.exchange(name)
        queue = self._bound(frame)
        self.router.bind(name, queue, parse_weight(frame.headers.get("weight")))
        return {}

    def _unbind(self, name: str, frame: Frame) -> Answer:
        if name in self.router.key_exchanges:
            self.router.unbind_key(name, self._bound(frame), frame.headers.get(ROUTING_KEY_HEADER, ""))
            return {}
        self.router.exchange(name)
        self.router.unbind(name, self._bound(frame))
        return {}

    def _list_bindings(self, name: str, frame: Frame) -> Answer:
        keyed = self.router.key_exchanges.get(name)
        if keyed is not None:
            headers = {"num-bindings": str(len(keyed.bindings))}
            for i, (queue, key) in enumerate(sorted(keyed.bindings)):
                headers[f"binding-{i}-queue"] = "/queue/" + queue
                headers[f"binding-{i}-routing-key"] = key
            return headers
        exchange = self.router.exchange(name)
        headers = {"num-bindings": str(len(exchange.bindings))}
        for i, queue in enumerate(sorted(exchange.bindings)):
            headers[f"binding-{i}-queue"] = queue if queue.startswith(STREAM_TARGET) else "/queue/" + queue
            headers[f"binding-{i}-weight"] = str(exchange.bindings[queue])
        return headers

    def _exchange_stats(self, name: str, frame: Frame) -> Answer:
        keyed = self.router.key_exchanges.get(name)
        if keyed is not None:
            return {
                "type": keyed.type,
                "num-bindings": str(len(keyed.bindings)),
                "num-routed": str(keyed.routed),
                "num-unroutable": str(keyed.unroutable),
            }
        exchange = self.router.exchange(name)
        return {
            "num-bindings": str(len(exchange.bindings)),
            "num-routed": str(exchange.routed),
            "num-unhashed": str(exchange.unhashed),
        }

    def _bound(self, frame: Frame) -> str:
        """The bound name of a bind or unbind: a queue's bare name, or a stream's destination
        (``STREAM_TARGET``)."""
        if "queue" not in frame.headers:
            raise ClientError(f"{frame.headers['destination']} needs a queue header naming /queue/NAME or"
                              " /stream/NAME")
        return self.bind_target(parse_destination(frame.headers["queue"]))


async def _ready(rows: list[StoredMessage]) -> list[StoredMessage]:
    """``rows``, as a store read would give them (the memory store's are all at hand)."""
    return rows


def _page_limit(value: str | None) -> int:
    if value is None:
        return 100
    try:
        return int(value)
    except ValueError:
        raise ClientError(f"limit must be a number, not {value!r}") from None


def _counts(total: int, unacked: int) -> Headers:
    return {"num-messages": str(total), "num-ready": str(total - unacked), "num-unacked": str(unacked)}


def settings_answer(effective: Effective) -> Answer:
    """Effective settings as headers: ``KEY`` and ``KEY-source`` (the source and any policy's name)."""
    answer: dict[str, str] = {}
    for key, shown in effective.describe().items():
        answer[key] = header_text(shown["value"])
        answer[key + "-source"] = " ".join(filter(None, (shown["source"], shown.get("policy"))))
    return answer
