"""The Spark tasks' STOMP client (stompmq/spark/client.py) without Spark: the frame cutter of
``read_chunks`` against a real broker, its fallback to the general parser, and its errors, and
the Arrow record batches the source builds from its chunks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")  # the spark extra

from stompmq.protocol import Frame, encode_frame
from stompmq.spark.client import Connection, StompmqError
from stompmq.spark.source import _batch

from ..support.broker_thread import BrokerThread
from ..support.waiting import wait_past

pytestmark = pytest.mark.spark


def test_read_chunks_cuts_frames_and_falls_back_for_escaped_headers(memory_broker: BrokerThread) -> None:
    def frames() -> Iterator[bytes]:
        for i in range(3000):  # several recv chunks, frames split across them
            headers = {"destination": "/stream/c", "receipt": str(i), "n": str(i)}
            if i % 1000 == 7:
                headers["odd"] = "a:b\nc\\d"  # escaped on the wire: the general parser's path
            yield encode_frame(Frame("SEND", headers, f"body-{i}\x00tail".encode()), "1.2")

    with Connection(f"stomp://127.0.0.1:{memory_broker.port}") as conn:
        conn.send_all(frames())
        chunks = list(conn.read_chunks("c", 5, 2500, 700))  # chunks across recv boundaries
    assert [(c.start, len(c.bodies)) for c in chunks] == [(5, 700), (705, 700), (1405, 700), (2105, 395)]
    rows = [row for c in chunks for row in _batch("/stream/c", c).to_pylist()]
    assert [r["offset"] for r in rows] == list(range(5, 2500))
    assert all(r["body"] == f"body-{r['offset']}\x00tail".encode() and dict(r["headers"])["n"] == str(r["offset"])
               for r in rows)
    assert [r["offset"] for r in rows if "odd" in dict(r["headers"])] == [7, 1007, 2007]
    assert dict(rows[2]["headers"]) == {"n": "7", "odd": "a:b\nc\\d"}  # the broker's own headers are columns
    assert rows[2]["destination"] == "/stream/c" and rows[2]["priority"] == 4 and int(rows[2]["message_id"]) > 0


def test_read_chunks_names_a_gap_left_by_retention(memory_broker: BrokerThread) -> None:
    with Connection(f"stomp://127.0.0.1:{memory_broker.port}") as conn:
        conn.request("SEND", {"destination": "/stream/g"}, b"x")
        conn.request("SEND", {"destination": "/control/purge/stream/g"})
        conn.request("SEND", {"destination": "/stream/g"}, b"y")
        with pytest.raises(StompmqError, match="offsets 0..0 of stream 'g' are gone"):
            list(conn.read_chunks("g", 0, 2, 10))


def test_a_stream_reader_commits_each_batch_end_to_its_group(memory_broker: BrokerThread,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """``commit`` (called by Spark after a micro-batch) reports the end offsets to the group and
    never moves the reader's own start (the checkpoint decides it)."""
    from stompmq.spark.source import StompmqStreamReader, _options

    options = {"url": f"stomp://127.0.0.1:{memory_broker.port}", "destination": "/stream/a,/stream/b",
               "group": "query"}
    with Connection(options["url"]) as conn:
        for i in range(3):
            conn.request("SEND", {"destination": "/stream/a"}, b"x%d" % i)
    reader = StompmqStreamReader(_options(options, reading=True), options)
    assert reader.initialOffset() == {"a": 3, "b": 0}
    reader.commit({"a": 2, "b": 0})
    with Connection(options["url"]) as conn:
        answers = [conn.request("SEND", {"destination": f"/control/stream-group/stream/{s}", "group": "query"})
                   for s in ("a", "b")]
        assert [(a["committed-offset"], a["lag"]) for a in answers] == [("2", "1"), ("0", "0")]
        conn.send_frame("SUBSCRIBE", {"destination": "/stream/a", "id": "1", "ack": "client",
                                      "x-stream-group": "query"})
        conn.request("SEND", {"destination": "/stream/b"}, b"y")  # (a round trip: the SUBSCRIBE is in)
        reader.commit({"a": 3, "b": 1})  # refused for a (a reader is in the group): logged, not fatal
        assert "could not commit" in caplog.text
    assert reader.initialOffset() == {"a": 3, "b": 1}


def test_timestamp_options_start_at_the_first_entry_that_late(memory_broker: BrokerThread) -> None:
    """``startingTimestamp`` / ``startingOffsetsByTimestamp`` ask the broker per stream; a time
    later than every entry fails (Kafka's default strategy) or, with ``latest``, starts at the end."""
    from stompmq.spark.source import Starting, _bounds, _options

    options = {"url": f"stomp://127.0.0.1:{memory_broker.port}", "destination": "/stream/a,/stream/b"}
    with Connection(options["url"]) as conn:
        for _ in range(3):
            for i in range(4):
                conn.request("SEND", {"destination": "/stream/a"}, b"%d" % i)
            wait_past(time.time() * 1000, "a later timestamp for the next burst")
        conn.request("SEND", {"destination": "/stream/b"}, b"b")
        conn.send_frame("SUBSCRIBE", {"destination": "/stream/a", "id": "0", "x-stream-offset": "first"})
        stamps = [int(conn.next().headers["timestamp"]) for _ in range(12)]
    opts = _options(options, reading=True)

    def start(**more: str) -> dict[str, int]:
        return Starting.parse({**options, **more}, opts.streams).resolve(opts, "earliest", _bounds(opts))

    cut = stamps[5]
    assert start(startingOffsetsByTimestamp=json.dumps({"a": cut})) == {"a": stamps.index(cut), "b": 0}
    assert start(startingOffsetsByTimestamp=json.dumps({"a": cut}), startingOffsets="latest") == {
        "a": stamps.index(cut), "b": 1}
    assert start(startingTimestamp="0") == {"a": 0, "b": 0}
    late = str(max(stamps[-1], int(time.time() * 1000)) + 60_000)
    with pytest.raises(StompmqError, match="option 'startingTimestamp': stream 'a' has no entry at or after"):
        start(startingTimestamp=late)
    assert start(startingTimestamp=late, startingOffsetsByTimestampStrategy="latest") == {"a": 12, "b": 1}
