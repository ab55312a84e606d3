"""The read gate (server/flow.py) in virtual time: each reason a reader waits for, what lifts it,
and the order they are waited out in.  Sessions are opened on the engine directly, so the test
decides what each one's outbox and the store do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from stompmq.broker import BrokerConfig, Session
from stompmq.broker.flow import Hold, holds
from stompmq.protocol import Frame
from stompmq.server.alarms import CHECK_SECONDS, ResourceAlarms
from stompmq.server.flow import AT_DISCONNECT, AT_SEND, BETWEEN_READS, ReadGate
from stompmq.server.outbox import ConnectionOutbox
from stompmq.server.settings import ServerSettings
from stompmq.storage.memory import MemoryStore

from ..support.pair import BrokerPair, broker_pair

SMALL = 64 * 1024  # a small hard limit: a few topic messages go over it


class GatedStore(MemoryStore):
    """A memory store the test fills and empties, whose /amq/queue/ lookups wait for ``answer``."""

    durable = True

    def __init__(self) -> None:
        super().__init__()
        self.is_full = False
        self.room = trio.Event()
        self.answer = trio.Event()

    def full(self) -> bool:
        return self.is_full

    async def wait_for_room(self) -> None:
        while self.is_full:
            await self.room.wait()

    async def queue_exists(self, name: str) -> bool:
        await self.answer.wait()
        return True


class Reader:
    """One client as its reader sees it: a session, its outbox (no writer: the test drains it)
    and its gate, whose ``wait`` runs as a task so the test can watch ``reason`` change."""

    def __init__(self, pair: BrokerPair, name: str, settings: ServerSettings | None = None,
                 hard_limit: int = SMALL) -> None:
        self.pair = pair
        self.outbox = ConnectionOutbox(soft_limit=hard_limit // 8, hard_limit=hard_limit)
        self.session: Session = pair.broker.open_session(name, "1.2", self.outbox)
        self.gate = ReadGate(pair.runtime, settings or pair.settings, self.outbox)
        self.gate.enter(pair.broker, self.session)
        self.done: float | None = None  # when the last ``wait`` returned

    def handle(self, *frames: Frame) -> None:
        self.pair.runtime.tick()
        self.pair.broker.handle_frames(self.session, list(frames))

    def start(self, reasons: tuple[Hold, ...] = BETWEEN_READS) -> None:
        self.done = None

        async def wait() -> None:
            await self.gate.wait(reasons)
            self.done = trio.current_time()

        self.pair.nursery.start_soon(wait)

    def drain(self) -> None:
        """The socket took everything queued."""
        self.outbox.sent(self.outbox.size, trio.current_time())


@asynccontextmanager
async def gated(**settings: float) -> AsyncIterator[tuple[BrokerPair, GatedStore, list[int]]]:
    store = GatedStore()
    free = [10**12]
    alarms = ResourceAlarms("store-dir", 10**9, None, measure_disk=lambda path: free[0], measure_memory=lambda: 0)
    config = BrokerConfig(window=8, queue_pace_timeout=settings.get("pace", 1.0))
    async with broker_pair(store, config, ServerSettings(port=0, topic_block_timeout=settings.get("topic", 5.0)),
                           alarms) as pair:
        yield pair, store, free


def send(destination: str, body: bytes = b"x") -> Frame:
    return Frame("SEND", {"destination": destination}, body)


async def test_nothing_holds_a_fresh_reader(autojump_clock: trio.testing.MockClock) -> None:
    async with gated() as (pair, _, _):
        reader = Reader(pair, "r")
        assert not reader.gate.shut() and holds(reader.session) == ()
        assert not await reader.gate.wait(BETWEEN_READS) and reader.gate.reason is None


async def test_queue_pace_until_the_consumer_drains_or_the_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with gated(pace=1.0) as (pair, _, _):
        consumer = Reader(pair, "consumer")
        consumer.handle(Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual",
                                            "prefetch": "1"}))
        await trio.testing.wait_all_tasks_blocked()  # its first page read
        producer = Reader(pair, "producer")
        producer.handle(*[send("/queue/q") for _ in range(5)])  # four ready: half the window
        assert holds(producer.session) == (Hold.PACE,) and producer.gate.shut()

        start = trio.current_time()
        producer.start()
        await trio.sleep(0.5)
        assert producer.gate.reason is Hold.PACE and producer.done is None
        await trio.sleep(0.6)  # the episode's 1 s is over: pacing gives up, the backlog may spill
        assert producer.done == start + 1.0 and producer.gate.reason is None
        assert pair.broker.pace_timeouts == 1 and holds(producer.session) == ()


async def test_a_drained_queue_lifts_pace_at_once(autojump_clock: trio.testing.MockClock) -> None:
    async with gated(pace=1.0) as (pair, _, _):
        consumer = Reader(pair, "consumer")
        consumer.handle(Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "auto"}))
        await trio.testing.wait_all_tasks_blocked()
        consumer.outbox.soft_limit = 0  # its socket is behind: what it is sent waits in the window
        producer = Reader(pair, "producer")
        producer.handle(*[send("/queue/q") for _ in range(5)])
        assert holds(producer.session) == (Hold.PACE,)
        start = trio.current_time()
        producer.start()
        await trio.sleep(0.2)
        assert producer.gate.reason is Hold.PACE
        consumer.outbox.soft_limit = SMALL
        consumer.drain()  # on_drain is unset here: resume by hand, as the connection would
        pair.runtime.tick()
        pair.broker.resume(consumer.session)
        await trio.testing.wait_all_tasks_blocked()
        assert producer.done == start + 0.2  # not the 1 s timeout
        assert producer.gate.reason is None and pair.broker.pace_timeouts == 0


async def test_topic_throttle_for_the_block_timeout_then_the_stalled_subscriber_lags(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with gated(topic=5.0) as (pair, _, _):
        subscriber = Reader(pair, "subscriber")
        subscriber.handle(Frame("SUBSCRIBE", {"id": "t", "destination": "/topic/t"}))
        publisher = Reader(pair, "publisher")
        publisher.handle(*[send("/topic/t", b"x" * 16 * 1024) for _ in range(5)])  # 80 KiB: over 64
        assert holds(publisher.session) == (Hold.TOPIC,)
        start = trio.current_time()
        publisher.start()
        await trio.sleep(4.9)
        assert publisher.gate.reason is Hold.TOPIC and not subscriber.session.topic_lagging
        await trio.sleep(0.2)
        assert publisher.done == start + 5.0 and subscriber.session.topic_lagging
        assert pair.broker.router.overflow.total_lagging == 1


async def test_topic_throttle_lifts_when_the_subscriber_drains(autojump_clock: trio.testing.MockClock) -> None:
    async with gated(topic=5.0) as (pair, _, _):
        subscriber = Reader(pair, "subscriber")
        subscriber.handle(Frame("SUBSCRIBE", {"id": "t", "destination": "/topic/t"}))
        publisher = Reader(pair, "publisher")
        publisher.handle(*[send("/topic/t", b"x" * 16 * 1024) for _ in range(5)])
        start = trio.current_time()
        publisher.start()
        await trio.sleep(2.0)
        subscriber.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert publisher.done == start + 2.0 and not subscriber.session.topic_lagging


async def test_the_reasons_are_waited_out_in_order(autojump_clock: trio.testing.MockClock) -> None:
    """Topic first, then pacing: the reason shown moves on as each one is lifted."""
    async with gated(topic=5.0, pace=1.0) as (pair, _, _):
        subscriber = Reader(pair, "subscriber")
        subscriber.handle(Frame("SUBSCRIBE", {"id": "t", "destination": "/topic/t"}))
        consumer = Reader(pair, "consumer")
        consumer.handle(Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual",
                                            "prefetch": "1"}))
        await trio.testing.wait_all_tasks_blocked()
        publisher = Reader(pair, "publisher")
        publisher.handle(*[send("/queue/q") for _ in range(5)], *[send("/topic/t", b"x" * 16 * 1024) for _ in range(5)])
        assert holds(publisher.session) == (Hold.TOPIC, Hold.PACE)
        start = trio.current_time()
        publisher.start()
        await trio.sleep(1.0)
        assert publisher.gate.reason is Hold.TOPIC
        subscriber.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert publisher.gate.reason is Hold.PACE  # its episode starts now: 1 s more
        await trio.sleep(1.1)
        assert publisher.done == start + 2.0 and publisher.gate.reason is None


async def test_engine_read_until_the_store_answers(autojump_clock: trio.testing.MockClock) -> None:
    async with gated() as (pair, store, _):
        reader = Reader(pair, "r")
        reader.handle(send("/amq/queue/known"), send("/queue/after"))  # the second waits behind the first
        assert holds(reader.session) == (Hold.ENGINE,)
        reader.start(AT_DISCONNECT)
        await trio.sleep(30.0)
        assert reader.gate.reason is Hold.ENGINE and reader.done is None
        store.answer.set()
        await trio.testing.wait_all_tasks_blocked()
        assert reader.done is not None and reader.session.waiting is None and holds(reader.session) == ()


async def test_own_outbox_over_its_hard_limit(autojump_clock: trio.testing.MockClock) -> None:
    async with gated() as (pair, _, _):
        reader = Reader(pair, "r")
        reader.outbox.write(b"x" * SMALL)
        assert reader.gate.shut()
        reader.start()
        await trio.sleep(10.0)
        assert reader.gate.reason is Hold.OUTBOX
        reader.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert reader.done is not None and reader.gate.reason is None


async def test_store_full_until_it_has_room(autojump_clock: trio.testing.MockClock) -> None:
    async with gated() as (pair, store, _):
        reader = Reader(pair, "r")
        store.is_full = True
        assert reader.gate.shut()
        reader.start()
        await trio.sleep(60.0)  # an outage may last
        assert reader.gate.reason is Hold.STORE and reader.done is None
        store.is_full = False
        store.room.set()
        await trio.testing.wait_all_tasks_blocked()
        assert reader.done is not None and reader.gate.reason is None


async def test_alarm_at_a_send_until_every_alarm_clears(autojump_clock: trio.testing.MockClock) -> None:
    async with gated() as (pair, _, free):
        reader = Reader(pair, "r")
        assert not reader.gate.holds(Hold.ALARM)
        free[0] = 1
        await trio.sleep(CHECK_SECONDS * 2)
        assert reader.gate.holds(Hold.ALARM) and not reader.gate.shut()  # only a SEND waits for it
        reader.start(AT_SEND)
        await trio.sleep(CHECK_SECONDS * 10)
        assert reader.gate.reason is Hold.ALARM and reader.done is None
        free[0] = 10**12
        await trio.sleep(CHECK_SECONDS * 2)
        assert reader.done is not None and reader.gate.reason is None
