"""A topic MESSAGE carries its SEND's priority and expiry, and selectors see them.

Found by the selector differential (tests/e2e/test_selector_differential.py): a topic message
was delivered with the default ``priority:4`` and no ``expires`` whatever its SEND said, so
``JMSPriority = 7`` never matched on a topic (ActiveMQ keeps both)."""

from __future__ import annotations

from stompmq.broker.send_headers import DEFAULT_PRIORITY, with_facts, without_facts

from ..support.stompclient import Client


def test_a_topic_message_keeps_its_priority_and_expiry(memory_broker):
    with Client(memory_broker.port) as plain, Client(memory_broker.port) as selective:
        plain.subscribe("/topic/facts")
        selective.subscribe("/topic/facts", selector="JMSPriority = 7 AND JMSExpiration = 1800000000000")
        with Client(memory_broker.port) as producer:
            producer.send_to("/topic/facts", "low")
            producer.send_to("/topic/facts", "high", headers={"priority": "7", "expires": "1800000000000"})
        low, high = plain.messages(2)
        assert (low["priority"], "expires" in low.headers) == (str(DEFAULT_PRIORITY), False)
        assert (high["priority"], high["expires"]) == ("7", "1800000000000")
        assert selective.message().body == b"high"
        selective.expect_nothing()


def test_the_facts_travel_to_other_brokers_and_back():
    """What another broker sharing the store gets (``with_facts``) gives back the same facts."""
    headers = {"region": "eu"}
    assert with_facts(headers, DEFAULT_PRIORITY, None) is headers
    assert without_facts(with_facts(headers, 9, 1_800_000_000_000)) == (headers, 9, 1_800_000_000_000)
    assert without_facts(with_facts(headers, 2, None)) == (headers, 2, None)
    assert without_facts({"priority": "x", "expires": "soon"}) == ({}, DEFAULT_PRIORITY, None)
