"""The source's planning without Spark or a broker: ``minPartitions`` cuts, admission by
``minOffsetsPerTrigger`` / ``maxTriggerDelay``, and the option checks that fail before any
connection (a typo must not silently read from ``latest``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

pytest.importorskip("pyspark")  # the spark extra

from pyspark.sql.datasource import InputPartition

from stompmq.spark.client import StompmqError
from stompmq.spark.source import (
    Starting,
    StompmqStreamReader,
    StompmqStreamWriter,
    StompmqWriter,
    StreamRange,
    _due,
    _options,
    _ranges,
    _resolve,
    _seconds,
)

pytestmark = pytest.mark.spark


def covered(ranges: Sequence[InputPartition]) -> list[tuple[str, int]]:
    out = []
    for r in ranges:
        assert isinstance(r, StreamRange) and r.start < r.end
        out += [(r.stream, o) for o in range(r.start, r.end)]
    return sorted(out)


def test_min_partitions_cuts_ranges_in_proportion_and_covers_every_offset_once() -> None:
    start, end = {"a": 0, "b": 10, "c": 5}, {"a": 1000, "b": 110, "c": 5}
    for pieces in (1, 2, 4, 7, 50):
        ranges = _ranges(start, end, pieces)
        assert len(ranges) >= min(pieces, 2)  # (two streams have entries)
        assert covered(ranges) == [("a", o) for o in range(1000)] + [("b", o) for o in range(10, 110)]
    assert len(_ranges(start, end, 1)) == 2  # one per stream with entries
    assert [(r.start, r.end) for r in _ranges({"a": 0}, {"a": 8}, 4) if isinstance(r, StreamRange)] == [
        (0, 2), (2, 4), (4, 6), (6, 8)]
    assert len(_ranges({"a": 0}, {"a": 3}, 10)) == 3  # never an empty piece
    assert _ranges({"a": 4}, {"a": 4}, 4) == []


def test_min_offsets_wait_until_enough_or_overdue() -> None:
    start, latest = {"a": 0, "b": 0}, {"a": 3, "b": 4}
    assert _due(start, latest, None, False)
    assert _due(start, latest, 7, False)
    assert not _due(start, latest, 8, False)
    assert _due(start, latest, 8, True)  # maxTriggerDelay passed
    assert not _due(latest, latest, 8, True)  # nothing at all waiting


def test_durations() -> None:
    assert _seconds("15m", "maxTriggerDelay") == 900
    assert _seconds("500ms", "maxTriggerDelay") == 0.5
    with pytest.raises(StompmqError, match="maxTriggerDelay"):
        _seconds("soon", "maxTriggerDelay")


OK = {"url": "stomp://127.0.0.1:1", "destination": "/stream/a"}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"startingOffset": "earliest"},
         "unknown option 'startingOffset'; did you mean 'startingOffsets'\\? the options are url, .*startingOffsets"),
        ({"startingoffsets": "earliest", "maxoffsetspertriger": "5"},  # Spark lower-cases the names
         "unknown option 'maxoffsetspertriger'; did you mean 'maxOffsetsPerTrigger'\\?"),
        ({"includeHeaders": "true"}, "unknown option 'includeHeaders'; the options are"),  # (nothing near)
        ({"startingTimestamps": "1"}, "unknown option 'startingTimestamps'; .*the options are .*startingTimestamp, "
                                      "startingOffsetsByTimestamp, startingOffsetsByTimestampStrategy"),
        ({"minPartitions": "0"}, "option 'minPartitions' must be a positive integer"),
        ({"minPartitions": "many"}, "option 'minPartitions'"),
        ({"failOnDataLoss": "no"}, "option 'failOnDataLoss' must be true or false"),
    ],
)
def test_bad_read_options_fail_before_connecting(options: dict[str, str], problem: str) -> None:
    with pytest.raises(StompmqError, match=problem):
        _options({**OK, **options}, reading=True)


def test_unknown_write_option() -> None:
    with pytest.raises(StompmqError, match="unknown option 'startingOffsets'"):
        _options({**OK, "startingOffsets": "earliest"}, reading=False)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"sequenceColumn": "id"}, "option 'sequenceColumn' needs 'producerId'"),
        ({"producerId": ""}, "option 'producerId' must be 1 to 180 characters"),
        ({"producerId": "p" * 181}, "option 'producerId' must be 1 to 180 characters"),
    ],
)
def test_bad_idempotent_write_options(options: dict[str, str], problem: str) -> None:
    with pytest.raises(StompmqError, match=problem):
        StompmqWriter(_options({**OK, **options}, reading=False), options)


def test_a_streaming_write_takes_no_producer_id() -> None:
    with pytest.raises(StompmqError, match="option 'producerId' applies to batch writes"):
        StompmqStreamWriter(_options({**OK, "producerId": "p"}, reading=False), {"producerId": "p"})


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' must be a positive integer"),
        ({"maxMessagesPerTrigger": "-1"}, "option 'maxMessagesPerTrigger'"),
        ({"maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5"}, "give one"),
        ({"maxTriggerDelay": "1m"}, "needs 'minOffsetsPerTrigger'"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, "must not exceed"),
        ({"minOffsetsPerTrigger": "9", "maxTriggerDelay": "later"}, "option 'maxTriggerDelay'"),
        ({"endingOffsets": "latest"}, "option 'endingOffsets' applies to batch reads"),
        ({"startingTimestamp": "yesterday"}, "option 'startingTimestamp' must be epoch milliseconds"),
        ({"startingTimestamp": "-5"}, "option 'startingTimestamp' must be epoch milliseconds"),
        ({"startingOffsetsByTimestamp": '{"a": "1"}'}, "must be JSON {stream: epoch milliseconds}"),
        ({"startingOffsetsByTimestamp": "[1]"}, "must be JSON {stream: epoch milliseconds}"),
        ({"startingOffsetsByTimestamp": '{"b": 1}'}, "names b, not a stream of this read"),
        ({"startingTimestamp": "1", "startingOffsetsByTimestamp": '{"a": 1}'}, "give one"),
        ({"startingTimestamp": "1", "startingOffsetsByTimestampStrategy": "earliest"}, "must be error or latest"),
    ],
)
def test_bad_stream_options(options: dict[str, str], problem: str) -> None:
    with pytest.raises(StompmqError, match=problem):
        StompmqStreamReader(_options({**OK, **options}, reading=True), options)


def test_offsets_json_names_only_streams_of_the_read() -> None:
    bounds = {"a": (3, 10), "b": (0, 5)}
    assert _resolve('{"a": 4}', "earliest", bounds, "startingOffsets") == {"a": 4, "b": 0}
    assert _resolve("latest", "earliest", bounds, "startingOffsets") == {"a": 10, "b": 5}
    with pytest.raises(StompmqError, match="option 'startingOffsets' names c, not a stream of this read"):
        _resolve('{"c": 1}', "earliest", bounds, "startingOffsets")
    with pytest.raises(StompmqError, match="option 'endingOffsets' must map stream names to offsets"):
        _resolve('{"a": -1}', "latest", bounds, "endingOffsets")


def test_timestamp_options_name_a_time_per_stream() -> None:
    streams = ["a", "b"]
    assert Starting.parse({}, streams).times == {}
    one = Starting.parse({"startingTimestamp": "1700000000000", "startingOffsets": "earliest"}, streams)
    assert (one.times, one.offsets, one.option, one.latest) == (
        {"a": 1700000000000, "b": 1700000000000}, "earliest", "startingTimestamp", False)
    per = Starting.parse({"startingOffsetsByTimestamp": '{"b": 5}', "startingOffsetsByTimestampStrategy": "LATEST"},
                         streams)
    assert (per.times, per.option, per.latest) == ({"b": 5}, "startingOffsetsByTimestamp", True)
