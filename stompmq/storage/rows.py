"""The stored facts a store writes with its one structural verb, ``Store.write(row)``.

Theory of operation
-------------------
A write is a record: each structural fact the broker stores (a declaration, its removal, a purge,
a retention cut) is one frozen row type here, and ``Store.write`` takes any of them.  Every store
applies a row in one ``match`` with one case per row type (the memory store, the group commit's
buffer, each SQL backend's commit), so a new stored fact is one row type and one case per
backend, never a method on every store class (docs/decisions/one-write-verb.md).  The per-message
writes (``insert``, ``update``, ``delete``, stream appends, consumer-group offsets) stay methods:
they run once per message, where building a row object would cost the hot path.

Names: a row's ``KEYS`` are the fields holding a store key (``vhost_space`` + name, see
``storage/base.py``), so one function (``in_space``) puts a vhost's prefix on any row; a
broker-wide fact (a vhost, a shovel, a policy) has none.  A row owns its values: the dicts it is
given are copied, so the caller may go on changing its own.

Broker-wide facts: a ``MetaFact`` (a shovel, a policy) is a ``key`` -> JSON ``value`` kept as one
``broker_meta`` row named ``PREFIX + key``.  Every store handles the base class, not each kind:
one case in each backend's ``match``, one read at open (``recovery.meta_facts``, of every prefix a
subclass registered), handed back in ``Recovery.meta`` and read with ``Recovery.facts(kind)``.  A
new fact of that shape is a subclass here with its own ``PREFIX`` (added to ``ROW_TYPES``, so
``tests/storage/test_rows.py`` runs it) and the caller that writes it and reads it back; no store,
backend or migration changes (docs/decisions/one-write-verb.md, "Adding a fact").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from stompmq.storage.records import BindingRecord, ExchangeRecord


def _own(row: object, name: str) -> None:
    """Replace ``row``'s dict field ``name`` by a copy (a frozen row's ``__post_init__``)."""
    value = getattr(row, name)
    if value is not None:
        object.__setattr__(row, name, dict(value))


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete every stored message of ``queue`` (messages the broker holds in memory included)."""

    KEYS: ClassVar[tuple[str, ...]] = ("queue",)
    queue: str


@dataclass(frozen=True, slots=True)
class SaveExchange:
    """Insert or replace the exchange of that name."""

    KEYS: ClassVar[tuple[str, ...]] = ("exchange",)
    exchange: ExchangeRecord


@dataclass(frozen=True, slots=True)
class DropExchange:
    """Delete the exchange and its bindings."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)
    name: str


@dataclass(frozen=True, slots=True)
class SaveBinding:
    """Insert or replace the binding of (exchange, queue, routing key)."""

    KEYS: ClassVar[tuple[str, ...]] = ("binding",)
    binding: BindingRecord


@dataclass(frozen=True, slots=True)
class DropBinding:
    """Delete the binding of (exchange, queue, routing key)."""

    KEYS: ClassVar[tuple[str, ...]] = ("exchange", "queue")
    exchange: str
    queue: str
    routing_key: str = ""


@dataclass(frozen=True, slots=True)
class Release:
    """This broker holds no ready message of ``queue`` in memory any more: on a database that
    several brokers share, its rows of that queue not out for delivery become free (a store of
    one broker claims no rows, so it has none to free)."""

    KEYS: ClassVar[tuple[str, ...]] = ("queue",)
    queue: str


@dataclass(frozen=True, slots=True)
class SaveStream:
    """Insert or replace the declaration (retention options) of stream ``name``."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    options: dict[str, str]

    def __post_init__(self) -> None:
        _own(self, "options")


@dataclass(frozen=True, slots=True)
class TrimStream:
    """Delete the entries of stream ``name`` with offset < ``before`` (retention: a range delete,
    never a scan); pending appends below ``before`` are dropped too (``TRIM_ALL``: all of them)."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    before: int


@dataclass(frozen=True, slots=True)
class DropStream:
    """Delete stream ``name``: its entries, producers, consumer groups and declaration; pending
    appends of it are dropped (appends after it make it anew)."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)
    name: str


@dataclass(frozen=True, slots=True)
class SaveVhost:
    """Declare the vhost ``name`` (nothing happens if it exists); it is in ``Recovery.vhosts``."""

    KEYS: ClassVar[tuple[str, ...]] = ()
    name: str


