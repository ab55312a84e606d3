"""``/control/VERB[/KIND/NAME]``: an administrative verb, answered in the RECEIPT (control.py).

Not a place messages go: a SEND runs the verb (never in a transaction, never routed), a
SUBSCRIBE is refused.  Its resource is the one of ``/KIND/NAME`` for the kinds a verb may name
(``VERB_TARGETS``), else the namespace itself (``/control/list-queues``: ``/list-queues``); a verb
that changes something (``CONFIGURE_VERBS``) needs ``configure`` on it, the others ``read``,
and ``bind``/``unbind`` also ``configure`` on the queue of its ``queue`` header.
``/control/extend-ack`` names only deliveries the connection holds: it needs nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...protocol import Frame
from ..acks import EXTEND_ACK
from ..destinations import Destination, Kind, parse_destination
from ..errors import ClientError
from ..session import Session
from .base import DestinationKind, Needs, Parts, SendAnswer

#: The verbs that change what they name (``configure``); the others read (``read``).
CONFIGURE_VERBS = frozenset({"purge", "delete", "declare", "bind", "unbind"})
#: The namespaces a ``/control/VERB/KIND/NAME`` may name.
VERB_TARGETS = frozenset({Kind.QUEUE, Kind.TOPIC, Kind.EXCHANGE, Kind.STREAM})


class ControlKind(DestinationKind):
    namespace = Kind.CONTROL

    def __init__(self, kinds: Mapping[str, DestinationKind]) -> None:
        #: every kind, by namespace (registry.KINDS, this one included)
        self.kinds = kinds

    def resource(self, dest: Destination, send_headers: dict[str, str] | None = None) -> str:
        _, _, target = dest.name.partition("/")
        space, _, target_name = target.partition("/")
        if space not in VERB_TARGETS:  # list-queues, or a verb the engine refuses: the namespace itself
            return "/" + target
        return self.kinds[space].resource(Destination(space, target_name, f"/{space}/{target_name}"))

    def send_needs(self, dest: Destination, headers: dict[str, str]) -> Needs:
        if dest.name == EXTEND_ACK:
            return []  # it names only deliveries the connection holds, which ``read`` let it take
        verb = dest.name.partition("/")[0]
        needs = [("configure" if verb in CONFIGURE_VERBS else "read", self.resource(dest))]
        queue = headers.get("queue")
        if verb in ("bind", "unbind") and queue is not None:
            try:
                bound = parse_destination(queue)
            except ClientError:
                return needs  # the engine reports the bad queue header
            needs.append(("configure", self.kinds[bound.kind].resource(bound)))
        return needs

    def send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> SendAnswer:
        if dest.name == EXTEND_ACK:  # the connection's own deliveries, not a resource's
            return parts.acks.extend(session, frame.headers)
        return parts.control.run(dest.name, frame)
