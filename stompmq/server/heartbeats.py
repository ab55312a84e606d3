"""Every connection's timers (CONNECT deadline, heart-beats) driven by one task: a timer wheel.

Theory of operation
-------------------
A watchdog task per connection, waking every half heart-beat interval, cost each idle
connection a task with its frame, cancel scope and timer, and the broker a wake-up per
connection per half interval: 15,000 idle clients meant 3,000 wake-ups a second.  Here one
task keeps every connection's next visit on a wheel of ``tick``-long slots and sleeps until the
earliest slot; a visit asks the connection ``check(now, tick)``, which acts (beats, or fails a
silent peer or one that never sent CONNECT) and answers when it next needs looking at, or None.
Receiving and sending only update the connection's timestamps: the wheel is touched once per
beat owed or deadline that may be missed, not per frame.

A visit asked for at ``when`` comes at the end of its slot, at most one tick late: the CONNECT
deadline and a silent peer's grace run out up to a tick late, and a connection asks for its
heart-beat a tick early (``ClientSession.check``; beating early is allowed: "at least every n ms").
Spread over 9 s, 15,000 connections' beats are one pass per tick, not a wake-up of this task per
beat, and a slot is a list: no heap of 15,000 entries to sift per beat.  The tick is at most a
quarter of the server's own heart-beat interval (``tick_for``), as the interval a connection
beats at is never shorter.

``watch`` replaces a connection's entry (a new token; the old entry is skipped when it comes
up), so a connection is on the wheel at most once in effect.  Entries hold their connection by a
weak reference: a closed connection is freed at once, not when its last entry falls due
(with clients coming and going, that would keep a grace period's worth of them alive).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import weakref
from typing import Protocol

import trio

log = logging.getLogger(__name__)

#: Seconds per slot of the wheel when the server's heart-beats allow it (``tick_for``).
TICK = 0.05


def tick_for(send_ms: int) -> float:
    """The wheel's tick for a server that beats every ``send_ms`` at the shortest (0: never)."""
    return min(TICK, send_ms / 4000) if send_ms else TICK


class Watched(Protocol):
    """What the timer asks of a connection."""

    #: The token of the connection's live entry (``HeartBeats.watch`` sets it); None: none.
    beat_token: int | None

    def check(self, now: float, late: float) -> float | None:
        """Act on whatever is due at ``now``; when to be checked next (None: never), knowing
        that the visit may come up to ``late`` seconds after that."""
        ...


Entry = tuple[int, "weakref.ref[Watched]"]


class HeartBeats:
    """One timer task for the heart-beats and CONNECT deadlines of every connection."""

    def __init__(self, tick: float = TICK) -> None:
        self._tick = tick
        self._slots: dict[int, list[Entry]] = {}  # slot number (its end: number x tick) -> entries
        self._order: list[int] = []  # the slots' numbers, a heap
        self._tokens = itertools.count()
        self._wake = trio.Event()

    def watch(self, watched: Watched, when: float) -> None:
        """Check ``watched`` at ``when``, or up to a tick later (instead of when it said before)."""
        token = next(self._tokens)
        watched.beat_token = token
        slot = math.ceil(when / self._tick)
        if not self._order or slot < self._order[0]:
            self._wake.set()  # earlier than the run task sleeps for
        self._add(slot, (token, weakref.ref(watched)))

    def _add(self, slot: int, entry: Entry) -> None:
        entries = self._slots.get(slot)
        if entries is None:
            self._slots[slot] = [entry]
            heapq.heappush(self._order, slot)
        else:
            entries.append(entry)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Visit each slot's connections when it ends, forever."""
        task_status.started()
        order, slots, tick = self._order, self._slots, self._tick
        while True:
            self._wake = trio.Event()
            with trio.move_on_at(order[0] * tick if order else math.inf):
                await self._wake.wait()
            now = trio.current_time()
            after = math.floor(now / tick) + 1  # the first slot still to come: none is visited twice in a pass
            while order and order[0] * tick <= now:
                current = heapq.heappop(order)
                for token, ref in slots.pop(current):
                    watched = ref()
                    if watched is None or watched.beat_token != token:
                        continue  # the connection ended, or a later watch replaced this entry
                    try:
                        when = watched.check(now, tick)
                    except Exception:  # one connection's failure must not stop everyone's heart-beats
                        log.exception("heart-beat check failed")
                        when = None
                    if when is None:
                        watched.beat_token = None
                    else:
                        token = next(self._tokens)
                        watched.beat_token = token
                        self._add(max(math.ceil(when / tick), current + 1, after), (token, ref))
