"""ReadyWindow transitions, table-driven: each case is a list of steps and the state they end in.

Steps (``m(seq, prio)`` is a message; priority 4 unless given):
  ("push", seq[, prio])       a fresh SEND
  ("requeue", seq[, prio])    a message coming back (NACK, ack timeout, connection lost)
  ("pop",)                    the head is delivered
  ("page",)                   a page read starts (the request is remembered)
  ("loaded", [seqs], inflight) the last requested page comes back with those rows
  ("failed",)                 the page read failed
  ("clear",)                  a purge
  ("changed",)                another broker sharing the store made ready messages
The expected state: the seqs in memory in delivery order, spilled, boundary, and whether a
page is wanted.  ``BYTE_CASES`` run the same steps under a byte budget, with message sizes
given in KiB (``len(body) + MESSAGE_OVERHEAD``).
"""

from __future__ import annotations

from typing import Any

import pytest

from stompmq.broker.window import PROBE_PAGE, PageRequest, ReadyWindow
from stompmq.storage.base import MESSAGE_OVERHEAD, StoredMessage

Step = tuple[Any, ...]
KIB = 1024


def m(seq: int, prio: int = 4, kib: int | None = None) -> StoredMessage:
    body = b"" if kib is None else b"x" * (kib * KIB - MESSAGE_OVERHEAD)
    return StoredMessage(seq, "q", prio, {}, body, 0)


def contents(window: ReadyWindow) -> list[int]:
    return [msg.seq for prio in reversed(window.prios) for msg in window.levels[prio]]


def run(
    capacity: int | None, spilled: bool, steps: list[Step], max_kib: int | None = None, sizes: dict[int, int] | None = None
) -> tuple[ReadyWindow, list[PageRequest]]:
    """Apply ``steps``; ``max_kib`` is the byte budget, ``sizes`` the KiB of each seq (default 1 with a
    budget, an empty body without)."""
    window = ReadyWindow(capacity, spilled, None if max_kib is None else max_kib * KIB)
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
        elif op == "loaded":
            rows = [m(seq, prio_of.get(seq, 4), kib_of.get(seq, default_kib)) for seq in step[1]]
            window.page_loaded(requests[-1], rows, set(step[2]) if len(step) > 2 else set())
        elif op == "failed":
            window.page_failed()
        elif op == "clear":
            window.clear()
        elif op == "changed":
            window.store_changed()
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
    "SEND skipped during a load keeps a short page from unspilling": (
        4, True, [("page",), ("push", 9), ("loaded", [1])], [1], True, (-4, 1), True),
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
    # 4 KiB messages, 16 KiB budget: four fit; after three pops one is left, so three more fit
    steps: list[Step] = [("push", i) for i in range(1, 6)] + [("pop",)] * 3 + [("page",)]
    window, requests = run(1000, False, steps, max_kib=16, sizes={i: 4 for i in range(1, 6)})
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
