"""The rate history: one point per sample, rings bounded in length and in number."""

from __future__ import annotations

from stompmq.server.history import RateHistory


def test_points_are_rates_and_rings_are_bounded() -> None:
    history = RateHistory(points=3, queues=2)
    counts = {("/", "a"): (0, 0, 0), ("/", "b"): (0, 0, 0), ("/", "c"): (0, 0, 0)}
    history.record(100.0, 5.0, {}, counts)
    assert history.of(None) == ([(100.0, 0, 0, 0)], False)
    assert history.queues == {}  # idle queues get no ring
    for t in range(1, 6):
        before = counts
        counts = {key: (n + 10 * t, d + 5 * t, a) for key, (n, d, a) in before.items()}
        history.record(100.0 + 5 * t, 5.0, before, counts)
    assert len(history.of(None)[0]) == 3  # the last three samples only
    assert history.of(None)[0][-1] == (125.0, 30.0, 15.0, 0.0)  # three queues of 10/s and 5/s
    assert len(history.queues) == 2  # at most two queues have a ring
    assert history.of(("/", "a"))[0][-1] == (125.0, 10.0, 5.0, 0.0)
    assert history.of(("/", "nope")) == ([], False)
    history.record(130.0, 5.0, counts, {("/", "b"): counts[("/", "b")]})  # a and c were deleted
    assert list(history.queues) == [("/", "b")]


def test_a_range_past_the_fine_points_reads_the_coarse_ones() -> None:
    """An hour at one point a sample, eight at one a minute (the mean of twelve samples); a
    range the fine points cover is answered from them, a longer one from the coarse points and
    the fine ones newer than the last of them."""
    history = RateHistory(points=24, coarse_points=10)
    counts = {("/", "a"): (0, 0, 0)}
    for t in range(1, 61):  # 60 samples 5 s apart: 12 per minute
        before = counts
        counts = {key: (n + 5 * t, d, a) for key, (n, d, a) in before.items()}  # t msg/s
        history.record(5.0 * t, 5.0, before, counts)
    fine, coarse = history.of(("/", "a"), 60)
    assert not coarse and [p[0] for p in fine] == [5.0 * t for t in range(48, 61)]
    points, coarse = history.of(("/", "a"), 600)
    assert coarse
    assert [p[0] for p in points] == [60.0, 120.0, 180.0, 240.0, 300.0]  # five minutes of means
    assert points[0][1] == sum(range(1, 13)) / 12 and points[-1][1] == sum(range(49, 61)) / 12
    assert history.of(None, 600)[0] == points
    young = RateHistory(points=24)
    young.record(5.0, 5.0, {}, counts)
    assert young.of(None, 28800) == ([(5.0, 1830.0, 0.0, 0.0)], False)  # fewer than a ring: all fine
