"""ReadyWindow transitions, table-driven: each case is a list of steps and the state they end in.

Steps (``m(seq, prio)`` is a message; priority 4 unless given):
  ("push", seq[, prio])       a fresh SEND
  ("requeue", seq[, prio])    a message coming back (NACK, ack timeout, connection lost)
  ("pop",)                    the head is delivered
  ("page",)                   a page read starts (the request is remembered)
  ("loaded", [rows], inflight) the last requested page comes back with those rows
  ("shared", [rows])           the same on a store other brokers share (their rows may sort among the tail)
  ("failed",)                 the page read failed
  ("clear",)                  a purge
  ("changed",)                another broker sharing the store made ready messages
  ("refill",)                 the window, run low, refills from its tail (it must be gapless)
  ("release", keep)           claim on demand: keep the first ``keep``, give the rest back
  ("look_back"[, key])        another broker freed rows from ``key`` on (None: anywhere): read
                              the store again from there
The expected state: the seqs in memory in delivery order, spilled, boundary, and whether a
page is wanted.  ``BYTE_CASES`` run the same steps under a byte budget, with message sizes
given in KiB (``len(body) + MESSAGE_OVERHEAD``).
"""

from __future__ import annotations

from typing import Any

import pytest

from stompmq.broker.window import PROBE_PAGE, PageRequest, ReadyWindow, SharedReadyWindow
from stompmq.storage.base import MESSAGE_OVERHEAD, StoredMessage

Step = tuple[Any, ...]
KIB = 1024


def m(seq: int, prio: int = 4, kib: int | None = None) -> StoredMessage:
    body = b"" if kib is None else b"x" * (kib * KIB - MESSAGE_OVERHEAD)
    return StoredMessage(seq, "q", prio, {}, body, 0)


def contents(window: ReadyWindow) -> list[int]:
    return [msg.seq for prio in reversed(window.prios) for msg in window.levels[prio]]


def run(
    capacity: int | None, spilled: bool, steps: list[Step], max_kib: int | None = None, sizes: dict[int, int] | None = None,
    kind: type[ReadyWindow] = ReadyWindow,
) -> tuple[ReadyWindow, list[PageRequest]]:
    """Apply ``steps`` to a window of ``kind``; ``max_kib`` is the byte budget, ``sizes`` the KiB of
    each seq (default 1 with a budget, an empty body without)."""
    window = kind(capacity, spilled, None if max_kib is None else max_kib * KIB)
    kib_of = dict(sizes or {})
    default_kib = None if max_kib is None else 1
    requests: list[PageRequest] = []
    prio_of: dict[int, int] = {}
    for step in steps:
        op = step[0]
        if op in ("push", "requeue"):
            seq, prio = step[1], step[2] if len(step) > 2 else 4
            prio_of[seq] = prio
            getattr(window, op)(m(seq, prio, kib_of.get(seq, default_kib)))
        elif op == "pop":
            window.pop()
        elif op == "page":
            requests.append(window.start_page())
        elif op in ("loaded", "shared"):  # a row is a seq, or (seq, priority) for one never pushed
            rows = [m(*row) if isinstance(row, tuple) else m(row, prio_of.get(row, 4), kib_of.get(row, default_kib))
                    for row in step[1]]
            window.page_loaded(requests[-1], rows, set(step[2]) if len(step) > 2 else set(), op == "shared")
        elif op == "failed":
            window.page_failed()
        elif op == "clear":
            window.clear()
        elif op == "changed":
            window.store_changed()
        elif op == "refill":
            assert window.refill()
        elif op == "release":
            window.release(step[1])
        elif op == "look_back":
            window.look_back(step[1] if len(step) > 1 else None)
        else:
            raise AssertionError(op)
    return window, requests