@dataclass(frozen=True, slots=True)
class DropVhost:
    """Forget vhost ``name``: its messages (ready and delayed, pending writes of them included),
    queue declarations, exchanges and bindings, and the vhost itself (its streams are dropped
    one by one before: ``DropStream``)."""

    KEYS: ClassVar[tuple[str, ...]] = ()
    name: str


@dataclass(frozen=True, slots=True)
class SaveQueue:
    """Insert or replace the declaration of queue ``name`` (None: forget it)."""

    KEYS: ClassVar[tuple[str, ...]] = ("name",)
    name: str
    options: dict[str, str] | None

    def __post_init__(self) -> None:
        _own(self, "options")


@dataclass(frozen=True, slots=True)
class CapExpiry:
    """Queue ``queue``'s stored messages (pending ones too) expire at most ``ttl`` ms after they
    were published (a policy's ``message-ttl`` given to messages already waiting)."""

    KEYS: ClassVar[tuple[str, ...]] = ("queue",)
    queue: str
    ttl: int


#: The ``PREFIX`` of every kind of broker-wide fact defined (``MetaFact.__init_subclass__``): what
#: ``recovery.meta_facts`` reads at open.
META_PREFIXES: set[str] = set()


@dataclass(frozen=True, slots=True)
class MetaFact:
    """Insert or replace the broker-wide fact ``key`` of this kind (None: forget it): the
    ``broker_meta`` row ``PREFIX + key``, in ``Recovery.facts(kind)`` from then on.  A kind is
    a subclass naming its ``PREFIX`` (one word and a '/', so the statement that reads them all
    needs no parameter: ``recovery.meta_facts``)."""

    KEYS: ClassVar[tuple[str, ...]] = ()
    PREFIX: ClassVar[str]
    key: str
    value: dict[str, Any] | None

    def __init_subclass__(cls) -> None:  # (no super(): a slotted dataclass is a copy of its class)
        prefix = cls.PREFIX
        # A word and a '/': a literal LIKE pattern (no quote, '%' or '_') that starts no other.
        assert prefix[:-1].isalpha() and prefix.endswith("/"), prefix
        META_PREFIXES.add(prefix)

    def __post_init__(self) -> None:
        _own(self, "value")

    @property
    def meta(self) -> tuple[str, dict[str, Any] | None]:
        """Its ``broker_meta`` row: (name, value; None: delete the row)."""
        return self.PREFIX + self.key, self.value


@dataclass(frozen=True, slots=True)
class SaveShovel(MetaFact):
    """The declaration of shovel ``key`` (server/shovels.py).  Shovels are the broker's, not a
    vhost's (a shovel name has no '/')."""

    PREFIX: ClassVar[str] = "shovel/"


@dataclass(frozen=True, slots=True)
class SavePolicy(MetaFact):
    """Policy ``key`` (server/policies.py); a shared store tells every broker at once
    (``StoreEvents.policies_changed``).  The record names its vhost, so the key carries no
    prefix."""

    PREFIX: ClassVar[str] = "policy/"


#: What ``Store.write`` takes: every structural fact.
Row = (
    Purge | SaveExchange | DropExchange | SaveBinding | DropBinding | Release | SaveStream | TrimStream | DropStream
    | SaveVhost | DropVhost | SaveQueue | CapExpiry | MetaFact
)
#: Every row type, for tests that go over all of them.
ROW_TYPES: tuple[type[Row], ...] = (
    Purge, SaveExchange, DropExchange, SaveBinding, DropBinding, Release, SaveStream, TrimStream, DropStream,
    SaveVhost, DropVhost, SaveQueue, CapExpiry, SaveShovel, SavePolicy,
)

R = TypeVar("R", Row, ExchangeRecord, BindingRecord)


def in_space(row: R, space: str) -> R:
    """``row`` with the vhost prefix ``space`` on each of its store keys (``KEYS``; a record
    field, like ``SaveExchange.exchange``, gets it on its own keys): the one place a
    ``VhostStore`` names a row under its vhost."""
    if not space or not row.KEYS:
        return row
    changes: dict[str, Any] = {}
    for name in row.KEYS:
        value = getattr(row, name)
        changes[name] = space + value if isinstance(value, str) else in_space(value, space)
    return dataclasses.replace(row, **changes)
