"""Every destination kind, by namespace: where a new kind is registered.

A new kind is a module of this package (a ``DestinationKind`` subclass) plus a line here and
its namespace in ``destinations.Kind`` (docs/architecture.md, "Adding a destination kind").
"""

from __future__ import annotations

from ..destinations import Destination, Kind
from .base import DestinationKind
from .control import ControlKind
from .exchange import ExchangeKind
from .queues import AmqQueueKind, QueueKind
from .stream import StreamKind
from .temp import ReplyQueueKind, TempQueueKind
from .topic import TopicKind

#: Namespace -> the kind acting for it; one object per kind, shared by every broker.
KINDS: dict[str, DestinationKind] = {
    kind.namespace: kind
    for kind in (QueueKind(), AmqQueueKind(), TopicKind(), ExchangeKind(), StreamKind(), TempQueueKind(),
                 ReplyQueueKind())
}
KINDS[Kind.CONTROL] = ControlKind(KINDS)


def kind_of(dest: Destination) -> DestinationKind:
    """The kind acting for ``dest`` (every namespace ``parse_destination`` accepts has one)."""
    return KINDS[dest.kind]


def bind_target(dest: Destination) -> str:
    """The name an exchange binding to ``dest`` is stored under (ClientError: not bindable)."""
    return KINDS[dest.kind].bind_target(dest)
