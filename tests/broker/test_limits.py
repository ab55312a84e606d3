"""broker/limits.py's pure parts: the transaction-bytes ledger and the producer-id table."""

from __future__ import annotations

import pytest

from stompmq.broker.limits import HeldBytes, LimitError, admit_producer


def test_held_bytes_are_per_login_and_given_back() -> None:
    held = HeldBytes()
    held.charge("a", 600, 1000)
    held.charge("b", 900, 1000)  # another login has its own budget
    with pytest.raises(LimitError, match="would hold 1100 bytes") as refused:
        held.charge("a", 500, 1000)
    assert refused.value.limit == "max-transaction-bytes"
    held.release("a", 600)
    held.charge("a", 1000, 1000)
    held.release("a", 1000)
    held.release("b", 900)
    assert held.held == {}


def test_producers_past_the_limit_forget_the_stale_ones_first() -> None:
    producers: dict[str, int] = {"old": 5, "recovered": 9}
    seen = {"old": 0}
    with pytest.raises(LimitError, match="2 idempotent producers"):
        admit_producer(producers, seen, "new", 500, 2, 1000)  # none older than 1 s
    assert seen == {"old": 0, "recovered": 500}  # a recovered one is timed from the first scan
    admit_producer(producers, seen, "old", 900, 2, 1000)  # a known one: just seen again
    with pytest.raises(LimitError):
        admit_producer(producers, seen, "new", 1400, 2, 1000)
    admit_producer(producers, seen, "new", 1501, 2, 1000)  # "recovered" unseen for over 1 s
    assert sorted(producers) == ["old"] and seen["new"] == 1501
