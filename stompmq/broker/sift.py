"""Selectors on a queue: each message to a subscriber whose selector it matches, the rest sifted.

Theory of operation
-------------------
A queue whose subscribers have no selector never comes here: the dispatcher
(``Dispatcher.pump``) takes this path instead of ``Queue.dispatch`` only while ``Queue.picky``
counts a subscriber with a ``selector`` header or a consumer priority, so a plain queue pays
nothing per message (one test in ``Queue.taker``, which sends a message straight to a
subscriber only when neither is involved).

``sift`` walks the ready window from its head, as the plain dispatch does, and for each message:

* *a taker*: the first subscriber in round-robin order that has room and whose selector matches
  it (no selector matches everything) gets it, and the round-robin moves past that subscriber;
  with consumer priorities (``activemq.priority``, ``x-priority``), the first such subscriber of
  the highest priority among them, so a lower one gets messages only while every higher one
  that matches is full;
* *a busy match*: no subscriber with room matches, but one without room does: the message is
  parked for it (``Queue.park``, the parking of message groups, bounded by the window's
  capacity), so the messages behind it flow to the others; it goes out first when that
  subscriber has room again, back to the window if it leaves;
* *nobody's*: no subscriber of the queue matches it: it is *sifted out* (``Queue.sift_out``) and
  the walk goes on.  On a durable store it leaves memory (no longer ``held``; on a shared store its
  row is freed for the brokers whose subscribers may match, ``Dispatcher._pump_shared``) and the
  window remembers the lowest order key it sifted (``ReadyWindow.sift_floor``); on the memory
  store, which has nowhere else to keep it, it waits in ``Queue.aside``, in order.  Either way it
  still expires on time: the store's expiry sweep is told it is not in memory (``Queue.sifted``),
  and the memory store's ``aside`` is swept (``aside_sweep.py``).

So a backlog that no subscriber matches costs one selector evaluation per message and per
subscriber once, then lies in the store only: the window pages on past it (it shrank, so it asks
for the next page), and the matching messages behind it are reached at the speed of page reads
(a cursor over the store per queue, shared by its selectors: docs/selectors.md has the figures).
Memory stays within the window's budgets, never more than the same backlog without selectors.

What a subscriber that joins or leaves may change: the sifted messages may match the newcomer
(or, on leaving, a single active consumer's successor), so the queue looks back (``rethink``): the
window reads the store again from the sift floor (``ReadyWindow.look_back``), the memory store's
``aside`` goes back into the window.  Nothing else reads the sifted rows again.

Message groups stay sticky: a message of a group whose owner's selector matches it goes to the
owner, or is parked for it while it has no room, whatever the others' room or priority; the
first match of a group without owner owns it (``Queue.own``).  One its owner rejects goes to a
subscriber that matches it, as any message, the group staying its owner's.  A message whose
ack timeout expired is not steered to another subscriber here.  A single active consumer gets
what its selector matches; the rest is sifted out for its successors.

A queue whose subscribers all have selectors on a store of one broker asks the store to leave
out of its page reads what none of them can match (``Queue.header_filter``,
storage/header_filter.py): those rows are sifted out unread, the sift floor lowered to the
read's start (``ReadyWindow.filtered``).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..storage.base import StoredMessage
from .queue import Queue, S, group_of


def sift(queue: Queue[S], now_ms: int, expired: list[StoredMessage]) -> Iterator[tuple[S, StoredMessage]]:
    """``Queue.dispatch`` for a queue with selector subscribers: (subscriber, message) pairs,
    each message to a subscriber with room that it matches (see the module's docstring)."""
    window = queue.window
    if queue.exclusive:
        single = queue.exclusive[0]
        selector = single.selector
        while window.size and single.active and single.has_room():
            msg = window.pop()
            if msg.expires is not None and msg.expires < now_ms:
                expired.append(msg)
            elif selector is None or selector.matches(msg):
                yield single, msg
            else:
                queue.sift_out(msg)  # the standby subscribers' after a failover (``rethink``)
        return
    if queue.parked:
        yield from queue.unpark()
    ready_subs = queue.ready_subs
    prioritized = any(sub.priority for sub in queue.members)
    while window.size:
        if queue.front() is None:
            return  # nobody has room
        head = window.peek()
        if head.expires is not None and head.expires < now_ms:
            expired.append(window.pop())
            continue
        name = group_of(head)
        if name is not None and queue.groups:
            group = queue.groups.get(name)
            if group is not None and _matches(group.owner, head):  # sticky: its owner's
                holder = group.owner
                if holder.active and holder.has_room() and not (queue.parked and holder in queue.parked):
                    queue.own(name, holder, head)
                    yield holder, window.pop()
                elif not queue.park(holder):
                    return  # parking is full: wait for the busy subscribers to take theirs
                else:
                    queue.own(name, holder, head)
                continue
        taker = None
        at = 0
        for index, sub in enumerate(ready_subs):
            if sub.active and sub.has_room() and (sub.selector is None or sub.selector.matches(head)):
                if taker is None or sub.priority > taker.priority:
                    taker, at = sub, index
                    if not prioritized:
                        break
        if taker is not None:
            ready_subs.rotate(-at - 1)  # the round-robin goes on after the taker
            if name is not None:
                queue.own(name, taker, head)
            yield taker, window.pop()
            continue
        owner = _busy_match(queue, head)
        if owner is None:
            queue.sift_out(window.pop())
        elif not queue.park(owner):
            return  # parking is full: wait for the busy subscribers to take theirs
        elif name is not None:
            queue.own(name, owner, head)


def _matches(sub: S, msg: StoredMessage) -> bool:
    return sub.selector is None or sub.selector.matches(msg)


def _busy_match(queue: Queue[S], msg: StoredMessage) -> S | None:
    """A subscriber without room now whose selector matches ``msg`` (those with room were asked)."""
    for sub in queue.members:
        if sub.active and not (sub.in_ready and sub.has_room()) and _matches(sub, msg):
            return sub
    return None
