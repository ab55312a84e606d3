"""Deadlines: due in order, cancellable, and memory that follows the timers pending."""

from __future__ import annotations

import math

from stompmq.broker.timers import MIN_COMPACT, Deadlines


def due(deadlines: Deadlines) -> list[tuple[str, tuple[object, ...]]]:
    out = []
    while (item := deadlines.pop_due()) is not None:
        out.append(item)
    return out


def test_nothing_armed_means_no_deadline() -> None:
    assert Deadlines().next_deadline() == math.inf


def test_timers_fire_in_deadline_order_then_arming_order() -> None:
    d = Deadlines()
    d.now = 10.0
    d.arm(2.0, "b", 1)
    d.arm(1.0, "a", 2)
    d.arm(2.0, "c", 3)
    assert d.next_deadline() == 11.0
    d.now = 11.5
    assert due(d) == [("a", (2,))]
    d.now = 12.0
    assert due(d) == [("b", (1,)), ("c", (3,))]
    assert d.next_deadline() == math.inf


def test_a_cancelled_timer_never_fires_and_does_not_hold_the_deadline() -> None:
    d = Deadlines()
    first = d.arm(1.0, "first")
    d.arm(5.0, "second")
    d.cancel(first)
    assert d.next_deadline() == 5.0
    d.now = 10.0
    assert due(d) == [("second", ())]


def test_cancelling_a_spent_or_cancelled_timer_is_a_no_op() -> None:
    d = Deadlines()
    timer = d.arm(0.0, "x")
    assert due(d) == [("x", ())]
    d.cancel(timer)
    d.cancel(timer)
    assert len(d) == 0
    other = d.arm(1.0, "y")
    d.cancel(other)
    d.cancel(other)
    assert len(d) == 0


def test_earlier_deadline_wakes_the_runtime_once() -> None:
    d = Deadlines()
    woken = []
    d.on_earlier = lambda: woken.append(d.now)
    d.arm(5.0, "a")
    d.arm(7.0, "b")  # later: the runtime's sleep already covers it
    d.arm(1.0, "c")
    assert len(woken) == 2


def test_memory_follows_pending_timers_not_history() -> None:
    """A million timers armed and cancelled leave a heap the size of what is pending."""
    d = Deadlines()
    keep = [d.arm(3600.0, "keep", i) for i in range(10)]
    for i in range(1_000_000):
        d.cancel(d.arm(3600.0, "ack", i))
    assert len(d) == len(keep)
    assert len(d._heap) < 2 * MIN_COMPACT