CASES: dict[str, tuple[int | None, bool, list[Step], list[int], bool, tuple[int, int] | None, bool]] = {
    # name: (capacity, spilled at start, steps, contents, spilled, boundary, wants_page)
    "memory store keeps everything": (None, False, [("push", i) for i in range(1, 6)], [1, 2, 3, 4, 5], False, None,
                                      False),
    "fits: no spill": (4, False, [("push", 1), ("push", 2)], [1, 2], False, None, False),
    "spill evicts the tail and sets the boundary": (
        3, False, [("push", 1), ("push", 2), ("push", 3), ("push", 4)], [1, 2, 3], True, (-4, 3), False),
    "push beyond the boundary is skipped": (
        2, False, [("push", 1), ("push", 2), ("push", 3), ("push", 4)], [1, 2], True, (-4, 2), False),
    "higher priority enters a full window, evicting the tail": (
        2, False, [("push", 1), ("push", 2), ("push", 3, 9)], [3, 1], True, (-4, 1), False),
    "lower priority beyond the boundary stays in the store": (
        2, False, [("push", 1, 5), ("push", 2, 5), ("push", 3, 5), ("push", 4, 1)], [1, 2], True, (-5, 2), False),
    "spilled from the start: everything waits for a page": (
        4, True, [("push", 1), ("push", 2)], [], True, None, True),
    "page in from the start": (
        4, True, [("page",), ("loaded", [1, 2, 3])], [1, 2, 3], False, None, False),
    "full page keeps the queue spilled": (
        2, True, [("page",), ("loaded", [1, 2])], [1, 2], True, (-4, 2), False),
    "page after the boundary continues in order": (
        2, False, [("push", 1), ("push", 2), ("push", 3), ("pop",), ("pop",), ("page",), ("loaded", [3])],
        [3], False, None, False),
    "late SEND during a load cuts the page there": (
        4, True, [("page",), ("push", 3), ("loaded", [1, 2, 4])], [1, 2], True, (-4, 2), True),
    "a SEND during a load waits in the tail and joins a short page": (
        4, True, [("page",), ("push", 9), ("loaded", [1])], [1, 9], False, None, False),
    "stale page (boundary moved back) is dropped": (
        2, False, [("push", 1), ("push", 2), ("push", 3), ("pop",), ("pop",), ("page",), ("push", 4, 9),
                   ("push", 5, 9), ("push", 6, 9), ("loaded", [3])],
        [4, 5], True, (-9, 5), False),
    "rows in flight are not ready": (
        4, True, [("page",), ("loaded", [1, 2, 3], [2])], [1, 3], False, None, False),
    "redelivery into the window goes back to its place by seq": (
        4, False, [("push", 2), ("push", 3), ("requeue", 1)], [1, 2, 3], False, None, False),
    "redelivery into the middle of its level": (
        4, False, [("push", 1), ("push", 3), ("requeue", 2)], [1, 2, 3], False, None, False),
    "redelivery into a paged-out region stays in the store": (
        2, False, [("push", 1), ("push", 2), ("push", 3), ("requeue", 4)], [1, 2], True, (-4, 2), False),
    "redelivery of a higher priority before the boundary enters": (
        2, False, [("push", 1), ("push", 2), ("push", 3), ("requeue", 4, 8)], [4, 1], True, (-4, 1), False),
    "priorities are delivered highest first, FIFO within one": (
        10, False, [("push", 1, 1), ("push", 2, 9), ("push", 3, 1), ("push", 4, 9)], [2, 4, 1, 3], False, None,
        False),
    "page across a priority boundary": (
        4, True, [("push", 1, 9), ("push", 2, 1), ("page",), ("loaded", [1, 2])], [1, 2], False, None, False),
    "failed page can be asked again": (
        4, True, [("page",), ("failed",)], [], True, None, True),
    "purge empties the window and spills a durable queue": (
        4, False, [("push", 1), ("push", 2), ("clear",)], [], True, None, True),
    "another broker's messages are paged in after the window's tail": (
        4, False, [("push", 1), ("push", 2), ("changed",), ("page",), ("loaded", [5])], [1, 2, 5], False, None,
        False),
    "a change noticed during a load keeps the queue spilled": (
        4, True, [("page",), ("changed",), ("loaded", [1])], [1], True, (-4, 1), True),
    "a change noticed by an empty window pages from the start": (
        4, False, [("changed",)], [], True, None, True),
    "release keeps the head and moves the boundary back": (
        10, False, [("push", i) for i in range(1, 6)] + [("release", 2)], [1, 2], True, (-4, 2), True),
    "release of an in-memory window within its room changes nothing": (
        10, False, [("push", 1), ("push", 2), ("release", 2)], [1, 2], False, None, False),
    "release keeps the highest priorities": (
        10, False, [("push", 1, 1), ("push", 2, 9), ("push", 3, 4), ("release", 1)], [2], True, (-9, 2), True),
    "a page read after a release continues after what was kept": (
        10, False, [("push", i) for i in range(1, 6)] + [("release", 2), ("page",), ("loaded", [3, 4])],
        [1, 2, 3, 4], False, None, False),
    "a release during a load makes the page stale": (
        10, False, [("push", 1), ("push", 2), ("changed",), ("page",), ("release", 1), ("loaded", [3])],
        [1], True, (-4, 1), True),
    "look back forgets the window and reads from the start": (
        10, False, [("push", 1), ("push", 2), ("look_back",)], [], True, None, True),
    "look back to a key forgets from it and reads from just before it": (
        10, False, [("push", 1), ("push", 2), ("push", 3), ("look_back", (-4, 2))], [1], True, (-4, 1), True),
    "look back to a key past a spilled boundary keeps the window and the boundary": (
        3, False, [("push", i) for i in range(1, 5)] + [("look_back", (-4, 9))], [1, 2, 3], True, (-4, 3), False),
    "look back to a key of a higher priority forgets the lower ones": (
        10, False, [("push", 1), ("push", 2, 9), ("look_back", (-9, 2))], [], True, (-9, 1), True),
    "a page read after a look back to a key continues from the key": (
        10, False, [("push", 1), ("push", 2), ("look_back", (-4, 2)), ("page",), ("loaded", [2, 3])],
        [1, 2, 3], False, None, False),
    "look back during a load waits for the page": (
        10, True, [("page",), ("look_back",), ("loaded", [1])], [1], True, (-4, 1), True),
    "purge of a memory queue forgets everything": (
        None, False, [("push", 1), ("clear",)], [], False, None, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_transition(name: str) -> None:
    capacity, spilled, steps, expected, expect_spilled, boundary, wants_page = CASES[name]
    window, _ = run(capacity, spilled, steps)
    assert contents(window) == expected
    assert window.size == len(expected)
    assert window.spilled is expect_spilled
    assert window.boundary == boundary
    assert window.wants_page() is wants_page


BYTE_CASES: dict[str, tuple[int, dict[int, int], list[Step], list[int], bool, tuple[int, int] | None, bool]] = {
    # name: (budget KiB, sizes KiB, steps, contents, spilled, boundary, wants_page); capacity 100, not spilled
    "the byte budget evicts the tail before the count does": (
        3, {}, [("push", i) for i in range(1, 5)], [1, 2, 3], True, (-4, 3), False),
    "one message over the budget stays, alone, and nothing spills": (
        3, {1: 10}, [("push", 1)], [1], False, None, False),
    "a big message of higher priority evicts several small ones": (
        4, {4: 3}, [("push", 1), ("push", 2), ("push", 3), ("push", 4, 9)], [4, 1], True, (-4, 1), False),
    "no page while more than half the bytes are in memory": (
        4, {}, [("push", i) for i in range(1, 6)] + [("pop",)], [2, 3, 4], True, (-4, 4), False),
    "a page once half the bytes are gone": (
        4, {}, [("push", i) for i in range(1, 6)] + [("pop",), ("pop",)], [3, 4], True, (-4, 4), True),
    "a page whose sizes were underestimated is trimmed at once": (
        4, {1: 2, 2: 2, 3: 2}, [("clear",), ("page",), ("loaded", [1, 2, 3])], [1, 2], True, (-4, 2), False),
    "a requeued message counts against the budget too": (
        3, {}, [("push", 2), ("push", 3), ("push", 4), ("requeue", 1)], [1, 2, 3], True, (-4, 3), False),
}


@pytest.mark.parametrize("name", list(BYTE_CASES))
def test_byte_budget_transition(name: str) -> None:
    max_kib, sizes, steps, expected, expect_spilled, boundary, wants_page = BYTE_CASES[name]
    window, _ = run(100, False, steps, max_kib, sizes)
    assert contents(window) == expected
    assert window.bytes == sum(sizes.get(seq, 1) for seq in expected) * KIB
    assert window.spilled is expect_spilled
    assert window.boundary == boundary
    assert window.wants_page() is wants_page


def test_a_page_of_unknown_sizes_is_a_probe() -> None:
    _, requests = run(10_000, True, [("page",)], max_kib=16 * KIB)
    assert requests[-1].limit == PROBE_PAGE


def test_a_page_is_sized_by_the_byte_budget() -> None:
    # 4 KiB messages, 16 KiB budget: four fit; after three pops one is left, so three more fit.
    # The tail (8 KiB) keeps 6 and 7, so the page that reads 5 reaches it.
    steps: list[Step] = [("push", i) for i in range(1, 8)] + [("pop",)] * 3 + [("page",)]
    window, requests = run(1000, False, steps, max_kib=16, sizes={i: 4 for i in range(1, 8)})
    assert requests[-1].limit == 3
    window.page_loaded(requests[-1], [m(i, 4, 4) for i in (5, 6, 7)], set())
    assert contents(window) == [4, 5, 6, 7] and window.bytes == 16 * KIB and window.unit == 4 * KIB


def test_page_request_describes_the_window() -> None:
    window, requests = run(4, False, [("push", 1), ("push", 2), ("push", 3), ("push", 4), ("push", 5), ("pop",),
                                      ("pop",), ("pop",), ("page",)])
    assert requests == [PageRequest(after=(-4, 4), limit=3, epoch=1, skipped=0)]
    assert window.loading and not window.wants_page()


def test_loading_blocks_a_second_page() -> None:
    window, _ = run(4, True, [("page",)])
    assert window.loading and not window.wants_page()


TAIL_CASES: dict[str, tuple[int, bool, list[Step], list[int], list[int], bool, tuple[int, int] | None]] = {
    # name: (capacity, spilled at start, steps, contents, tail, spilled, boundary); the tail holds
    # half the capacity
    "eviction starts a gapless tail": (
        4, False, [("push", i) for i in range(1, 7)], [1, 2, 3, 4], [5, 6], True, (-4, 4)),
    "a full tail loses its oldest to the store, which leaves a gap": (
        4, False, [("push", i) for i in range(1, 8)], [1, 2, 3, 4], [6, 7], True, (-4, 4)),
    "refill takes the tail without a read and ends the spill": (
        4, False, [("push", i) for i in range(1, 6)] + [("pop",), ("pop",), ("refill",)], [3, 4, 5], [], False,
        None),
    "a page that reaches the tail joins it to the window": (
        4, False, [("push", i) for i in range(1, 8)] + [("pop",), ("pop",), ("page",), ("loaded", [5, 6])],
        [3, 4, 5, 6], [7], True, (-4, 6)),
    "a short page joins the tail": (
        4, False, [("push", i) for i in range(1, 8)] + [("pop",)] * 3 + [("page",), ("loaded", [5])],
        [4, 5, 6, 7], [], False, None),
    "a SEND lost during the read cuts the page and keeps the spill": (
        4, False, [("push", i) for i in range(1, 8)] + [("pop",), ("pop",), ("page",), ("push", 8),
                                                        ("loaded", [5, 6])],
        [3, 4, 5], [7, 8], True, (-4, 5)),
    "rows beyond the tail's start that it lacks end the tail": (
        4, False, [("push", i) for i in range(1, 6)] + [("pop",), ("pop",), ("page",), ("loaded", [5, 9])],
        [3, 4], [], True, (-4, 4)),
    "a window spilled from the start keeps a tail": (
        4, True, [("push", 1), ("push", 2)], [], [1, 2], True, None),
    "an untracked tail joins only a page that read the store to its end": (
        4, True, [("push", 5), ("push", 6), ("page",), ("loaded", [1, 2, 3, 4])], [1, 2, 3, 4], [5, 6], True,
        (-4, 4)),
    "an untracked tail joins a short page": (
        4, True, [("push", 5), ("push", 6), ("page",), ("loaded", [1, 5, 6])], [1, 5, 6], [], False, None),
    "a full page that reads into an untracked tail takes that part of it": (
        8, True, [("push", 7), ("push", 8), ("push", 9), ("page",), ("loaded", [1, 2, 3, 4, 5, 6, 7, 8])],
        [1, 2, 3, 4, 5, 6, 7, 8], [9], True, (-4, 8)),
    "an older row of a lower priority beyond an untracked tail ends it": (
        4, True, [("push", 5, 4), ("push", 6, 4), ("page",), ("loaded", [5, 6, (2, 1)])], [], [], True, None),
    "a priority inside the tail's range ends the tail": (
        4, False, [("push", i, 5) for i in range(1, 6)] + [("push", 6, 1), ("push", 7, 3)],
        [1, 2, 3, 4], [], True, (-5, 4)),
    "a priority before the tail's start leaves the tail alone": (
        4, False, [("push", i, 5) for i in range(1, 5)] + [("push", 5, 3), ("push", 6, 4)],
        [1, 2, 3, 4], [5], True, (-5, 4)),
    "another broker's messages end the tail": (
        4, False, [("push", i) for i in range(1, 6)] + [("changed",)], [1, 2, 3, 4], [], True, (-4, 4)),
    "a purge forgets the tail": (
        4, False, [("push", i) for i in range(1, 6)] + [("clear",)], [], [], True, None),
    "release keeps the tail's oldest within what it keeps, and the boundary": (
        4, False, [("push", i) for i in range(1, 7)] + [("pop",), ("pop",), ("release", 3)], [3, 4], [5], True,
        (-4, 4)),
    "a shared page reaching the tail merges another broker's rows among it": (
        4, True, [("push", 5), ("push", 7), ("page",), ("shared", [1, 6])], [1, 5, 6, 7], [], False, None),
}


@pytest.mark.parametrize("name", list(TAIL_CASES))
def test_tail_transition(name: str) -> None:
    capacity, spilled, steps, expected, tail, expect_spilled, boundary = TAIL_CASES[name]
    window, _ = run(capacity, spilled, steps)
    assert contents(window) == expected
    assert [msg.seq for msg in window.tail] == tail
    assert [msg.seq for msg in window.messages()] == expected + tail
    assert window.spilled is expect_spilled
    assert window.boundary == boundary


def test_sends_during_a_read_wait_in_the_tail_so_the_read_still_ends_the_spill() -> None:
    # 16 KiB window, 8 KiB tail: 5 (4 KiB) is lost when 6 (6 KiB) joins the tail; 8 arrives while
    # the page with 5 is read, and the tail has room for it.
    sizes = {1: 4, 2: 4, 3: 4, 4: 4, 5: 4, 6: 6, 7: 1, 8: 1}
    steps: list[Step] = [("push", i) for i in range(1, 8)] + [("pop",)] * 3 + [("page",), ("push", 8),
                                                                               ("loaded", [5, 6])]
    window, _ = run(100, False, steps, max_kib=16, sizes=sizes)
    assert contents(window) == [4, 5, 6, 7, 8] and not window.tail
    assert not window.spilled and window.bytes == 16 * KIB


def test_refill_waits_for_room_for_a_large_message() -> None:
    # 16 KiB window: 1-4 fill it, 5 (14 KiB) is evicted into the tail; with 4 KiB left in the
    # window 5 does not fit, so refill moves nothing until the window is empty.
    sizes = {1: 4, 2: 4, 3: 4, 4: 4, 5: 14}
    window, _ = run(100, False, [("push", i) for i in range(1, 6)] + [("pop",)] * 3, max_kib=16, sizes=sizes)
    assert window.wants_page() and window.gapless
    assert not window.refill() and contents(window) == [4]
    window.pop()
    assert window.refill() and contents(window) == [5] and not window.spilled


def test_the_tail_is_held_and_a_lost_message_is_not() -> None:
    window = ReadyWindow(2, False)  # a tail of one
    msgs = [m(seq) for seq in range(1, 5)]
    for msg in msgs:
        msg.held = window.push(msg)
    assert [msg.held for msg in msgs] == [True, True, False, True]  # 3 went to the tail, lost to 4


def test_holds_covers_the_window_and_the_tail() -> None:
    window, _ = run(2, False, [("push", i) for i in range(1, 6)])  # window 1, 2; 3 and 4 lost; tail 5
    assert [window.holds(m(seq)) for seq in range(1, 7)] == [True, True, False, False, True, True]
    untracked, _ = run(2, True, [("push", 5)])  # the store may hold anything: only the tail itself
    assert [untracked.holds(m(seq)) for seq in (4, 5, 6)] == [False, True, False]


def test_release_returns_the_tail_and_the_excess_no_longer_held() -> None:
    window = ReadyWindow(4, False)  # a tail of two
    msgs = [m(seq) for seq in range(1, 8)]
    for msg in msgs:
        msg.held = window.push(msg)
    assert contents(window) == [1, 2, 3, 4] and [msg.seq for msg in window.tail] == [6, 7]
    released = window.release(1)
    assert sorted(msg.seq for msg in released) == [2, 3, 4, 6, 7]
    assert not any(msg.held for msg in released) and msgs[0].held
    assert contents(window) == [1] and not window.tail and window.boundary == (-4, 1)


def test_look_backs_during_a_load_are_remembered_from_the_lowest_key() -> None:
    window, requests = run(10, True, [("page",), ("look_back", (-4, 7)), ("look_back", (-4, 5))])
    assert window.rewind and window.rewind_first == (-4, 5)
    window.look_back((-4, 6))
    assert window.rewind_first == (-4, 5)
    window.look_back(None)  # unknown: from the start
    assert window.rewind_first is None
    window.look_back((-4, 3))
    assert window.rewind_first is None


def test_look_back_during_a_load_is_remembered_for_after_it() -> None:
    window, requests = run(10, True, [("page",), ("look_back",)])
    assert window.rewind and window.loading
    window.page_loaded(requests[-1], [m(1)], set())
    window.look_back()
    assert not window.rewind and contents(window) == [] and window.boundary is None and window.wants_page()


def test_on_a_shared_store_a_send_numbered_below_another_brokers_message_goes_to_its_place() -> None:
    """Each broker numbers its SENDs from its own block: a fresh SEND (100) may sort before another
    broker's message read into the window (500).  Appended after it, the level's last was no longer
    its end; a change then set the boundary at 100, and the next page read 500 again, a second
    copy of a message still in memory, delivered twice, both unflagged."""
    steps: list[Step] = [("page",), ("loaded", [500]), ("push", 100)]
    window, _ = run(4, True, steps, kind=SharedReadyWindow)
    assert contents(window) == [100, 500]
    window, requests = run(4, True, [*steps, ("changed",), ("page",)], kind=SharedReadyWindow)
    assert window.boundary == (-4, 500) and requests[-1].after == (-4, 500)
