"""The rate history: one point per sample, rings bounded in length and in number."""

from __future__ import annotations

from stompmq.server.history import RateHistory


def test_points_are_rates_and_rings_are_bounded() -> None:
    history = RateHistory(points=3, queues=2)
    counts = {("/", "a"): (0, 0, 0), ("/", "b"): (0, 0, 0), ("/", "c"): (0, 0, 0)}
    history.record(100.0, 5.0, {}, counts)
    assert history.of(None) == [(100.0, 0, 0, 0)]
    assert history.queues == {}  # idle queues get no ring
    for t in range(1, 6):
        before = counts
        counts = {key: (n + 10 * t, d + 5 * t, a) for key, (n, d, a) in before.items()}
        history.record(100.0 + 5 * t, 5.0, before, counts)
    assert len(history.of(None)) == 3  # the last three samples only
    assert history.of(None)[-1] == (125.0, 30.0, 15.0, 0.0)  # three queues of 10/s and 5/s
    assert len(history.queues) == 2  # at most two queues have a ring
    assert history.of(("/", "a"))[-1] == (125.0, 10.0, 5.0, 0.0)
    assert history.of(("/", "nope")) == []
    history.record(130.0, 5.0, counts, {("/", "b"): counts[("/", "b")]})  # a and c were deleted
    assert list(history.queues) == [("/", "b")]
