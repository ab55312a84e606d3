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
page is wanted.
"""

from __future__ import annotations

from typing import Any

import pytest

from stompmq.broker.window import PageRequest, ReadyWindow
from stompmq.storage.base import StoredMessage

Step = tuple[Any, ...]


def m(seq: int, prio: int = 4) -> StoredMessage:
    return StoredMessage(seq, "q", prio, {}, b"", 0)


def contents(window: ReadyWindow) -> list[int]:
    return [msg.seq for prio in reversed(window.prios) for msg in window.levels[prio]]


def run(capacity: int | None, spilled: bool, steps: list[Step]) -> tuple[ReadyWindow, list[PageRequest]]:
    window = ReadyWindow(capacity, spilled)
    requests: list[PageRequest] = []
    prio_of: dict[int, int] = {}
    for step in steps:
        op = step[0]
        if op in ("push", "requeue"):
            seq, prio = step[1], step[2] if len(step) > 2 else 4
            prio_of[seq] = prio
            getattr(window, op)(m(seq, prio))
        elif op == "pop":
            window.pop()
        elif op == "page":
            requests.append(window.start_page())
        elif op == "loaded":
            rows = [m(seq, prio_of.get(seq, 4)) for seq in step[1]]
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


def test_page_request_describes_the_window() -> None:
    window, requests = run(4, False, [("push", 1), ("push", 2), ("push", 3), ("push", 4), ("push", 5), ("pop",),
                                      ("pop",), ("pop",), ("page",)])
    assert requests == [PageRequest(after=(-4, 4), limit=3, epoch=1, skipped=0)]
    assert window.loading and not window.wants_page()


def test_loading_blocks_a_second_page() -> None:
    window, _ = run(4, True, [("page",)])
    assert window.loading and not window.wants_page()
