"""What a destination acts on: every way of naming a thing resolved to one resource name.

Permissions (server/auth.py) are patterns over resources, so a destination is
resolved here before any check, whichever alias the client wrote; a pattern
that refuses ``/queue/secret`` then refuses every name of that queue.  One
function, ``resource``, does it for SEND, SUBSCRIBE and the ``/control`` verbs:

============================================================  ===========================
destination as written                                        resource
============================================================  ===========================
``/queue/NAME``, ``/amq/queue/NAME``                          ``/queue/NAME``
``/reply-queue/TOKEN``, ``/queue/amq.gen.reply/TOKEN``, and   ``/reply-queue/TOKEN``
its ``/amq/queue/`` form (someone's temporary queue)
``/temp-queue/NAME`` (the connection's own, nobody else's)    ``/temp-queue/NAME``
``/topic/NAME``                                               ``/topic/NAME``
``/exchange/amq.topic/KEY``, or its SEND with ``routing-key``  ``/topic/KEY``
``/exchange/NAME/REST``, ``/exchange/NAME``                   ``/exchange/NAME``
``/stream/NAME``                                              ``/stream/NAME``
``/control/VERB/KIND/NAME``                                   the resource of ``/KIND/NAME``
============================================================  ===========================

``/exchange/amq.topic/KEY`` is ``/topic/KEY`` to the engine (routing.py: both
reach the topic's subscribers and the queues bound to amq.topic), so it is the
same resource; any other exchange is its own resource, whatever key routes
through it, as in RabbitMQ (the queues it feeds were bound with ``configure``).
A ``/control`` verb names an exchange whole (``/control/bind/exchange/NAME``),
never with a key.  The queue of a durable topic subscription is resolved by
``subscriptions.durable_queue``: it is ``/queue/`` + that name.
"""

from __future__ import annotations

from .destinations import Destination, Kind
from .exchanges import ROUTING_KEY_HEADER
from .temp_queues import REPLY_DESTINATION, TEMP_QUEUE_PREFIX

#: The exchange whose routing keys are topic names (``/topic/X`` is ``/exchange/amq.topic/X``).
TOPIC_EXCHANGE = "amq.topic"
#: The namespaces a ``/control/VERB/KIND/NAME`` may name, to their kinds.
_CONTROL_KINDS = {"queue": Kind.QUEUE, "topic": Kind.TOPIC, "exchange": Kind.EXCHANGE, "stream": Kind.STREAM}


def resource(dest: Destination, send_headers: dict[str, str] | None = None) -> str:
    """The resource ``dest`` acts on; ``send_headers``: the SEND's headers (an exchange SEND
    may carry its routing key in a header), None for SUBSCRIBE and ``/control`` targets."""
    kind, name = dest.kind, dest.name
    if kind is Kind.QUEUE or kind is Kind.AMQ_QUEUE:
        if name.startswith(TEMP_QUEUE_PREFIX):
            return REPLY_DESTINATION + name[len(TEMP_QUEUE_PREFIX):]
        return "/queue/" + name
    if kind is Kind.EXCHANGE:
        key = dest.key
        if not key and send_headers is not None:
            key = send_headers.get(ROUTING_KEY_HEADER, "")
        if name == TOPIC_EXCHANGE and key:
            return "/topic/" + key
        return "/exchange/" + name
    if kind is Kind.CONTROL:
        verb, _, target = name.partition("/")
        space, _, target_name = target.partition("/")
        target_kind = _CONTROL_KINDS.get(space)
        if target_kind is None:  # list-queues, or a verb the engine refuses: the namespace itself
            return "/" + target
        return resource(Destination(target_kind, target_name, f"/{space}/{target_name}"))
    return f"/{kind}/{name}"  # topic, stream, temp-queue, reply-queue: named as written
