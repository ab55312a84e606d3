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

from .destinations import Destination
from .kinds.registry import KINDS


def resource(dest: Destination, send_headers: dict[str, str] | None = None) -> str:
    """The resource ``dest`` acts on; ``send_headers``: the SEND's headers (an exchange SEND
    may carry its routing key in a header), None for SUBSCRIBE and ``/control`` targets.
    Each kind resolves its own (``DestinationKind.resource``)."""
    return KINDS[dest.kind].resource(dest, send_headers)
