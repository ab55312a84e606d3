"""Slow topic subscribers: the ``--topic-overflow`` policy, its counters and its log lines.

Topic messages are never stored, so when a subscriber's connection holds more
unsent output than its hard limit, something has to give:

* ``block`` (the default, like RabbitMQ's flow control): the message is written
  anyway and the publisher's connection is not read again until every outbox
  it pushed over the limit is below it (``Session.throttled_by``).  Memory stays
  bounded: an outbox exceeds its limit by at most what one read of each
  publisher holds.  Every subscriber gets every message; the publisher (and the
  rest of its traffic) goes at the pace of the slowest subscriber -- but for
  at most ``--topic-block-timeout`` seconds (default 5) in one stretch if
  another subscriber of its topic drains at least ``LAG_RATIO`` times as fast,
  or if the subscriber is stalled: one publisher waited the whole timeout
  without its output falling below the limit once (it reads nothing, or next
  to nothing), whether or not the topic has other subscribers.  Then it is a
  known slow consumer (``Session.topic_lagging``, the way ActiveMQ's
  slow-consumer strategies single one out) and is treated as under ``drop``
  for the rest of its connection: it misses messages while its output is over
  the limit, counted and logged.  One stalled subscriber cannot stop a topic,
  even as its only subscriber, and it cannot make the publisher wait again and
  again; subscribers that keep reading and keep pace with each other are never
  singled out, whatever the publisher's pace (flow control is the answer to
  that).  A timeout of 0 waits forever.
* ``drop``: that subscriber misses the message; the others and the publisher
  are not slowed.
* ``disconnect``: that subscriber's connection gets an ERROR and is closed.

A client-ack subscriber at its prefetch limit cannot be caught up by waiting
for its socket, so under ``block`` it misses the message as under ``drop``.

Every miss is counted per subscription and in total (``/control/stats/topic``)
and logged once per episode: at the first miss, and when the subscriber takes
a message again.  An episode lasts until the subscriber's output is below the
soft limit (not merely below the hard limit), so it receives runs of
consecutive messages rather than every n-th one, and a subscriber hovering at
the limit does not fill the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .session import Outbox, Session, Subscription

log = logging.getLogger(__name__)

BLOCK = "block"
DROP = "drop"
DISCONNECT = "disconnect"
POLICIES = (BLOCK, DROP, DISCONNECT)
#: Under --topic-block-timeout a subscriber lags only if a peer drains this many times as fast:
#: keeping it would slow the others (and the publisher) by more than this factor.
LAG_RATIO = 2.0


class TopicOverflow:
    def __init__(self, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"topic overflow policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.policy = POLICIES[POLICIES.index(policy)]  # the constant itself: compared with "is"
        #: misses of each live subscription that missed any (the others cost nothing here)
        self.dropped: dict[Subscription, int] = {}
        #: subscriptions in an episode of misses (logged when it starts and when it ends)
        self.missing: dict[Subscription, int] = {}
        self.total_dropped = 0
        self.total_disconnected = 0
        self.total_lagging = 0

    def lag_if_slowest(
        self,
        subscriber: Session,
        seconds: float,
        drain_rate: Callable[[Outbox], float],
        peers: Iterable[Session],
        stalled: bool,
    ) -> bool:
        """``subscriber`` held a publisher back for ``seconds`` (--topic-block-timeout).  If it is
        ``stalled`` (one publisher waited that long for it alone), or one of its ``peers`` drains
        at least ``LAG_RATIO`` times as fast, from now on it never holds a publisher back again,
        it misses messages instead (as under ``drop``): True.  If neither, every subscriber is
        as busy and the publisher keeps waiting: False."""
        if subscriber.topic_lagging or subscriber.closed:
            return True
        own = drain_rate(subscriber.outbox)
        if stalled:
            self._lagging(
                subscriber, "held a publisher back for %g s (--topic-block-timeout) without its output falling "
                "below the limit (draining %.0f bytes/s)", seconds, own,
            )
            return True
        fastest = max((drain_rate(peer.outbox) for peer in peers), default=0.0)
        if fastest <= 0.0 or fastest < LAG_RATIO * own:
            log.debug(
                "topic subscriber session %s held a publisher back for %g s draining %.0f bytes/s, "
                "its fastest peer %.0f: no slower than the others, the publisher keeps waiting",
                subscriber.id, seconds, own, fastest,
            )
            return False
        self._lagging(
            subscriber, "held a publisher back for %g s (--topic-block-timeout) draining %.0f bytes/s while "
            "another subscriber drains %.0f", seconds, own, fastest,
        )
        return True

    def _lagging(self, subscriber: Session, why: str, *args: object) -> None:
        """From now on ``subscriber`` misses topic messages rather than hold publishers back."""
        subscriber.topic_lagging = True
        self.total_lagging += 1
        log.warning(
            "topic subscriber session %s " + why + ": from now on it misses topic messages whenever its "
            "output is over the limit, as under drop", subscriber.id, *args,
        )

    def drop(self, sub: Subscription, why: str) -> None:
        self.total_dropped += 1
        self.dropped[sub] = self.dropped.get(sub, 0) + 1
        if sub not in self.missing:
            self.missing[sub] = 0
            log.warning(
                "topic subscriber %s (session %s) on %s is %s: it misses messages until it catches up",
                sub.id, sub.session.id, sub.destination, why,
            )
        self.missing[sub] += 1

    def delivered(self, sub: Subscription) -> None:
        """``sub`` took a message again: an episode of misses ends (call only if ``missing``)."""
        missed = self.missing.pop(sub, None)
        if missed is not None:
            log.warning("topic subscriber %s (session %s) caught up after missing %d", sub.id, sub.session.id, missed)

    def disconnect(self, sub: Subscription) -> None:
        self.total_disconnected += 1
        log.warning(
            "topic subscriber %s (session %s) on %s is too slow: disconnecting it",
            sub.id, sub.session.id, sub.destination,
        )

    def forget(self, sub: Subscription) -> None:
        """The subscription ended."""
        self.dropped.pop(sub, None)
        self.missing.pop(sub, None)
