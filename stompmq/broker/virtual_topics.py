"""ActiveMQ's virtual topics: ``/queue/Consumer.G.VirtualTopic.X`` collects ``/topic/VirtualTopic.X``.

A producer publishes to a topic; each consumer group reads its own queue, with competing consumers
inside the group and the queue's durability (its messages wait while the group is away).  The
first SUBSCRIBE to a group's queue binds it to ``amq.topic`` with the topic name as its key, the
same stored binding a durable topic subscription has (routing.py ``bind_durable``), so the
messages a topic SEND routes through amq.topic reach it from then on, on every broker sharing the
store, and across restarts.  As in ActiveMQ, a topic message sent before any group subscribed
reaches no group.  The prefix is a setting (``--virtual-topic-prefix``); the consumer prefix is
ActiveMQ's ``Consumer.`` and a group is one dot-free word.
"""

from __future__ import annotations

#: ActiveMQ's default consumer-queue prefix (``Consumer.*.`` in its virtual-destination interceptor).
CONSUMER_PREFIX = "Consumer."
#: Characters amq.topic reads as wildcards: a topic name holding one has no exact binding key.
_WILDCARDS = frozenset("*#")


def virtual_topic(queue: str, prefix: str) -> str | None:
    """The topic a consumer queue of a virtual topic collects (``Consumer.G.<prefix>X`` ->
    ``<prefix>X``), or None when ``queue`` is not one (or virtual topics are off)."""
    if not prefix or not queue.startswith(CONSUMER_PREFIX):
        return None
    group, dot, topic = queue[len(CONSUMER_PREFIX) :].partition(".")
    if not group or not dot or not topic.startswith(prefix) or len(topic) == len(prefix):
        return None
    if _WILDCARDS.intersection(topic):
        return None
    return topic
