"""Per-user, per-connection and per-vhost limits against one client holding the broker's memory.

Why: without them one ordinary user could hold hundreds of MiB (a transaction of 244 SENDs of
1 MiB, tens of thousands of queues or temporary queues) until the memory alarm blocked every
publisher.  Each limit is an option (``config.py``; docs/security.md lists them with their
defaults and what they bound); a hit is a ``LimitError`` (an ERROR naming the option, then the
connection closes, as for any ``ClientError``), counted per limit in ``LimitHits`` for
``/metrics`` and logged once per (limit, user), not once per frame.

``HeldBytes`` is the one ledger shared by every vhost's engine (it lives in the one
``BrokerConfig`` they share): what a login holds in open transactions, over all its connections.
"""

from __future__ import annotations

import logging
from collections import Counter

from ..protocol import Frame
from .errors import ClientError

log = logging.getLogger(__name__)

#: What a held frame costs besides its body and header text: its Frame, dict and str objects.
FRAME_OVERHEAD = 256

#: (limit, user) pairs already logged; past this many the set starts again (bounded memory).
LOGGED_KEPT = 4096


class LimitError(ClientError):
    """A limit refused what the client asked for; ``limit`` is the option's name."""

    def __init__(self, limit: str, message: str, receipt_id: str | None = None) -> None:
        super().__init__(f"{message} (limit {limit})", receipt_id)
        self.limit = limit


class LimitHits:
    """How often each limit refused something, and the log line of its first hit per user."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._logged: set[tuple[str, str]] = set()

    def hit(self, error: LimitError, who: str | None) -> None:
        """Count a hit of ``who`` (a login; an address where there is none yet)."""
        self.counts[error.limit] += 1
        key = (error.limit, who or "")
        if key not in self._logged:
            if len(self._logged) >= LOGGED_KEPT:
                self._logged.clear()
            self._logged.add(key)
            log.warning("limit %s refused %r: %s (logged once per limit and login or address)", error.limit, who,
                        error.message)


def frame_cost(frame: Frame) -> int:
    """Bytes a frame held in a transaction is charged: its body, header text and overhead."""
    return len(frame.body) + sum(len(k) + len(v) for k, v in frame.headers.items()) + FRAME_OVERHEAD


class HeldBytes:
    """Bytes each login holds in open transactions, over all its connections and vhosts."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}

    def charge(self, login: str | None, cost: int, limit: int) -> None:
        """Count ``cost`` more bytes for ``login``; LimitError (nothing counted) past ``limit``."""
        key = login or ""
        total = self.held.get(key, 0) + cost
        if total > limit:
            raise LimitError("max-transaction-bytes", f"transactions of login {key!r} would hold {total} bytes, "
                             f"more than {limit}")
        self.held[key] = total

    def release(self, login: str | None, cost: int) -> None:
        key = login or ""
        left = self.held.pop(key, 0) - cost
        if left > 0:
            self.held[key] = left


def admit_producer(producers: dict[str, int], seen: dict[str, int], producer: str, now_ms: int, limit: int,
                   expiry_ms: int) -> None:
    """Note that idempotent ``producer`` appends at ``now_ms`` to a stream whose producers are
    ``producers`` (id -> highest seq) and ``seen`` (id -> when last seen; one recovered at start
    and not seen since is timed from the first scan).  A new one past ``limit`` first forgets
    those not seen for ``expiry_ms``
    (a retry after that is taken for a new producer, as Kafka's producer-id expiry has it);
    LimitError if none has expired."""
    if producer not in producers and len(producers) >= limit:
        stale = [pid for pid in producers if seen.setdefault(pid, now_ms) < now_ms - expiry_ms]
        for pid in stale:
            del producers[pid]
            seen.pop(pid, None)
        if len(producers) >= limit:
            raise LimitError("max-stream-producers", f"this stream has {limit} idempotent producers seen within "
                             f"{expiry_ms // 1000} s already")
    seen[producer] = now_ms

