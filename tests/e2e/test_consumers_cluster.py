"""Temporary reply queues, browsing and exclusive consumers with two brokers on one PostgreSQL
database (separate processes): what docs/architecture.md says about several brokers holds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..support.broker_process import BrokerProcess, Peer
from ..support.stores import TEST_LEASE, postgres_server

pytestmark = pytest.mark.postgres

#: Seconds to wait for a message another broker must hand over (a notification, or the poll).
HANDOVER = 3 * TEST_LEASE + 10


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    database = postgres_server().new_database()
    started = [BrokerProcess(database, "--lease", str(TEST_LEASE)).start() for _ in range(2)]
    try:
        yield started
    finally:
        for b in started:
            b.close()


def test_a_reply_through_another_broker_reaches_the_temp_queue(brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    with Peer(a.port) as requester, Peer(b.port) as worker:
        requester.subscribe("/temp-queue/replies")
        worker.subscribe("/queue/rpc", ack="client-individual")
        requester.request("SEND", {"destination": "/queue/rpc", "reply-to": "/temp-queue/replies"}, b"ping")
        request = worker.message(timeout=HANDOVER)
        worker.request("SEND", {"destination": request["reply-to"]}, b"pong")
        worker.ack(request)
        answer = requester.message(timeout=HANDOVER)
        assert answer.body == b"pong" and answer["destination"] == "/temp-queue/replies"


def test_browsing_on_one_broker_shows_what_another_holds_and_claims_nothing(brokers: list[BrokerProcess]) -> None:
    a, b = brokers
    with Peer(a.port) as consumer, Peer(b.port) as browser:
        consumer.subscribe("/queue/shared", ack="client-individual", prefetch="1")
        for i in range(5):
            consumer.request("SEND", {"destination": "/queue/shared"}, str(i).encode())
        first = consumer.message(timeout=HANDOVER)
        assert first.body == b"0"
        browser.subscribe("/queue/shared", "b", browser="true")
        shown = []
        while (frame := browser.message(timeout=HANDOVER)).headers.get("browser") != "end":
            shown.append(frame.body)
        assert shown == [b"1", b"2", b"3", b"4"]  # held in a's window, shown by b
        consumer.ack(first)
        assert consumer.message(timeout=HANDOVER).body == b"1"  # a still has them
