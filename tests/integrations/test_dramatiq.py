"""The Dramatiq broker's API against a real broker (in a thread, memory store) with Dramatiq's
own in-process ``Worker``: declarations, priorities, receipts, flush, join, and Dramatiq's
middleware (retries, time limits, results) unchanged.  The real ``dramatiq`` command in
subprocesses, kill -9 included, is test_dramatiq_workers.py."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import dramatiq
import pytest
from dramatiq.errors import BrokerError
from dramatiq.middleware import Middleware
from dramatiq.results import Results
from dramatiq.results.backends import StubBackend

from stompmq.integrations.dramatiq import StompmqBroker
from stompmq.stomp_url import StompmqError, StompURL

from ..support.stompclient import Client, control
from ..support.waiting import pace, wait_until
from .reading import first_message

pytestmark = pytest.mark.dramatiq


@pytest.fixture
def broker(memory_broker) -> Iterator[StompmqBroker]:
    b = StompmqBroker(url=f"stomp://127.0.0.1:{memory_broker.port}", confirm_delivery=True)
    b.port = memory_broker.port  # type: ignore[attr-defined]
    b.emit_after("process_boot")  # what the dramatiq command does: TimeLimit starts its timer here
    yield b
    b.emit_before("process_stop")
    b.close()


@pytest.fixture
def worker(broker) -> Iterator[Callable[..., dramatiq.Worker]]:
    started: list[dramatiq.Worker] = []

    def start(threads: int = 4) -> dramatiq.Worker:
        w = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100)
        w.start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop(timeout=5000)


def count(port: int, queue: str) -> int:
    with Client(port) as c:
        return int(control(c, f"count-msgs/queue/{queue}")["num-messages"])


def test_url_forms():
    url = StompURL.parse("stomp://us%40r:p%3Ass@example.org:1234/prod")
    assert (url.host, url.port, url.login, url.passcode, url.vhost) == ("example.org", 1234, "us@r", "p:ss", "prod")
    assert "p:ss" not in str(url)
    plain = StompURL.parse("stomp://localhost")
    assert (plain.port, plain.login, plain.vhost) == (61613, None, "localhost")
    with pytest.raises(StompmqError):
        StompURL.parse("amqp://localhost")


@pytest.mark.parametrize("url", ["amqp://al%40ice:s3cr%40t@host", "stomp://al%40ice:s3cr%40t@host:99999"])
def test_a_bad_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(StompmqError) as refused:
        StompURL.parse(url)
    assert "s3cr" not in str(refused.value) and "***" in str(refused.value)


def test_declare_queue_is_idempotent(broker):
    declared: list[str] = []

    class Watch(Middleware):
        def after_declare_queue(self, broker, queue_name):
            declared.append(queue_name)

    broker.add_middleware(Watch())
    broker.declare_queue("jobs")
    broker.declare_queue("jobs")
    broker.declare_queue("jobs.DQ")  # Dramatiq's delay-queue name is the same queue
    assert declared == ["jobs"]
    assert broker.get_declared_queues() == {"jobs"}
    assert broker.get_declared_delay_queues() == set()  # delays wait in the broker


def test_messages_run_once_and_are_acked(broker, worker):
    seen: list[int] = []

    @dramatiq.actor(broker=broker, queue_name="once")
    def task(i: int) -> None:
        seen.append(i)

    for i in range(50):
        task.send(i)
    worker()
    broker.join("once", timeout=10_000)
    assert sorted(seen) == list(range(50))
    assert broker.get_queue_message_counts("once") == (0, 0)


def test_broker_priority_orders_the_queue(broker, worker):
    order: list[int] = []

    @dramatiq.actor(broker=broker, queue_name="prio")
    def task(p: int) -> None:
        order.append(p)

    priorities = [0, 9, 4, 7, 1, 8]
    for p in priorities:
        task.send_with_options(args=(p,), broker_priority=p)
    worker(threads=1)
    broker.join("prio", timeout=10_000)
    assert order == sorted(priorities, reverse=True)


def test_broker_priority_out_of_range_is_refused(broker):
    @dramatiq.actor(broker=broker)
    def task() -> None:
        pass

    with pytest.raises(ValueError, match="0-9"):
        task.send_with_options(broker_priority=10)


def test_delay_waits_in_the_broker_and_join_waits_for_it(broker, worker):
    ran: list[float] = []

    @dramatiq.actor(broker=broker, queue_name="later")
    def task() -> None:
        ran.append(time.time())

    worker()
    sent = time.time()
    task.send_with_options(delay=700)
    assert count(broker.port, "later") == 0  # not ready yet: stored apart until due
    broker.join("later", timeout=10_000)
    assert len(ran) == 1 and ran[0] - sent >= 0.7


def test_confirm_delivery_raises_on_a_refused_send(broker, memory_broker):
    with Client(memory_broker.port) as c:
        control(c, "declare/queue/full", **{"max-length": "1", "overflow": "reject-publish"})

    @dramatiq.actor(broker=broker, queue_name="full")
    def task() -> None:
        pass

    task.send()
    with pytest.raises(BrokerError, match="full"):
        task.send()
    broker.flush("full")  # the broker reconnects for the next enqueue
    task.send()
    assert count(memory_broker.port, "full") == 1


def test_without_confirm_delivery_a_refused_send_is_logged_at_the_next(memory_broker, caplog):
    with Client(memory_broker.port) as c:
        control(c, "declare/queue/full", **{"max-length": "1", "overflow": "reject-publish"})
    broker = StompmqBroker(url=f"stomp://127.0.0.1:{memory_broker.port}")
    try:
        message = dramatiq.Message(queue_name="full", actor_name="a", args=(), kwargs={}, options={})
        broker.enqueue(message)
        broker.enqueue(message.copy())  # refused: the broker answers ERROR and closes
        wait_until(lambda: broker.connection._wait_readable(0), "the ERROR")
        with caplog.at_level(logging.ERROR):
            broker.enqueue(message.copy())  # on a new connection, refused again (still full)
        assert "refused an earlier message" in caplog.text
    finally:
        broker.close()


def test_flush_and_flush_all(broker):
    @dramatiq.actor(broker=broker, queue_name="f1")
    def one() -> None:
        pass

    @dramatiq.actor(broker=broker, queue_name="f2")
    def two() -> None:
        pass

    for _ in range(5):
        one.send()
        two.send()
    broker.flush("f1")
    assert broker.get_queue_message_counts("f1") == (0, 0)
    assert broker.get_queue_message_counts("f2") == (5, 0)
    broker.flush_all()
    assert broker.get_queue_message_counts("f2") == (0, 0)


def test_flush_drops_delayed_messages_not_yet_due(make_broker):
    """Retries in backoff and ``delay`` messages are flushed too (RabbitMQ's broker purges
    ``Q.DQ``); the queue not flushed gets its delayed messages when due, the sign that the flushed
    ones would have come by then."""
    thread = make_broker()
    broker = StompmqBroker(url=f"stomp://127.0.0.1:{thread.port}", confirm_delivery=True)
    try:
        @dramatiq.actor(broker=broker, queue_name="fd1")
        def one() -> None:
            pass

        @dramatiq.actor(broker=broker, queue_name="fd2")
        def two() -> None:
            pass

        for _ in range(3):
            one.send_with_options(delay=300)
            two.send_with_options(delay=300)
        one.send()
        broker.flush("fd1")
        wait_until(lambda: broker.get_queue_message_counts("fd2") == (3, 0), "fd2's delayed messages are due")
        assert broker.get_queue_message_counts("fd1") == (0, 0)
        two.send_with_options(delay=300)
        broker.flush_all()
        pace(0.6)  # (nothing to wait on: the flushed message must not come once due)
        assert broker.get_queue_message_counts("fd2") == (0, 0)
    finally:
        broker.close()


def test_retries_middleware_uses_broker_delays(broker, worker):
    attempts: list[int] = []

    @dramatiq.actor(broker=broker, queue_name="retry", max_retries=3, min_backoff=100, max_backoff=200)
    def flaky() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    worker()
    flaky.send()
    wait_until(lambda: len(attempts) == 3, "three attempts", timeout=15)
    broker.join("retry", timeout=10_000)
    assert len(attempts) == 3
    assert broker.get_queue_message_counts("retry") == (0, 0)


def test_time_limit_rejects_into_the_dead_letter_queue(broker, worker):
    @dramatiq.actor(broker=broker, queue_name="slow", time_limit=200, max_retries=0)
    def slow() -> None:
        for _ in range(100):  # 5 s of work in steps: Dramatiq's time limit interrupts between them
            pace(0.05)

    worker()
    message = slow.send()
    wait_until(lambda: broker.get_queue_message_counts("slow") == (0, 1), "a dead letter", timeout=15)
    dead = first_message(broker.port, "slow.XQ")
    assert dramatiq.Message.decode(dead.body).message_id == message.message_id
    assert dead.headers["dramatiq-reason"].startswith("TimeLimitExceeded: ")


def test_results_middleware(memory_broker):
    broker = StompmqBroker(url=f"stomp://127.0.0.1:{memory_broker.port}")
    backend = StubBackend()
    broker.add_middleware(Results(backend=backend))
    try:
        @dramatiq.actor(broker=broker, store_results=True)
        def add(x: int, y: int) -> int:
            return x + y

        w = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
        w.start()
        try:
            assert add.send(2, 3).get_result(backend=backend, block=True, timeout=10_000) == 5
        finally:
            w.stop(timeout=5000)
    finally:
        broker.close()


def test_enqueue_from_many_threads(broker, worker):
    """Every thread has its own publishing connection: no frame of one thread cuts into another's."""
    seen: list[int] = []

    @dramatiq.actor(broker=broker, queue_name="threads")
    def task(i: int) -> None:
        seen.append(i)

    def send(base: int) -> None:
        for i in range(base, base + 100):
            task.send(i)

    threads = [threading.Thread(target=send, args=(n * 100,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    worker()
    broker.join("threads", timeout=10_000)
    assert sorted(seen) == list(range(400))
