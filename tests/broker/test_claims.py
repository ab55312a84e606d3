"""Claims on a store several brokers share, in the engine alone: claim on demand and fencing.

The store is the dict store of fakes.py marked shared, with a lease the test turns on and off
(``valid``); the engine runs in virtual time as in test_lifecycle.py.
"""

from __future__ import annotations

from stompmq.broker import Broker, BrokerConfig
from stompmq.broker.dispatch import CONTENDED_MS
from stompmq.broker.paging import READ_AHEAD
from stompmq.broker.send_headers import DEFAULT_PRIORITY
from stompmq.broker.session import Session
from stompmq.protocol import Frame
from stompmq.storage.base import Recovery, StoredMessage

from .fakes import DictStore, FakeOutbox, complete, run_reads
from .test_lifecycle import at, bodies, run, send


class SharedDictStore(DictStore):
    """The dict store as one broker among several sees it: its claims trusted while ``valid``."""

    shared = True

    def __init__(self) -> None:
        super().__init__()
        self.valid = True
        self.freed: list[int] = []  # seqs given back (updated while not held)

    def claims_valid(self) -> bool:
        return self.valid

    def update(self, msg: StoredMessage) -> None:
        super().update(msg)
        if not msg.held and not msg.delivered:
            self.freed.append(msg.seq)


def started() -> tuple[Broker, SharedDictStore]:
    store = SharedDictStore()
    broker = Broker(store, BrokerConfig(window=10_000))
    at(broker, 0.0)
    broker.recover(Recovery(10_000, [], []), [])  # (seqs below are free for another broker's rows)
    run(broker, 1.0)
    return broker, store


def client_subscriber(broker: Broker, queue: str, prefetch: int) -> FakeOutbox:
    outbox = FakeOutbox()
    session = broker.open_session("consumer", "1.2", outbox)
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/" + queue,
                                              "ack": "client-individual", "prefetch": str(prefetch)}))
    run_reads(broker)
    return outbox


def ready_in_memory(broker: Broker, queue: str) -> int:
    window = broker.dispatcher.queues[queue].window
    return window.size + len(window.tail)


def test_a_queue_nobody_else_wants_keeps_its_full_window() -> None:
    broker, store = started()
    client_subscriber(broker, "q", prefetch=5)
    for i in range(100):
        send(broker, "q", str(i))
    assert ready_in_memory(broker, "q") == 95 and store.freed == []


def test_a_wanted_queue_keeps_only_its_subscribers_room_and_the_read_ahead() -> None:
    broker, store = started()
    out = client_subscriber(broker, "q", prefetch=5)
    broker.queue_wanted("q")  # a subscriber on another broker read it
    for i in range(100):
        send(broker, "q", str(i))
    assert len(bodies(out)) == 5
    assert ready_in_memory(broker, "q") == READ_AHEAD
    assert len(store.freed) == 100 - 5 - READ_AHEAD  # given back: free for the other brokers


def test_a_wanted_queue_gives_back_what_its_subscriber_no_longer_takes() -> None:
    broker, store = started()
    client_subscriber(broker, "q", prefetch=5)
    for i in range(100):
        send(broker, "q", str(i))
    broker.queue_wanted("q")  # the other broker's subscriber came later
    assert ready_in_memory(broker, "q") == READ_AHEAD and len(store.freed) == 100 - 5 - READ_AHEAD


def test_the_want_lapses_and_the_window_is_full_again() -> None:
    broker, store = started()
    client_subscriber(broker, "q", prefetch=5)
    broker.queue_wanted("q")
    run(broker, 1.0 + CONTENDED_MS / 1000 + 1)
    for i in range(100):
        send(broker, "q", str(i))
    assert ready_in_memory(broker, "q") == 95 and store.freed == []


def test_a_want_heard_before_the_queue_is_active_applies_when_it_is() -> None:
    broker, store = started()
    broker.queue_wanted("q")
    client_subscriber(broker, "q", prefetch=5)
    for i in range(50):
        send(broker, "q", str(i))
    assert ready_in_memory(broker, "q") == READ_AHEAD


def acked(broker: Broker, out: FakeOutbox) -> list[str]:
    """The bodies delivered since the last call, each acked."""
    frames = out.take("MESSAGE")
    for frame in frames:
        broker.handle(broker.sessions["consumer"], Frame("ACK", {"id": frame.headers["ack"]}))
    return [frame.body.decode() for frame in frames]


def test_rows_freed_below_the_boundary_during_a_read_are_read_next() -> None:
    """The look back heard while a read ran is done once it is merged, before the next read: put
    off behind every following read it never came while the subscriber had room, each read was
    from the boundary (past the freed row) and none could bring the queue back into memory."""
    broker, store = started()
    out = client_subscriber(broker, "q", prefetch=100)
    broker.queue_wanted("q")
    for i in range(200):
        send(broker, "q", str(i))
    assert len(acked(broker, out)) == 100 and len(store.freed) == 200 - 100 - READ_AHEAD
    for seq in store.freed:  # another broker's subscribers took what was given back
        del store.rows[seq]
    assert len(acked(broker, out)) == READ_AHEAD  # the window drained: a read is in flight now
    theirs = StoredMessage(10**9, "q", 9, {}, b"theirs", 0)  # another broker freed it, sorting first
    store.insert(theirs)
    broker.store_changed("q", theirs.order_key)
    delivered, reads = [], 0
    while reads < 5 and (read := broker.take_read()) is not None:  # the runtime's reads, one by one
        read.done(complete(read.fetch(store)))  # type: ignore[arg-type]
        delivered += acked(broker, out)
        reads += 1
    assert delivered == ["theirs"]
    assert not broker.dispatcher.queues["q"].window.spilled  # a short read brought it into memory


