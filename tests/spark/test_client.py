"""The Spark tasks' STOMP client (stompmq/spark/client.py) without Spark: the frame cutter of
``read_range`` against a real broker, its fallback to the general parser, and its errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stompmq.protocol import Frame, encode_frame
from stompmq.spark.client import Connection, StompmqError

from ..broker_thread import BrokerThread

pytestmark = pytest.mark.spark


def test_read_range_cuts_frames_and_falls_back_for_escaped_headers(memory_broker: BrokerThread) -> None:
    def frames() -> Iterator[bytes]:
        for i in range(3000):  # several recv chunks, frames split across them
            headers = {"destination": "/stream/c", "receipt": str(i), "n": str(i)}
            if i % 1000 == 7:
                headers["odd"] = "a:b\nc\\d"  # escaped on the wire: the general parser's path
            yield encode_frame(Frame("SEND", headers, f"body-{i}\x00tail".encode()), "1.2")

    with Connection(f"stomp://127.0.0.1:{memory_broker.port}") as conn:
        conn.send_all(frames())
        entries = list(conn.read_range("c", 5, 2500))
    assert [e.offset for e in entries] == list(range(5, 2500))
    assert all(e.body == f"body-{e.offset}\x00tail".encode() and e.headers["n"] == str(e.offset) for e in entries)
    assert [e.offset for e in entries if "odd" in e.headers] == [7, 1007, 2007]
    assert entries[2].headers["odd"] == "a:b\nc\\d" and entries[2].headers["destination"] == "/stream/c"


def test_read_range_names_a_gap_left_by_retention(memory_broker: BrokerThread) -> None:
    with Connection(f"stomp://127.0.0.1:{memory_broker.port}") as conn:
        conn.request("SEND", {"destination": "/stream/g"}, b"x")
        conn.request("SEND", {"destination": "/control/purge/stream/g"})
        conn.request("SEND", {"destination": "/stream/g"}, b"y")
        with pytest.raises(StompmqError, match="offsets 0..0 of stream 'g' are gone"):
            list(conn.read_range("g", 0, 2))
