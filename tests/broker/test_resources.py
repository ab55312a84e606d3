"""resource: every name of a queue, topic, exchange or stream gives the same resource; and the
queue of a durable subscription is its owner's alone (durable_queue)."""

from __future__ import annotations

import pytest

from stompmq.broker.destinations import parse_destination
from stompmq.broker.errors import ClientError
from stompmq.broker.resources import resource
from stompmq.broker.subscriptions import durable_queue

#: (destination as written, a SEND's headers or None, the resource)
TABLE = [
    ("/queue/q", None, "/queue/q"),
    ("/amq/queue/q", None, "/queue/q"),
    ("/queue/amq.gen.reply/T.n", None, "/reply-queue/T.n"),
    ("/amq/queue/amq.gen.reply/T.n", None, "/reply-queue/T.n"),
    ("/reply-queue/T.n", None, "/reply-queue/T.n"),
    ("/temp-queue/n", None, "/temp-queue/n"),
    ("/topic/t", None, "/topic/t"),
    ("/exchange/amq.topic/t", None, "/topic/t"),
    ("/exchange/amq.topic/t.#", None, "/topic/t.#"),
    ("/exchange/amq.topic", {"routing-key": "t"}, "/topic/t"),
    ("/exchange/amq.topic", None, "/exchange/amq.topic"),
    ("/exchange/amq.topic", {}, "/exchange/amq.topic"),
    ("/exchange/amq.direct/k", {"routing-key": "x"}, "/exchange/amq.direct"),
    ("/exchange/ring/k", None, "/exchange/ring"),
    ("/exchange/ring", {"routing-key": "k"}, "/exchange/ring"),
    ("/stream/s", None, "/stream/s"),
    ("/control/count-msgs/queue/q", None, "/queue/q"),
    ("/control/purge/queue/amq.gen.reply/T.n", None, "/reply-queue/T.n"),
    ("/control/count-subscribers/topic/t", None, "/topic/t"),
    ("/control/bind/exchange/amq.topic", None, "/exchange/amq.topic"),
    ("/control/declare/exchange/a/b", None, "/exchange/a/b"),  # named whole (the engine refuses it)
    ("/control/stream-offsets/stream/s", None, "/stream/s"),
    ("/control/list-queues", None, "/"),
]


@pytest.mark.parametrize("raw, headers, expected", TABLE)
def test_resource(raw: str, headers: dict[str, str] | None, expected: str) -> None:
    assert resource(parse_destination(raw), headers) == expected


def test_durable_queues_are_named_after_their_owner() -> None:
    durable = {"id": "s", "durable": "true"}
    assert durable_queue("alice", None, durable) == "amq.subscription.alice/s"
    assert durable_queue("alice", None, {"id": "s", "persistent": "TRUE"}) == "amq.subscription.alice/s"
    assert durable_queue("alice", "app", {"activemq.subscriptionName": "s"}) == "amq.subscription.alice,app/s"
    assert durable_queue("alice", None, {"id": "s"}) is None
    # percent-encoding keeps owners apart whatever their names hold
    assert durable_queue("a/b", None, durable) != durable_queue("a", None, {**durable, "id": "b/s"})
    assert durable_queue("a,b", "c", {"activemq.subscriptionName": "s"}) != durable_queue(
        "a", "b,c", {"activemq.subscriptionName": "s"})
    assert durable_queue("a", "b", {"activemq.subscriptionName": "s"}) != durable_queue("a", None, {**durable, "id": "b/s"})
    with pytest.raises(ClientError, match="client-id"):
        durable_queue("alice", None, {"activemq.subscriptionName": "s"})