def auto_subscriber(broker: Broker, queue: str, read: bool = True) -> tuple[Session, FakeOutbox]:
    """An auto-ack subscriber whose socket has room; its queue's first read done unless not ``read``."""
    outbox = FakeOutbox()
    session = broker.open_session("consumer", "1.2", outbox)
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/" + queue, "ack": "auto"}))
    if read:
        run_reads(broker)
    return session, outbox


def test_a_batch_sent_during_a_wanted_queues_first_read_lets_that_read_bring_it_into_memory() -> None:
    """How the slow mode began: the first read of a queue (spilled until a read finds the store's
    end) ran while its producer's first batch came, and with room for 10 the batch beyond 20 was
    given back during the read, so that short read no longer proved the store exhausted."""
    broker, store = started()
    broker.queue_wanted("q")  # another broker's subscriber read it first
    session, out = auto_subscriber(broker, "q", read=False)
    read = broker.take_read()
    assert read is not None
    rows = complete(read.fetch(store))  # the store read runs (nothing there yet), then the batch comes
    for i in range(100):
        send(broker, "q", str(i))
    read.done(rows)
    assert not broker.dispatcher.queues["q"].window.spilled and store.freed == []
    assert len(bodies(out)) == 100


def test_a_wanted_queue_whose_auto_ack_subscriber_keeps_up_comes_back_into_memory() -> None:
    """Three brokers' auto-ack slow mode: another broker gave back a backlog, and a producer here
    keeps sending batches of 100 while the subscriber here keeps up (its socket takes all).  With a
    room of 10 for it, each read claimed 20 and each batch gave 80 back: the store's free rows
    grew, no read came back short, and every message went through the store for good.  Counted
    from what its socket can still take, a read claims what the subscriber can take: the backlog
    is read in a few reads, one comes back short, and the queue is in memory again."""
    broker, store = started()
    session, out = auto_subscriber(broker, "q")
    broker.queue_wanted("q")  # subscribers on the other brokers read it too
    for i in range(1, 1001):  # another broker gave them back (its seqs sort before this one's)
        store.insert(StoredMessage(i, "q", DEFAULT_PRIORITY, {}, b"theirs", 0))
    broker.store_changed("q", (-DEFAULT_PRIORITY, 1))
    delivered = 0
    for batch in range(20):
        read = broker.take_read()  # the read in flight while the producer's batch arrives
        for i in range(100):
            send(broker, "q", f"{batch}-{i}")
        if read is not None:
            read.done(complete(read.fetch(store)))  # type: ignore[arg-type]
        broker.written(session, out.queued)  # the socket took everything (the consumer keeps up)
        delivered += len(out.take("MESSAGE"))
    window = broker.dispatcher.queues["q"].window
    assert not window.spilled and window.size == 0  # in memory, nothing ready: all delivered
    assert delivered == 1000 + 20 * 100 and not store.rows


def one_out_two_ready() -> tuple[Broker, SharedDictStore, FakeOutbox, Frame]:
    """A subscriber with prefetch 1 holding the first of three messages, the others ready."""
    broker, store = started()
    out = client_subscriber(broker, "q", prefetch=1)
    for i in range(3):
        send(broker, "q", str(i))
    (first,) = out.take("MESSAGE")
    return broker, store, out, first


def test_a_broker_whose_lease_may_have_lapsed_delivers_nothing_it_claimed() -> None:
    broker, store, out, first = one_out_two_ready()
    store.valid = False  # paused past the lease
    session = broker.sessions["consumer"]
    broker.handle(session, Frame("ACK", {"id": first.headers["ack"]}))
    assert bodies(out) == []  # room, but nothing it claimed goes out
    store.valid = True
    broker.claims_renewed(False)  # the lease was still there
    assert bodies(out) == ["1"]


def test_claims_of_a_lapsed_lease_are_dropped_and_never_come_back() -> None:
    broker, store, out, held = one_out_two_ready()
    store.valid = False
    for seq in list(store.rows):  # another broker took over every row
        del store.rows[seq]
    store.valid = True
    broker.claims_renewed(True)
    run_reads(broker)
    assert ready_in_memory(broker, "q") == 0
    session = broker.sessions["consumer"]
    broker.handle(session, Frame("NACK", {"id": held.headers["ack"]}))  # would requeue it here
    run_reads(broker)
    assert bodies(out) == []


def test_a_broker_whose_lease_may_have_lapsed_promotes_no_delayed_message() -> None:
    broker, store = started()
    out = client_subscriber(broker, "q", prefetch=10)
    send(broker, "q", "later", delay="1000")
    store.valid = False
    run(broker, 3.0)  # due, but another broker may promote it now
    assert bodies(out) == []
    store.valid = True
    broker.claims_renewed(False)  # the lease was still there: this broker promotes it
    run(broker, 3.0)
    assert bodies(out) == ["later"]


def test_delayed_messages_of_a_lapsed_lease_are_dropped() -> None:
    broker, store = started()
    out = client_subscriber(broker, "q", prefetch=10)
    send(broker, "q", "later", delay="1000")
    store.valid = False
    run(broker, 3.0)
    for seq, (msg, _, _) in list(store.rows.items()):  # another broker took the delayed row over
        if msg.deliver_at is not None:
            del store.rows[seq]
    store.valid = True
    broker.claims_renewed(True)
    run(broker, 5.0)
    assert bodies(out) == []  # that broker promotes it: here it is neither promoted nor in memory
    assert len(broker.dispatcher.delayed) == 0
