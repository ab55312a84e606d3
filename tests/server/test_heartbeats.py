"""The one heart-beat timer, with plain objects for connections, in virtual time."""

from __future__ import annotations

import gc
import weakref

import trio
import trio.testing

from stompmq.server.heartbeats import HeartBeats


class Beating:
    """Asks to be checked every ``every`` seconds and notes when it was."""

    def __init__(self, every: float | None) -> None:
        self.every = every
        self.beat_token: int | None = None
        self.checked: list[float] = []

    def check(self, now: float, late: float) -> float | None:
        self.checked.append(now)
        return None if self.every is None else now + self.every


async def test_each_watched_object_is_checked_when_it_asks(autojump_clock: trio.abc.Clock) -> None:
    beats = HeartBeats()
    async with trio.open_nursery() as nursery:
        await nursery.start(beats.run)
        fast, slow, once = Beating(1.0), Beating(4.0), Beating(None)
        beats.watch(fast, 1.0)
        beats.watch(slow, 4.0)
        beats.watch(once, 2.0)
        beats.watch(once, 3.0)  # replaces the entry at 2.0
        await trio.sleep(10.5)
        nursery.cancel_scope.cancel()
    assert fast.checked == [float(t) for t in range(1, 11)]
    assert slow.checked == [4.0, 8.0]
    assert once.checked == [3.0]


async def test_a_dropped_connection_is_freed_before_its_entry_falls_due(autojump_clock: trio.abc.Clock) -> None:
    """Entries hold connections weakly: closed ones must not pile up for a grace period."""
    beats = HeartBeats()
    async with trio.open_nursery() as nursery:
        await nursery.start(beats.run)
        gone = Beating(1.0)
        ref = weakref.ref(gone)
        beats.watch(gone, 20.0)
        del gone
        gc.collect()
        assert ref() is None
        await trio.sleep(30.0)  # its entry comes up and is skipped
        nursery.cancel_scope.cancel()


async def test_a_visit_comes_at_the_end_of_its_tick_never_early(autojump_clock: trio.abc.Clock) -> None:
    """The wheel visits a slot when it ends: at most a tick after the time asked for."""
    beats = HeartBeats(tick=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(beats.run)
        odd = Beating(0.33)
        beats.watch(odd, 0.33)
        await trio.sleep(5.0)
        nursery.cancel_scope.cancel()
    asked = [0.33] + [t + 0.33 for t in odd.checked[:-1]]
    assert len(odd.checked) >= 10
    assert all(0 <= t - a <= 0.05 + 1e-9 for a, t in zip(asked, odd.checked)), list(zip(asked, odd.checked))
    assert any(t - a > 0.01 for a, t in zip(asked, odd.checked))  # slots, not exact times
