"""ActiveMQ's virtual topics against a real listening broker: each consumer group's queue gets
every topic message, its consumers compete, and it keeps collecting while the group is away."""

from __future__ import annotations

from stompmq.broker import BrokerConfig

from ..support.stompclient import Client, control

TOPIC = "/topic/VirtualTopic.Orders"


def publish(port: int, bodies: list[str]) -> None:
    with Client(port) as producer:
        for body in bodies:
            producer.send_to(TOPIC, body)


def test_each_group_gets_every_message_and_its_consumers_compete(memory_broker):
    port = memory_broker.port
    with Client(port) as a1, Client(port) as a2, Client(port) as b:
        a1.subscribe("/queue/Consumer.A.VirtualTopic.Orders", ack="client-individual", prefetch="2")
        a2.subscribe("/queue/Consumer.A.VirtualTopic.Orders", ack="client-individual", prefetch="2")
        b.subscribe("/queue/Consumer.B.VirtualTopic.Orders")
        publish(port, ["1", "2", "3", "4"])
        got_b = [m.body.decode() for m in b.messages(4)]
        got_a1 = a1.messages(2)
        got_a2 = a2.messages(2)
        a1.expect_nothing()
        a2.expect_nothing()
    assert got_b == ["1", "2", "3", "4"]
    assert sorted(m.body.decode() for m in got_a1 + got_a2) == ["1", "2", "3", "4"]


def test_a_group_queue_collects_while_nobody_is_subscribed(memory_broker):
    port = memory_broker.port
    with Client(port) as b:
        sub = b.subscribe("/queue/Consumer.B.VirtualTopic.Orders")
        b.unsubscribe(sub)
    publish(port, ["while-away-1", "while-away-2"])
    with Client(port) as c:
        assert control(c, "count-msgs/queue/Consumer.B.VirtualTopic.Orders")["num-messages"] == "2"
        c.subscribe("/queue/Consumer.B.VirtualTopic.Orders")
        assert [m.body.decode() for m in c.messages(2)] == ["while-away-1", "while-away-2"]


def test_before_any_group_subscribed_a_topic_message_reaches_no_queue(memory_broker):
    publish(memory_broker.port, ["early"])
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/Consumer.A.VirtualTopic.Orders")
        c.expect_nothing()


def test_the_prefix_is_a_setting(make_broker):
    broker = make_broker(config=BrokerConfig(virtual_topic_prefix="VT."))
    with Client(broker.port) as vt, Client(broker.port) as plain:
        vt.subscribe("/queue/Consumer.A.VT.Orders")
        plain.subscribe("/queue/Consumer.A.VirtualTopic.Orders")
        with Client(broker.port) as producer:
            producer.send_to("/topic/VT.Orders", "custom")
            producer.send_to(TOPIC, "default")
        assert vt.message().body == b"custom"
        vt.expect_nothing()
        plain.expect_nothing()
