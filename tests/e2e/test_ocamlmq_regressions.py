"""Regression tests for ocamlmq's known faults: each must be impossible in stompmq.

ocamlmq is the broker whose task-queue semantics (ack timeouts, prefetch,
``/control`` counts) stompmq follows.  Its issue tracker and source record a
handful of faults; one test per fault below, each docstring naming it.  Every
test runs on both stores through the ``broker``/``make_broker`` fixtures.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.storage.sqlite import SQLiteStore

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client, control
from ..support.stores import make_store_factory
from ..support.waiting import send_all, wait_sessions, wait_until


def count_msgs(c: Client, queue: str) -> int:
    return int(control(c, f"count-msgs/queue/{queue}")["num-messages"])


def num_subscribers(c: Client, kind: str, name: str) -> int:
    return int(control(c, f"count-subscribers/{kind}/{name}")["num-subscribers"])


def received(c: Client) -> list:
    """Every MESSAGE sent to ``c`` so far (dispatch is synchronous: a round trip suffices)."""
    c.sync()
    msgs = [f for f in c.stash if f.command == "MESSAGE"]
    c.stash.clear()
    return msgs


# ---------------------------------------------------------------------------- 1


@pytest.mark.parametrize("trigger", ["ack", "nack", "ack-timeout"])
def test_unsubscribed_connection_gets_nothing_after_ack_or_ack_timeout(broker, trigger):
    """ocamlmq fault: after UNSUBSCRIBE, an ACK (or an ack timeout) of a message from the
    connection's other subscription put the connection back among the queue's listeners,
    so it received messages of the queue it had left."""
    with Client(broker.port) as c, Client(broker.port) as later:
        c.subscribe("/queue/left", "gone", ack="client-individual")
        c.subscribe("/queue/left", "gone-too", ack="client")
        c.subscribe("/queue/work", "kept", ack="client-individual", **{"ack-timeout": "0.3"})
        send_all(broker.port, "/queue/work", ["job"], receipt=False)
        job = c.message()
        c.unsubscribe("gone")
        c.unsubscribe("gone-too")
        if trigger == "ack":
            c.ack(job)
        elif trigger == "nack":
            c.nack(job)
            c.ack(c.message())
        else:
            again = c.message()  # expired and came back: the only subscriber of /queue/work
            assert (again.body, again["redelivery-count"]) == (b"job", "1")
            c.ack(again)
        send_all(broker.port, "/queue/left", ["not for c", "nor this"], receipt=False)
        c.expect_nothing(wait=0.1)
        assert num_subscribers(c, "queue", "left") == 0
        assert count_msgs(c, "left") == 2
        later.subscribe("/queue/left")
        assert [m.body for m in later.messages(2)] == [b"not for c", b"nor this"]
        c.expect_nothing()


# ---------------------------------------------------------------------------- 2


@pytest.mark.parametrize("death", ["reset", "close", "silent"])
def test_dead_connections_not_counted_in_num_subscribers(make_broker, death):
    """ocamlmq fault: connections that had died stayed in the subscriber lists, so
    /control/count-subscribers kept counting them (and queues kept "dispatching" to them)."""
    broker = make_broker(settings=ServerSettings(port=0, heart_beat=(0, 100), heart_beat_grace=2.0))
    alive = Client(broker.port)
    beats = {"heart-beat": "100,0"} if death == "silent" else {}
    dying = [Client(broker.port, **beats) for _ in range(3)]
    try:
        for c in [alive, *dying]:
            c.subscribe("/queue/dead", ack="client-individual")
            c.subscribe("/topic/dead.news")
            c.subscribe("/topic/dead.*")
        assert num_subscribers(alive, "queue", "dead") == 4
        assert num_subscribers(alive, "topic", "dead.news") == 8
        for c in dying:
            if death == "reset":
                c.abort_connection()
            elif death == "close":
                c.close()
            # "silent": the socket stays open but the client promised heart-beats it never sends
        wait_until(lambda: num_subscribers(alive, "queue", "dead") == 1, "dead subscribers to go")
        assert num_subscribers(alive, "topic", "dead.news") == 2
        assert num_subscribers(alive, "topic", "dead.other") == 1
        send_all(broker.port, "/queue/dead", [str(i) for i in range(3)], receipt=False)
        assert [m.body for m in alive.messages(3)] == [b"0", b"1", b"2"]
    finally:
        for c in [alive, *dying]:
            c.close()


# ---------------------------------------------------------------------------- 3


@pytest.mark.parametrize("version", ["1.0", "1.2"])
def test_duplicate_topic_subscription_never_delivers_twice_under_one_id(broker, version):
    """ocamlmq fault: subscribing twice to one topic registered the connection twice, so
    every message arrived twice under the same subscription.  Here a second SUBSCRIBE with
    the same id (in 1.0 the destination is the id) is an ERROR, and nothing is duplicated."""
    with Client(broker.port, version) as c:
        sub_id = c.subscribe("/topic/dup", None if version == "1.0" else "same")
        send_all(broker.port, "/topic/dup", ["one"], receipt=False)
        first = c.message()
        assert first.body == b"one"
        headers = {"destination": "/topic/dup", "receipt": "again"}
        if version != "1.0":
            headers["id"] = sub_id
        c.frame("SUBSCRIBE", headers)
        error = c.expect_error()
        assert "duplicate" in error["message"] and sub_id in error["message"]
    # The same id again after UNSUBSCRIBE, and overlapping subscriptions under other ids:
    # exactly one copy per subscription id.
    with Client(broker.port, version) as c:
        ids = ["/topic/dup", "/topic/du*"] if version == "1.0" else ["a", "b"]
        c.subscribe("/topic/dup", ids[0])
        c.unsubscribe(ids[0]) if version != "1.0" else c.request("UNSUBSCRIBE", {"destination": "/topic/dup"})
        c.subscribe("/topic/dup", ids[0])
        c.subscribe("/topic/du*", ids[1])
        send_all(broker.port, "/topic/dup", ["two"], receipt=False)
        msgs = c.messages(2)
        c.expect_nothing(wait=0.1)
        assert sorted(m["subscription"] for m in msgs) == sorted(ids)
        assert num_subscribers(c, "topic", "dup") == 2


# ---------------------------------------------------------------------------- 4


def test_auto_ack_subscriber_does_not_stall_after_prefetch(broker):
    """ocamlmq fault: an ack:auto subscription counted its deliveries against the prefetch
    and, never ACKing, stalled after ``prefetch`` messages."""
    with Client(broker.port) as c:
        send_all(broker.port, "/queue/auto", [f"stored-{i}" for i in range(300)], receipt=False)
        c.subscribe("/queue/auto", ack="auto", prefetch="2")
        send_all(broker.port, "/queue/auto", [f"live-{i}" for i in range(300)], receipt=False)
        got = [m.body.decode() for m in c.messages(600)]
        c.expect_nothing()
        assert got == [f"stored-{i}" for i in range(300)] + [f"live-{i}" for i in range(300)]
        assert count_msgs(c, "auto") == 0


# ---------------------------------------------------------------------------- 5


@pytest.mark.parametrize("requeue", ["nack", "unsubscribe", "disconnect", "ack-timeout", "ack-frees-room"])
def test_stored_message_never_left_undelivered_while_a_subscriber_has_room(make_broker, requeue):
    """ocamlmq fault: a message put back in its queue (NACK, a consumer leaving, an ack
    timeout) or left in the store sat there while a subscriber had room, until some
    unrelated SEND woke the queue up.  Here every requeue pumps the queue."""
    broker = make_broker(config=BrokerConfig(window=3))
    with Client(broker.port) as waiting:
        holder = Client(broker.port)
        timeout = {"ack-timeout": "0.3"} if requeue == "ack-timeout" else {}
        holder.subscribe("/queue/pump", "h", ack="client-individual", prefetch="4", **timeout)
        send_all(broker.port, "/queue/pump", [str(i) for i in range(10)], receipt=False)
        held = holder.messages(4)
        waiting_prefetch = "1" if requeue == "ack-frees-room" else "100"
        waiting.subscribe("/queue/pump", "w", ack="client-individual", prefetch=waiting_prefetch)
        if requeue == "ack-frees-room":
            first = waiting.message()
            holder.close()
            wait_sessions(broker, 1)
            waiting.ack(first)  # the only room in the queue: the requeued messages must follow
            got = [first]
            for _ in range(9):
                m = waiting.message()
                got.append(m)
                waiting.ack(m, receipt=False)
        else:
            others = waiting.messages(6)  # everything not held
            if requeue == "nack":
                # both subscribers have room after the NACKs: each redelivery goes to one of them
                for m in held:
                    holder.nack(m, receipt=False)
                back = received(holder) + received(waiting)
                assert len(back) == 4, back
                back.sort(key=lambda m: int(m.body))
            else:
                if requeue == "unsubscribe":
                    holder.unsubscribe("h")
                elif requeue == "disconnect":
                    holder.abort_connection()
                back = waiting.messages(4)  # no further SEND: the requeue itself must deliver
            got = others + back
            assert [m.body for m in back] == [m.body for m in held]
            assert all(m["redelivered"] == "true" for m in back)
        waiting.expect_nothing()
        assert sorted(int(m.body) for m in got) == list(range(10))
        holder.close()


def test_stored_messages_delivered_after_restart_without_any_send(tmp_path: Path):
    """ocamlmq fault (restart flavour): messages recovered from the store were only
    dispatched when a new SEND arrived.  Restart, subscribe, and they must all come."""
    make = make_store_factory("sqlite", tmp_path)
    with BrokerThread(make, config=BrokerConfig(window=4)).start() as first:
        with Client(first.port) as c:
            c.subscribe("/queue/restart", ack="client-individual", prefetch="3")
            send_all(first.port, "/queue/restart", [str(i) for i in range(25)], receipt=False)
            held = c.messages(3)  # unacked at shutdown: ready again after the restart
            assert [m.body for m in held] == [b"0", b"1", b"2"]
    with BrokerThread(make, config=BrokerConfig(window=4)).start() as second:
        with Client(second.port) as c:
            c.subscribe("/queue/restart", ack="client-individual", prefetch="100")
            got = c.messages(25)
            c.expect_nothing()
            assert [int(m.body) for m in got] == list(range(25))
            assert [m["redelivered"] for m in got[:3]] == ["true"] * 3


class PageGateStore(SQLiteStore):
    """A SQLite store that can hold a page read's answer back after the read itself ran,
    so a test can make a SEND arrive while the broker is paging a queue in."""

    def __init__(self, path: str) -> None:
        super().__init__(path, flush_interval=0.01)
        self.gate: trio.Event | None = None  # a page read's answer waits while it is not set
        self.reads_held = 0

    def hold(self) -> None:
        """Hold back the answers of page reads from now on (on the broker's thread)."""
        self.gate = trio.Event()

    def release(self) -> None:
        """Let the held answers go (on the broker's thread)."""
        assert self.gate is not None
        self.gate.set()

    async def load_ready(self, queue, after, limit, matching=None):
        rows = await super().load_ready(queue, after, limit, matching)
        if self.gate is not None and not self.gate.is_set():
            self.reads_held += 1
            await self.gate.wait()
        return rows


def test_message_sent_during_a_page_read_is_not_left_behind(tmp_path: Path):
    """ocamlmq fault (paging flavour): a message that arrives while a page of stored
    messages is being read lies beyond what the queue holds in memory, so it stays in the
    store only; if the page already read (without it) spans its place, the queue moved
    past it and it was never delivered, though the subscriber had room."""
    store = PageGateStore(str(tmp_path / "gate.db"))
    with BrokerThread(lambda: store, config=BrokerConfig(window=5)).start() as broker:
        send_all(broker.port, "/queue/gate", [f"old-{i}" for i in range(10)], receipt=False)  # priority 4
        broker.call(store.hold)
        with Client(broker.port) as c:
            c.subscribe("/queue/gate", ack="client-individual", prefetch="1")
            wait_until(lambda: broker.call(lambda: store.reads_held) == 1, "the page read")
            # the page (old-0..old-4) is read; now a higher priority message arrives
            send_all(broker.port, "/queue/gate", ["urgent"], lambda i: {"priority": "5"}, receipt=False)
            broker.call(store.release)
            got = []
            for _ in range(11):
                m = c.message()
                got.append(m.body.decode())
                c.ack(m, receipt=False)
            c.expect_nothing()
        assert got == ["urgent"] + [f"old-{i}" for i in range(10)]


# ---------------------------------------------------------------------------- 6


@pytest.mark.parametrize("where", ["window", "store", "restart", "page-read"])
def test_fresh_send_never_overtakes_an_older_ready_message(make_broker, store_kind, tmp_path, where):
    """ocamlmq fault: a SEND arriving while a subscriber had room went straight to it,
    overtaking older ready messages of the same priority that were still in the store
    (ocamlmq loaded stored messages lazily).  Here order is (priority desc, seq asc)
    whatever is in memory: with the older messages in the window, in the store only,
    recovered after a restart, or while a page of them is being read (durable store only
    for the last two; the memory store runs them like "store")."""
    durable_only = where in ("restart", "page-read") and store_kind == "sqlite"
    store = PageGateStore(str(tmp_path / "fifo.db"))
    if durable_only and where == "restart":
        with BrokerThread(lambda: SQLiteStore(store.path), config=BrokerConfig(window=4)).start() as thread:
            send_all(thread.port, "/queue/fifo", [f"old-{i}" for i in range(30)], receipt=False)
    if durable_only:
        broker = BrokerThread(lambda: store, config=BrokerConfig(window=4)).start()
    else:
        broker = make_broker(config=BrokerConfig(window=4))
    try:
        with Client(broker.port) as c:
            if not (durable_only and where == "restart"):
                send_all(broker.port, "/queue/fifo", [f"old-{i}" for i in range(30)], receipt=False)
            if where == "window":
                c.subscribe("/queue/fifo", ack="client-individual", prefetch="1")
                first = c.message()
                c.send_to("/queue/fifo", "fresh", receipt=False)  # the subscriber has no room now
                c.ack(first, receipt=False)
                got = [first]
                for _ in range(30):
                    m = c.message()
                    got.append(m)
                    c.ack(m, receipt=False)
            elif durable_only and where == "page-read":
                broker.call(store.hold)
                c.subscribe("/queue/fifo", ack="auto")
                wait_until(lambda: broker.call(lambda: store.reads_held) == 1, "the page read")
                send_all(broker.port, "/queue/fifo", ["fresh"], receipt=False)  # while the first page is read
                broker.call(store.release)
                got = c.messages(31)
            else:
                # SUBSCRIBE and SEND in one write: the SEND arrives while the queue is
                # still paging its stored messages in, with a subscriber that has room.
                c.send(
                    b"SUBSCRIBE\nid:s\ndestination:/queue/fifo\nack:auto\n\n\x00"
                    b"SEND\ndestination:/queue/fifo\n\nfresh\x00"
                )
                got = c.messages(31)
            c.expect_nothing()
            assert [m.body.decode() for m in got] == [f"old-{i}" for i in range(30)] + ["fresh"]
    finally:
        if durable_only:
            broker.stop()


# ---------------------------------------------------------------------------- 7


def test_receipt_only_after_the_message_is_durable(tmp_path: Path):
    """ocamlmq fault: the RECEIPT for a SEND was written before the message reached the
    database, so a crash right after the RECEIPT lost a message the client thought safe.
    The store's write-behind interval is set very long here: only the receipt can have
    made the row durable, and a separate SQLite connection must find it."""
    path = tmp_path / "durable.db"
    thread = BrokerThread(lambda: SQLiteStore(str(path), flush_interval=3600)).start()

    def rows(sql: str, *args) -> list[tuple]:
        conn = sqlite3.connect(str(path))
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def stored(queue: str) -> list[tuple[bytes, int]]:
        return rows(
            "SELECT m.body, m.delivered FROM messages m JOIN queues q ON q.id = m.queue_id"
            " WHERE q.name = ? ORDER BY m.seq",
            queue,
        )

    try:
        with Client(thread.port) as c:
            for i in range(5):
                c.send_to("/queue/durable", f"m{i}", headers={"priority": str(i)})
                assert stored("durable") == [(f"m{j}".encode(), 0) for j in range(i + 1)]
            # a transaction's messages are durable when the COMMIT's RECEIPT arrives
            c.request("BEGIN", {"transaction": "tx"})
            c.send_to("/queue/durable-tx", "in-tx", receipt=False, headers={"transaction": "tx"})
            assert stored("durable-tx") == []
            c.request("COMMIT", {"transaction": "tx"})
            assert stored("durable-tx") == [(b"in-tx", 0)]
            # a message routed by an exchange, too
            control(c, "declare/exchange/dx")
            control(c, "bind/exchange/dx", queue="/queue/durable-x")
            c.send_to("/exchange/dx/key", "routed")
            assert stored("durable-x") == [(b"routed", 0)]
            # an ACK's delete is durable at its RECEIPT
            c.subscribe("/queue/durable-x", ack="client-individual")
            m = c.message()
            c.ack(m)
            assert stored("durable-x") == []
            # and so is a purge
            control(c, "purge/queue/durable")
            assert stored("durable") == []
            assert rows("SELECT COUNT(*) FROM bindings WHERE exchange = 'dx'") == [(1,)]
    finally:
        thread.stop()
