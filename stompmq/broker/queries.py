"""What the server asks an engine about itself: counts and read-only views, no frames.

The management API, ``/metrics`` and the runtime (``server/``) read an engine through these
methods of ``Broker`` and never through its parts (the dispatcher, the streams, the router,
the sessions), so the engine can reshape its parts without touching ``server/``.  Each answers
with plain values, read-only mappings, or a ``Deferred`` the caller completes with a store read
(``answer(await fetch(store))``).  A query changes nothing: commands stay in ``engine.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .ages import GroupLag, group_lags, stream_lags
from .key_exchanges import BUILT_IN
from .policy_match import typed

if TYPE_CHECKING:
    from ..storage.ages import QueueAges
    from ..storage.base import StoredMessage
    from .control import Control, Deferred, QueuePage
    from .dispatch import Dispatcher
    from .expiry import ExpirySweep
    from .routing import Router
    from .session import Session
    from .stats import QueueStats
    from .streams import Streams


class Queries:
    """The engine's read-only queries (a base of ``Broker``, which owns the parts named below)."""

    dispatcher: Dispatcher
    router: Router
    control: Control
    streams: Streams
    expiry: ExpirySweep
    sessions: dict[str, Session]

    # -- queues ---------------------------------------------------------------------------------
    @property
    def queue_stats(self) -> Mapping[str, QueueStats]:
        """Counters of every queue in use since start (read-only; see stats.py)."""
        return MappingProxyType(self.dispatcher.stats)

    def knows_queue(self, name: str) -> bool:
        """Is queue ``name`` in use here (active, used since start) or declared?  Any other queue
        exists only while the store holds messages of it (``/control/count-msgs``)."""
        dispatcher = self.dispatcher
        return name in dispatcher.stats or name in dispatcher.queues or name in dispatcher.bounds.declared

    def consumer_count(self, queue: str) -> int:
        """Subscriptions of this engine's sessions to ``queue`` (0: it is not in memory)."""
        active = self.dispatcher.queues.get(queue)
        return active.nsubs if active is not None else 0

    def list_queues(self, after: str, limit: int) -> Deferred[QueuePage]:
        """A page of queues named after ``after``: ``answer(await fetch(store))``."""
        return self.control.list_queues(after, limit)

    def queue_ages(self, queue: str) -> Deferred[QueueAges]:
        """The timestamps of ``queue``'s oldest ready and oldest unacked message: ``answer(await fetch(store))``."""
        return self.control.queue_ages(queue)

    def peek(self, queue: str, count: int) -> Deferred[list[StoredMessage]]:
        """Up to ``count`` ready messages of ``queue``, consuming none: ``answer(await fetch(store))``."""
        return self.control.peek(queue, count)

    def declared_queues(self) -> dict[str, dict[str, Any]]:
        """Every declared queue with its declaration's settings (typed: ``policy_match.typed``)."""
        return {name: typed(settings.options()) for name, settings in sorted(self.dispatcher.bounds.declared.items())}

    def queue_settings(self, name: str) -> dict[str, dict[str, Any]]:
        """Queue ``name``'s effective settings: ``{key: {"value", "source", "policy"?}}``."""
        return self.dispatcher.bounds.effective(name).describe()

    def stream_settings(self, name: str) -> dict[str, dict[str, Any]]:
        """Stream ``name``'s retention (``max-age``, ``max-length-bytes``) as ``queue_settings``
        shows a queue's; {} for a stream this broker does not know."""
        stream = self.streams.streams.get(name)
        return {} if stream is None else self.streams.settings(stream).describe()

    # -- exchanges, sessions, streams, delayed messages ------------------------------------------
    def exchange_names(self) -> list[str]:
        """The declared exchanges of every type, sorted (not the built-in ``amq.*`` ones)."""
        router = self.router
        return sorted(router.exchanges.keys() | router.key_exchanges.keys() - BUILT_IN.keys())

    def subscription_count(self) -> int:
        """Subscriptions of every open session, of every kind."""
        return sum(len(session.subscriptions) for session in self.sessions.values())

    def stream_group_lags(self, stream: str | None = None) -> list[GroupLag]:
        """The consumer groups of ``stream`` (None: of every stream) with their lags (ages.py)."""
        if stream is None:
            return group_lags(self.streams)
        known = self.streams.streams.get(stream)
        return stream_lags(known) if known is not None else []

    def delayed_in_memory(self) -> int:
        """Delayed messages held in memory (the ones due first; the rest wait in the store)."""
        return len(self.dispatcher.delayed)

    # -- counters since start ---------------------------------------------------------------------
    @property
    def page_reads(self) -> int:
        """Pages of ready messages asked of the store since start."""
        return self.dispatcher.paging.page_reads

    @property
    def expiry_sweeps(self) -> int:
        """Store reads looking for expired messages since start."""
        return self.expiry.sweeps

    @property
    def pace_timeouts(self) -> int:
        """Queues that held their producers back for --queue-pace-timeout, since start."""
        return self.dispatcher.pace_timeouts

    @property
    def topic_drops(self) -> int:
        """Topic deliveries missed by slow or full subscribers since start (never stored)."""
        return self.router.topic_drops

    @property
    def topic_lagging(self) -> int:
        """Topic subscribers singled out as slow by --topic-block-timeout since start."""
        return self.router.overflow.total_lagging

    @property
    def reply_drops(self) -> int:
        """SENDs to reply queues of this broker that were gone (dropped, as RabbitMQ does)."""
        return self.router.temps.dropped
