"""The Store interface every backend implements, and the records it moves.

Theory of operation
-------------------
The broker runs on one trio thread and must never wait on the disk per message.
So the write side of a store is *buffered and synchronous*: ``insert``,
``update`` and ``delete`` only record the operation in the store's pending
batch and return at once.  Operations on the same message coalesce inside a
batch (insert + delete = nothing reaches the disk, which is how a message acked
before its flush never touches the disk).  Structural facts (declarations, purges,
retention cuts) are buffered the same way through one verb, ``write(row)``, over the row
types of ``storage/rows.py``.

Durability is asked for with tickets.  ``sync_ticket()`` returns the number of
the commit group that will hold everything buffered so far (or the last
committed ticket when nothing is pending) and makes sure that group is
committed soon, without waiting for the flush interval.  When a group commits,
the store calls ``events.committed(ticket)`` on the trio thread; when it fails it calls
``events.commit_failed(ticket, error)`` and keeps the failed operations pending so a
later group retries them.  Tickets commit in increasing order, so a connection
that queues its RECEIPTs behind tickets keeps them in order.

A store that falls behind the disk says so in ``health().backlog``, and
``wait_for_room`` lets the server hold its readers back while the store holds
more than its limits (operations and bytes) not yet on disk, woken by the store
rather than by polling.

Reads (``load_ready``, ``count``) are async and rare: a queue pages in a window
of ready messages at a time.  A read sees every operation buffered before it
was called.

Records are plain slotted objects owned by the broker; a store must copy the
fields it needs when it takes a batch (the broker keeps mutating ``delivered``
and ``redeliveries`` on its side).  Their fields are stored facts; what only the
engine needs stays in the engine, and a store that would act on engine policy asks
for it through ``StoreEvents`` (the write-behind's ``hold_back``).

Several brokers may share one store (``shared``: the PostgreSQL store).  Then a
message row belongs to the broker holding it in memory (``StoredMessage.held``),
sequence numbers come from the store in blocks (``seq_block``), a ``Release`` row
frees the rows of a queue that left this broker's memory, ``publish_topic``
carries a topic message to the other brokers, and the store tells the runtime
what the others did through its ``StoreEvents`` (``queue_changed``, ``topic``,
``definitions_changed`` ...).  A store used by one broker keeps the defaults of the
"several brokers" methods, which are what sharing nothing means.

Everything a store reports goes to ONE ``StoreEvents`` object, handed over by one
``Store.bind`` call (the runtime's, server/runtime.py): tickets committed or failed, commit
groups, stream states and the news of other brokers.  Every other method of ``Store`` is
abstract, except the few whose default is the one behaviour every store of one broker shares
(each says why).

Virtual hosts: below the engine, every queue, exchange, stream and topic is named by a
*store key*, ``vhost_space(vhost) + name`` (``stompmq.vhost_names``): the bare name in the default vhost ``/`` (so
its keys, and its engine's calls, are exactly as before vhosts), ``VHOST\nname`` in any
other (names never contain a newline).  An engine of another vhost sees a
``storage.vhosts.VhostStore`` view that adds and strips the prefix; a message carries its
vhost's prefix in ``StoredMessage.space``.  Backends split a key into the ``vhost`` and
``name`` columns (``split_key``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..vhost_names import DEFAULT_VHOST
from .ages import NO_AGES, QueueAges
from .header_filter import HeaderFilter
from .messages import StoredMessage as StoredMessage
from .messages import StreamMessage as StreamMessage
from .messages import by_order as by_order
from .records import BindingRecord, ExchangeRecord, QueueRecord

if TYPE_CHECKING:
    from .rows import MetaFact, Row

T = TypeVar("T")


#: Bytes a buffered message costs besides its body: the StoredMessage, its header dict and the
#: store's pending entry (measured: ~570 B with three short headers and a 100 B body).  Memory
#: budgets (unflushed writes, ready windows) count ``len(body) + MESSAGE_OVERHEAD`` per message.
MESSAGE_OVERHEAD = 512


#: The SEND headers of an idempotent stream append: the producer's id and its sequence number.
#: The engine takes them off the entry (``StreamMessage.producer``): a store keeps each producer's
#: highest number in the commit of the entry (``stream_producers``), so the entry and the
#: producer's position are one fact, and the entry's stored headers stay the sender's others.
PRODUCER_HEADER, PRODUCER_SEQ_HEADER = "x-producer-id", "x-producer-seq"
#: Longest producer id, in characters (the ``producer`` column holds it).
PRODUCER_ID_LENGTH = 200
#: Longest consumer group name of a stream, in characters (the ``stream_groups.name`` column).
GROUP_NAME_LENGTH = 200


def producer_positions(producers: Iterable[tuple[str, tuple[str, int] | None]]) -> dict[tuple[str, str], int]:
    """Per (stream, producer), the highest sequence number among ``producers`` (stream, the
    append's (producer, seq) or None): what a commit of these appends writes to
    ``stream_producers``.  The engine checked both before the entry was buffered."""
    positions: dict[tuple[str, str], int] = {}
    for name, producer in producers:
        if producer is not None:
            key, seq = (name, producer[0]), producer[1]
            if seq > positions.get(key, -1):
                positions[key] = seq
    return positions


class StoreError(Exception):
    """The store could not do what was asked (cannot open, disk full, locked ...).

    The message is meant for an operator or an ERROR frame's ``message`` header.
    """


class StoreRejected(StoreError):
    """The database refused what a commit group carries, not the commit (a value it cannot
    hold, a constraint broken): trying the same rows again fails the same way, so the group
    commit isolates the rows refused (storage/groupcommit.py) instead of retrying them."""


#: What a database driver raises, before any SQL runs, for a value it cannot bind (an int past
#: 64 bits: OverflowError): the rows' fault, so a backend's commit raises StoreRejected for it.
REFUSED_VALUES: tuple[type[Exception], ...] = (OverflowError, ValueError, TypeError)


class CommitInDoubt(StoreError):
    """A commit whose outcome is unknown: the connection was lost while the database committed.

    Its writes may be on disk or not; the next commit, which carries them again, settles it
    (a backend must accept a row it may have written already), so until then none of them
    may be answered as "not stored".
    """


#: The offset of a stream entry not numbered yet: on a store several brokers share, entries are
#: numbered in the commit (``StreamState``), after every offset known before it, so only a trim
#: to the end (``TRIM_ALL``) covers a pending one.
UNNUMBERED = 2**63 - 2
#: ``TrimStream``'s ``before`` for a purge: every entry appended so far, pending ones included.
TRIM_ALL = 2**63 - 1


@dataclass(frozen=True, slots=True)
class StreamState:
    """A stream as the database of a shared store has it after a commit: the counter row that
    numbers appends (``next``), the retained range and the options.  Every offset below ``next``
    is committed and final: appenders take the row's lock, so they commit in offset order."""

    id: int  # the row: a stream deleted and made again is another row
    first: int  # first retained offset
    next: int  # offset of the next append
    end_bytes: int  # body bytes appended since offset 0
    last_ts: int  # timestamp (ms) of the newest entry: appends keep them non-decreasing
    options: dict[str, str]


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """A stream as a store recovers it: its declaration options and its retained offsets."""

    name: str
    options: dict[str, str]
    first: int  # first retained offset (== next when nothing is retained)
    next: int  # offset the next append gets: offsets are never reused
    row: int | None = None  # a shared store's row id (``StreamState.id``)
    producers: dict[str, int] = field(default_factory=dict)  # idempotent producers' highest seq
    groups: dict[str, int] = field(default_factory=dict)  # consumer groups' committed offsets


@dataclass(slots=True)
class Recovery:
    """What a store hands the broker when it opens."""

    last_seq: int  # highest seq ever stored (0 for an empty store)
    exchanges: list[ExchangeRecord]
    bindings: list[BindingRecord]
    streams: list[StreamRecord] = field(default_factory=list)  # sorted by name
    vhosts: list[str] = field(default_factory=lambda: [DEFAULT_VHOST])  # declared vhosts, sorted
    queues: list[QueueRecord] = field(default_factory=list)  # declared queues, sorted by name
    #: broker-wide facts (``rows.MetaFact``): their kind's ``PREFIX`` -> key -> value, by key
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    def facts(self, kind: type[MetaFact]) -> dict[str, Any]:
        """The stored facts of ``kind`` (``SaveShovel``, ``SavePolicy`` ...): key -> value as
        written, in key order."""
        return self.meta.get(kind.PREFIX, {})


@dataclass(frozen=True, slots=True)
class BrokerLease:
    """One broker on a shared store's database, as the management API lists it."""

    id: str
    epoch: int  # its lease's epoch (the fencing token of its claims)
    lease_until: float  # epoch seconds, on the database's clock
    renewed: float | None  # epoch seconds of its last renewal
    claimed: int  # ready messages it holds under its current epoch
    unacked: int  # messages it has out for delivery
    version: str | None
    live: bool  # its lease runs now (the database's clock): a lapsed one is forgotten at the next renewal
    counters: dict[str, int]  # what it counted since it started, as of its last renewal


@dataclass(frozen=True, slots=True)
class Brokers:
    """The brokers on a shared store's database (``Store.brokers``): one read, so the departed
    brokers' counters are of the same instant as the leases they are summed with."""

    leases: list[BrokerLease] = field(default_factory=list)  # by id
    #: What the brokers that left the database (stopped, or swept after a crash) counted, summed:
    #: with the leases' counters, the cluster's totals, cumulative across restarts.
    departed: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """What a store says about itself to ``/metrics``, ``/readyz`` and ``/api/overview``: one
    read instead of a method per figure, so the interface (and every view forwarding it, as a
    ``VhostStore``) stays narrow.  The defaults are a store that buffers nothing, keeps
    nothing on disk and is never unavailable (memory)."""

    backlog: int = 0  # operations buffered and not yet committed
    outages: int = 0  # times the store became unavailable since start
    outage_seconds: float = 0.0  # seconds it was unavailable since start, the outage going on included
    unavailable: bool = False  # not accepting writes now (an outage going on: /readyz says not ready)
    disk_bytes: int | None = None  # bytes on disk now; None where this process cannot tell


@dataclass(frozen=True, slots=True)
class QueueCount:
    """One queue as the store sees it (the management API's queue list)."""

    name: str
    messages: int  # ready and delivered-unacked alike
    unacked: int
    oldest_ready_ms: int | None  # the timestamp of its oldest ready message, None when none
    oldest_unacked_ms: int | None  # that of its oldest delivered-unacked one


#: The highest sequence number a message can have (a signed 64-bit column).
SEQ_LIMIT = 2**63 - 1
#: Sequence numbers per ``seq_block`` of a store of one broker: each vhost's engine takes its
#: own blocks from the one store, so no two engines hand out the same number.
SEQ_CHUNK = 4096


class StoreEvents:
    """What a store reports to its owner, always on the trio thread: one object, handed over
    by ``Store.bind``.  Every method here does nothing: that is what an unbound store (a tool,
    a test of the store alone) does with its news, having nobody to tell.  The runtime binds
    one that forwards each report to the engines (server/runtime.py).

    ``committed``, ``commit_failed``, ``group_committed`` and ``stream_changed`` come from
    any store that commits; the others only from a ``shared`` one (what other brokers did).
    Two are questions, not news: ``hold_back`` (the engine's write-behind rule) and
    ``own_counters``.
    """

    def committed(self, ticket: int) -> None:
        """Every commit group up to ``ticket`` is on disk (tickets commit in order)."""

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        """The group of ``ticket`` failed; its writes stay pending and a later group retries them."""

    def rejected(self, messages: list[StoredMessage], error: StoreRejected) -> None:
        """The database refused these messages' rows (``StoreRejected``): they are not stored and
        never will be, while the rest of their group committed.  Reported before the group's
        ``committed``, so a SEND among them is answered ERROR, never RECEIPT."""

    def group_committed(self, seconds: float, size: int) -> None:
        """A commit group committed: seconds from submit to commit, operations in it (for
        /metrics; a store that never commits, memory, never reports it)."""

    def stream_changed(self, name: str, state: StreamState | None) -> None:
        """A stream's state after a commit, by this broker (before its ticket's ``committed``)
        or another (notified); None: the stream was deleted."""

    def queue_changed(self, queue: str, first: tuple[int, int] | None = None,
                      passed: Sequence[int] | None = None) -> None:
        """Ready messages of ``queue`` were stored or freed by another broker ("*": any queue),
        ``first`` the lowest order key (``StoredMessage.order_key``) among them (None: unknown);
        ``passed``: they are these seqs, which no selector on that broker matched (pass_over)."""

    def queue_wanted(self, queue: str) -> None:
        """Subscribers on another broker want messages of ``queue``: keep no more of it than
        this broker's own subscribers can take (claim on demand, broker/dispatch.py)."""

    def claims_renewed(self, lost: bool) -> None:
        """This broker's lease was renewed after its claims were not trusted (``claims_valid``):
        ``lost`` if it had lapsed, so the claims held in memory are void (others may have them)."""

    def topic(self, topic: str, headers: dict[str, str], body: bytes) -> None:
        """A topic message was published through another broker."""

    def definitions_changed(self, exchanges: list[ExchangeRecord], bindings: list[BindingRecord]) -> None:
        """Exchanges or bindings changed: the whole current set."""

    def policies_changed(self, records: list[dict[str, Any]]) -> None:
        """Another broker changed the stored policies: all of them (reported after ``definitions_changed``)."""

    def vhosts_changed(self, vhosts: list[str]) -> None:
        """The declared vhosts changed (reported before ``definitions_changed``): all of them."""

    def hold_back(self) -> Callable[[StoredMessage], bool] | None:
        """The engine's rule for a timed flush, asked once per such group: does it expect a
        buffered insert's message settled before the next flush?  The group leaves those out,
        once, so a message acked in time never reaches the disk (storage/groupcommit.py).
        None (unbound): nothing is held back."""
        return None

    def own_counters(self) -> dict[str, int]:
        """This broker's message counters over all its queues since it started: a shared store
        writes them with each lease renewal, for the cluster totals (none when unbound)."""
        return {}


#: The reports of a store nobody bound go here.
UNBOUND = StoreEvents()


class Store(abc.ABC):
    """A backend holding queued messages, exchanges and bindings.

    Lifecycle: ``recovery = await store.open()``, then ``await store.run()`` in a
    nursery (flush timer, commit loop) for the broker's lifetime, and
    ``await store.close()`` at shutdown, which commits everything pending.
    ``open`` also makes every message that was delivered but not acked ready
    again, counting one more redelivery for it (at-least-once after a crash).
    """

    #: False for stores that lose everything at exit (the memory store).  The
    #: broker keeps every message of such a store in memory and never pages.
    durable: bool = True

    #: Several brokers may use this store at once (claims, leases, notifications matter).
    shared: bool = False

    def __init__(self) -> None:
        #: where the store reports (``bind``); nobody until the owner binds itself
        self.events: StoreEvents = UNBOUND
        self._seq_handed = 0  # the end of the last block handed out by seq_block

    def bind(self, events: StoreEvents) -> None:
        """Report to ``events`` from now on: the one place a store's owner hooks in (the
        runtime, once, before ``open``)."""
        self.events = events

    # -- several brokers: each default is what a store of one broker (not ``shared``) does ----
    @property
    def node_id(self) -> str:
        """This broker's name among those sharing the store ("" when it is alone)."""
        return ""

    def seq_block(self, last: int) -> tuple[int, int]:
        """Sequence numbers [start, end) an engine may hand out next, ``last`` being the last
        one it gave; a store of one broker gives the next ``SEQ_CHUNK`` numbers after both
        ``last`` and every block handed out before (one engine per vhost shares it)."""
        start = max(last, self._seq_handed) + 1
        self._seq_handed = end = min(start + SEQ_CHUNK, SEQ_LIMIT)
        return start, end

    def claims_valid(self) -> bool:
        """May this broker act on the messages it claimed (its lease is surely running)?  False
        once its own clock says the lease may have lapsed, until ``events.claims_renewed``.  A
        store of one broker holds no lease: its claims are always its own."""
        return True

    def promoted(self, delayed: int, copy: int) -> None:  # noqa: B027 - a store of one broker fences nothing
        """The delayed message numbered ``delayed`` was published anew as ``copy``.  On a store
        several brokers share, ``copy`` is stored only if the delete of ``delayed``'s row takes
        effect: a broker paused past its lease may have lost that row to another broker, which
        promotes it itself (a store of one broker has no other broker to lose it to)."""

    def publish_topic(self, topic: str, headers: dict[str, str], body: bytes) -> None:  # noqa: B027
        """Carry a topic message to the other brokers (it is never stored; a store of one broker
        has no other broker to carry it to)."""

    # -- lifecycle ---------------------------------------------------------
    @abc.abstractmethod
    async def open(self) -> Recovery: ...

    @abc.abstractmethod
    async def run(self) -> None:
        """Run the store's background work until cancelled."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Commit everything pending and release the database."""

    # -- buffered writes (trio thread, never block) -------------------------
    @abc.abstractmethod
    def insert(self, msg: StoredMessage) -> None: ...

    @abc.abstractmethod
    def update(self, msg: StoredMessage) -> None:
        """Persist ``msg.delivered``, ``msg.redeliveries`` and ``msg.priority`` as they are now."""

    def pass_over(self, msg: StoredMessage) -> None:
        """``update`` for a ready row no selector of this broker matches (broker/sift.py): a store
        several brokers share frees it with news that names the row (``queue_changed``'s
        ``passed``), so a broker that passed over each row named already reads none of them
        again, and two brokers whose subscribers both pass over a row do not hand it back and
        forth.  A store of one broker has nobody to tell."""
        self.update(msg)

    @abc.abstractmethod
    def delete(self, msg: StoredMessage) -> None:
        """The message is acked or discarded."""

    def delete_all(self, messages: Sequence[StoredMessage]) -> None:
        """``delete`` each of ``messages`` (a socket read's worth of ACKs): one call, so a store
        can take them in one step (the default, one ``delete`` each, is right for any store)."""
        for msg in messages:
            self.delete(msg)

    # -- structural writes: one verb over the stored facts' rows ---------------------------
    @abc.abstractmethod
    def write(self, row: Row) -> None:
        """Buffer the structural fact ``row`` (storage/rows.py: a declaration, its removal, a
        purge, a retention cut), applied in the order written, before the message writes of
        its commit group; a store applies every row type in one ``match``."""

    # -- streams: append-only logs, written in the same groups as the messages --------------
    @abc.abstractmethod
    def append_stream(self, msg: StreamMessage) -> None:
        """Buffer one stream entry; entries of a stream arrive in offset order (on a shared
        store unnumbered, ``offset`` = ``UNNUMBERED``: the commit numbers them, in order)."""

    @abc.abstractmethod
    def save_stream_group(self, name: str, group: str, committed: int | None) -> None:
        """Buffer consumer group ``group``'s committed offset on stream ``name`` (None: forget
        the group); writes of one group coalesce, the newest wins, in the next commit group."""

    # -- durability ----------------------------------------------------------
    @property
    @abc.abstractmethod
    def committed(self) -> int:
        """The highest ticket whose group has committed."""

    @abc.abstractmethod
    def sync_ticket(self) -> int:
        """Ticket covering every write buffered so far; schedules its commit now."""

    @abc.abstractmethod
    def full(self) -> bool:
        """The store holds as much unflushed work as it may: producers are being held back."""

    @abc.abstractmethod
    async def wait_for_room(self) -> None:
        """Return once the writes not yet on disk are below the store's limits (operations and
        bytes): at once, without a checkpoint, if they are; otherwise re-checked each time a
        commit group finishes (committed or failed), never by polling.  Needs ``run()`` going
        to make progress."""

    @abc.abstractmethod
    def withdraw(self, msg: StoredMessage) -> bool:
        """Give up storing ``msg``: drop its buffered insert if it is certainly not on disk (its
        commit failed, or it never was tried) and return True; False if it may be stored (its
        group is in flight or in doubt) or is not buffered (stored, or acked before its flush)."""

    def health(self) -> StoreHealth:
        """Backlog, outages and size on disk, as of now (``StoreHealth``); the default is a store
        that buffers nothing and is never unavailable (memory)."""
        return StoreHealth()

    # -- reads ---------------------------------------------------------------
    @abc.abstractmethod
    async def load_ready(
        self, queue: str, after: tuple[int, int] | None, limit: int, matching: HeaderFilter | None = None
    ) -> Sequence[StoredMessage]:
        """Up to ``limit`` messages of ``queue`` not delivered, in (priority desc, seq asc)
        order, strictly after the order key ``after`` = ``(-priority, seq)`` (None: from the
        start).  The broker filters out messages it holds in flight itself.  With ``matching``
        the store may leave out, and count nothing for, the rows that match none of its terms
        (header_filter.py); a store that cannot test headers in its scan ignores it."""

    @abc.abstractmethod
    async def load_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        """Up to ``limit`` delayed messages (any queue of ``vhost``) in (deliver_at, seq) order
        strictly after ``after`` = ``(deliver_at, seq)`` (None: from the start): a range scan of
        the due-time index.  The engine's call names no vhost, so the default vhost's engine,
        which uses the store itself, never sees another vhost's rows; a ``VhostStore`` passes
        its own."""

    async def browse_due(
        self, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> Sequence[StoredMessage]:
        """Like ``load_due`` but claiming nothing: what the schedule listing shows.  The default
        suits a store of one broker, whose ``load_due`` claims nothing either."""
        return await self.load_due(after, limit, vhost)

    @abc.abstractmethod
    async def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int, vhost: str = DEFAULT_VHOST
    ) -> tuple[Sequence[StoredMessage], int | None]:
        """Up to ``limit`` ready (not delivered) messages of ``vhost`` whose ``expires`` is before
        ``now_ms``, in (expires, seq) order strictly after ``after`` (None: from the start), and
        the earliest expiry not yet reached in any vhost (None: no stored message can expire; an
        earlier one of another vhost only wakes the engine once more): a range of the expiry
        index, never a scan of a queue."""

    @abc.abstractmethod
    async def queue_size(self, queue: str, snapshot: Callable[[], T]) -> tuple[int, int, T]:
        """Messages stored for ``queue`` and their body bytes, with ``snapshot()`` called at the
        instant the answer's view of the buffered writes is fixed (writes buffered before it
        are counted, later ones are not), so the broker can add what happened since."""

    async def browse(
        self, queue: str, after: tuple[int, int] | None, limit: int
    ) -> Sequence[StoredMessage]:
        """Like ``load_ready`` but claiming nothing: what a browsing subscriber is shown.  The
        default suits a store of one broker, whose ``load_ready`` claims nothing either."""
        return await self.load_ready(queue, after, limit)

    @abc.abstractmethod
    async def queue_exists(self, name: str) -> bool:
        """Does the store know queue ``name`` (``/amq/queue/NAME`` must name an existing one)?"""

    @abc.abstractmethod
    async def queue_names(self, prefix: str) -> list[str]:
        """Names of the queues the store knows that start with ``prefix`` (cold path: start-up)."""

    @abc.abstractmethod
    async def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        """Up to ``limit`` entries of stream ``name`` with offset >= ``start``, in offset order."""

    async def stream_state(self, name: str) -> StreamState | None:
        """A shared store's committed state of stream ``name`` (None: no such stream); a store of
        one broker returns None (its engine numbers the entries and knows)."""
        return None

    async def stream_groups(self, name: str) -> dict[str, int] | None:
        """A shared store's committed consumer groups of stream ``name`` (other brokers commit
        them too); a store of one broker returns None (its engine wrote them all and knows)."""
        return None

    @abc.abstractmethod
    async def count(self, queue: str) -> int:
        """Messages stored for ``queue``, ready and delivered-unacked alike."""

    @abc.abstractmethod
    async def count_unacked(self, queue: str) -> int:
        """Messages of ``queue`` out for delivery (by any broker sharing the store)."""

    async def queue_ages(self, queue: str) -> QueueAges:
        """The timestamps of the oldest ready and oldest delivered-unacked message of ``queue``
        (storage/ages.py); a store that is not durable holds none (the engine knows its own)."""
        return NO_AGES

    async def brokers(self) -> Brokers:
        """Every broker on a shared store's database with its lease and claims, and what the
        departed ones counted (``Brokers``); a store of one broker has none."""
        return Brokers()

    @abc.abstractmethod
    async def queue_page(self, after: str, limit: int, snapshot: Callable[[], T]) -> tuple[list[QueueCount], T]:
        """Up to ``limit`` queues the store knows, named after ``after``, in name order, with
        their counts (the management API pages through a million queues with this), and
        ``snapshot()`` called at the instant the counts' view of the buffered writes is fixed
        (as ``queue_size``), so the broker's own counts (deliveries in flight) are of the same
        instant."""
