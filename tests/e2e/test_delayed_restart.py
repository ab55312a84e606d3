"""Delayed messages and their neighbours across a restart of a real broker process on SQLite.

Three reported losses, each run against a subprocess stopped with SIGKILL or
SIGTERM: a receipted message is never lost because a delayed one shares the store with it, a
receipted delayed message survives a subscriber that came and went before it was due, and one
that fell due while the broker was down reaches a subscriber that came before or after its
promotion within ``DUE_AFTER_READY`` seconds of the broker answering CONNECT.  What is on disk
is read with an outside ``sqlite3`` connection.  Every wait has a deadline; nothing sleeps and
hopes but the downtime itself (a delay must fall due while no broker runs).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.waiting import pace, wait_past, wait_until

#: Seconds after the restarted broker answers CONNECT within which a message that fell due while
#: it was down reaches a subscriber (as promptly as a plain backlog).
DUE_AFTER_READY = 3.0
PRIORITIES = (1, 9, 4, 9, 0, 7, 4)


def rows(db: Path) -> tuple[int, int]:
    """(ready rows, delayed rows) on disk."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        (ready,) = conn.execute("SELECT COUNT(*) FROM messages").fetchone()
        (delayed,) = conn.execute("SELECT COUNT(*) FROM delayed_messages").fetchone()
    finally:
        conn.close()
    return int(ready), int(delayed)


def stop(broker: BrokerProcess, how: str) -> None:
    if how == "sigkill":
        broker.kill9()
    else:
        assert broker.terminate() == 0


def broker(db: Path) -> BrokerProcess:
    return BrokerProcess(db, "--http-port", "0")


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_receipted_messages_survive_consuming_a_delayed_queue_after_a_restart(tmp_path: Path, how: str) -> None:
    """Reported loss 1: a delayed message to one queue, receipted messages to another; after the
    restart the delayed queue is consumed and its socket closed: the others are all there."""
    db = tmp_path / "broker.db"
    with broker(db).start() as first, Peer(first.port) as c:
        c.send_to("/queue/due", "due", headers={"delay": "1500"})
        for prio in PRIORITIES:
            c.send_to("/queue/prio", str(prio), headers={"priority": str(prio)})
        wait_until(lambda: rows(db) == (len(PRIORITIES) + 1, 0), "the delayed message promoted", timeout=15)
        stop(first, how)
    with broker(db).start() as second:
        c = Peer(second.port)
        c.subscribe("/queue/due", ack="auto")
        assert c.message().body == b"due"
        c.close()
        with Peer(second.port) as c:
            c.subscribe("/queue/prio", ack="auto")
            got = [c.message().body.decode() for _ in PRIORITIES]
            assert got == [str(p) for p in sorted(PRIORITIES, reverse=True)]
            assert c.count("prio") == 0
    assert rows(db) == (0, 0)


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_a_receipted_delayed_message_survives_a_subscriber_that_left_before_it_was_due(
    tmp_path: Path, how: str
) -> None:
    """Reported loss 2: the queue had a subscriber (both ack modes) for a second before the
    message was due, the broker stopped, and the message comes after the restart, once due."""
    db = tmp_path / "broker.db"
    with broker(db).start() as first:
        with Peer(first.port) as c:
            sent = time.time()
            c.send_to("/queue/later", "later", headers={"delay": "4000"})
        assert rows(db) == (0, 1)  # durable from its RECEIPT
        for ack in ("auto", "client-individual"):
            c = Peer(first.port)
            c.subscribe("/queue/later", ack=ack)
            assert c.no_frame(0.5)
            c.close()
        assert rows(db) == (0, 1)
        stop(first, how)
    assert rows(db) == (0, 1)
    with broker(db).start() as second, Peer(second.port) as c:
        c.subscribe("/queue/later", ack="auto")
        msg = c.message(timeout=15)
        assert msg.body == b"later" and time.time() >= sent + 4.0


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_delayed_messages_due_while_down_reach_subscribers_that_came_before_or_after_the_promotion(
    tmp_path: Path, how: str
) -> None:
    """Reported loss 3: one message falls due while no broker runs (promoted at start), one
    falls due a moment after the restart; a subscriber there as soon as the broker answers gets
    both, the first within ``DUE_AFTER_READY`` s; one that comes after the promotion gets its
    own queue's message as quickly."""
    db = tmp_path / "broker.db"
    with broker(db).start() as first, Peer(first.port) as c:
        sent = time.time()
        c.send_to("/queue/down", "down", headers={"delay": "1500"})
        c.send_to("/queue/late", "late", headers={"delay": "1500"})
        c.send_to("/queue/down", "after", headers={"delay": "6000"})
        pace(0.3)  # the broker runs a while with them scheduled, as in the report
        stop(first, how)
    wait_past((sent + 2.0) * 1000, "the first delays to fall due")
    with broker(db).start() as second:
        ready = time.monotonic()
        early = Peer(second.port)
        early.subscribe("/queue/down", ack="auto")
        assert early.message(timeout=DUE_AFTER_READY).body == b"down"
        assert time.monotonic() - ready <= DUE_AFTER_READY
        wait_until(lambda: rows(db)[1] == 1, "the due messages promoted", timeout=DUE_AFTER_READY)
        with Peer(second.port) as later:
            later.subscribe("/queue/late", ack="auto")
            assert later.message(timeout=DUE_AFTER_READY).body == b"late"
        assert early.message(timeout=15).body == b"after"  # promoted while its subscriber waited
        assert time.time() >= sent + 6.0
        early.close()


def test_a_stream_entry_a_reader_got_is_on_disk_when_the_broker_is_killed(tmp_path: Path) -> None:
    """Seen in the restart soak: a reader got an entry that was not yet committed, ``kill -9``
    took it back, and the next entry appended after the restart took its offset, so the reader,
    resuming after the offset it had seen, never got that receipted entry.  A reader now gets an
    entry only once it is committed (a long ``--flush-interval`` leaves an unreceipted SEND
    in memory for seconds): the offset it saw stays the same entry's."""
    db = tmp_path / "broker.db"
    with BrokerProcess(db, "--http-port", "0", "--flush-interval", "30").start() as first:
        with Peer(first.port) as reader, Peer(first.port) as producer:
            reader.subscribe("/stream/log", ack="auto", x_stream_offset="first")
            reader.sync()
            producer.send_to("/stream/log", "seen", receipt=False)
            seen = reader.message()
            assert seen.body == b"seen" and seen["x-stream-offset"] == "0"
            first.kill9()
    with BrokerProcess(db, "--http-port", "0").start() as second:
        with Peer(second.port) as producer:
            producer.send_to("/stream/log", "after")
        with Peer(second.port) as reader:
            reader.subscribe("/stream/log", ack="auto", x_stream_offset="1")
            assert reader.message().body == b"after"
