"""The declarations a store keeps and recovers: exchanges, bindings and queues, as records.

They sit below both the Store interface (storage/base.py: ``Recovery`` hands them to the broker)
and the stored facts (storage/rows.py: ``SaveExchange`` and ``SaveBinding`` carry them), so each
of the two imports them from here and only the interface imports the facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """A declared exchange: ``consistent-hash``, ``direct``, ``fanout`` or ``topic``."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)  # its store keys (``rows.in_space``)
    name: str
    type: str
    # Declaration options (hash-header, hash-property, on-missing, ...), kept as given.
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BindingRecord:
    """A queue bound to an exchange: with a weight (consistent-hash) or a routing key (direct, topic)."""

    KEYS: ClassVar[tuple[str, ...]] = ("exchange", "queue")  # its store keys (``rows.in_space``)
    exchange: str
    queue: str
    weight: int
    #: the binding key of a direct/fanout/topic exchange ("" for consistent-hash)
    routing_key: str = ""


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A declared queue: its options as declared (message-ttl, max-length, overflow ...)."""

    name: str
    options: dict[str, str]
