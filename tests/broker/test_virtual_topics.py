"""Which topic a virtual topic's consumer queue collects."""

from __future__ import annotations

import pytest

from stompmq.broker.virtual_topics import virtual_topic


@pytest.mark.parametrize(("queue", "prefix", "topic"), [
    ("Consumer.A.VirtualTopic.Orders", "VirtualTopic.", "VirtualTopic.Orders"),
    ("Consumer.A.VirtualTopic.Orders.EU", "VirtualTopic.", "VirtualTopic.Orders.EU"),
    ("Consumer.A.VT.Orders", "VT.", "VT.Orders"),
    ("Consumer.A.VirtualTopic.", "VirtualTopic.", None),  # no topic name after the prefix
    ("Consumer..VirtualTopic.Orders", "VirtualTopic.", None),  # no group
    ("Consumer.A", "VirtualTopic.", None),
    ("Orders", "VirtualTopic.", None),
    ("Consumer.A.Other.Orders", "VirtualTopic.", None),
    ("Consumer.A.VirtualTopic.Orders", "", None),  # off
    ("Consumer.A.VirtualTopic.*", "VirtualTopic.", None),  # a wildcard is no exact key
    ("Consumer.A.VirtualTopic.#", "VirtualTopic.", None),
])
def test_virtual_topic(queue: str, prefix: str, topic: str | None) -> None:
    assert virtual_topic(queue, prefix) == topic
