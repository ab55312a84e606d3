"""The ``stompmq`` PySpark data source: streams in (batch and streaming), SENDs out.

Theory of operation
-------------------
Offsets are stream positions, ``{stream: next offset to read}``, so a micro-batch
is a set of offset ranges, one Spark partition per stream, or more with
``minPartitions`` (a range cut into consecutive pieces, each read by its own
subscription bounded by ``x-stream-end``).  The latest offsets
come from ``/control/stream-offsets``, whose RECEIPT the broker sends only once
every entry below ``next-offset`` is committed: a range Spark plans is on disk.
``read`` subscribes at the range's start and stops at its end; an entry never
changes once written, so reading a range again gives the same rows, and a query
restarted from its checkpoint replays its planned batch exactly (exactly once
with an idempotent sink such as Spark's file sink).  Admission control is the
4.2+ API: ``latestOffset(start, limit)`` with ``maxOffsetsPerTrigger`` (and
``minOffsetsPerTrigger`` / ``maxTriggerDelay``, decided on the driver's clock).
``startingTimestamp`` / ``startingOffsetsByTimestamp`` become offsets at planning time:
the broker answers the first offset at or after a time (``timestamp-offset``).
Option names are Kafka's where the meaning is the same, and an unknown option is
an error: a typo must not silently read from ``latest``.  With the option ``group`` a
streaming read commits each micro-batch's end offsets to that broker consumer group once
Spark has committed the batch (``/control/stream-group``), so the broker's lag shows the
query's progress; like Kafka's, the source never starts from the group (the checkpoint
decides), and a refused commit is logged, not fatal.

Writes: each row becomes a SEND with a receipt; a task returns (its commit
message) only after every RECEIPT, i.e. once the broker has stored every row.
A streaming write is exactly once: every task is an idempotent producer, id
``QUERYID/PARTITION`` (the query id is kept in the checkpoint), and numbers its
rows ``batchId * 2**32 + row index``, so a retried task or a batch replayed after
a restart sends the same numbers and the broker drops what it already stored.
That holds as long as a replayed batch has the same rows in the same order per
partition (a deterministic source replayed from the checkpoint, such as this one
or Kafka).  A batch write (``df.write``) is at-least-once, unless given ``producerId``: then
each task is the producer ``PRODUCERID/PARTITION`` numbering its rows by index (or by the
``sequenceColumn``), so running the same write again, or retrying a task, adds nothing.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows
from pyspark.sql.types import StructType

from ..protocol import Frame, encode_frame
from .client import BROKER_HEADERS, STREAM_PREFIX, Chunk, Connection, StompmqError, lost

SCHEMA = (
    "destination string, offset long, message_id string, timestamp timestamp, priority int,"
    " headers map<string,string>, body binary"
)
Offsets = dict[str, int]
T = TypeVar("T")


log = logging.getLogger(__name__)

#: The options of a read and of a write (Spark hands them over lower-cased).
READ_OPTIONS = (
    "url", "login", "passcode", "destination", "exchange", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "endingOffsets", "failOnDataLoss", "minPartitions", "maxOffsetsPerTrigger", "maxMessagesPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "group",
)
#: ``checkpointLocation`` and ``path`` are Spark's own (a streaming write's checkpoint, save(path)).
WRITE_OPTIONS = ("url", "login", "passcode", "destination", "producerId", "sequenceColumn", "checkpointLocation",
                 "path")
#: The local properties Spark gives every task of a streaming query: the query's id (kept in the
#: checkpoint, so a restarted query has it too) and the micro-batch's id.
QUERY_ID_PROPERTY, BATCH_ID_PROPERTY = "sql.streaming.queryId", "streaming.sql.batchId"
#: A streaming task's row ``i`` of batch ``b`` is its producer's number ``b * SEQ_PER_BATCH + i``.
SEQ_PER_BATCH = 2**32
#: Longest ``producerId``: the broker takes producer ids of up to 200 characters, and a task's
#: adds ``/PARTITION``.
PRODUCER_ID_CHARS = 180
#: Kafka's default ``maxTriggerDelay``.
TRIGGER_DELAY_DEFAULT = "15m"
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Options:
    url: str
    login: str | None
    passcode: str | None
    streams: list[str]
    fail_on_data_loss: bool = True
    min_partitions: int = 1

    def connect(self) -> Connection:
        return Connection(self.url, self.login, self.passcode)


def _check_known(options: Mapping[str, str], known: Sequence[str]) -> None:
    """Every option is one of ``known``; an unknown one names the nearest known name (Spark
    lower-cases them, so they are compared lower-cased and suggested as documented)."""
    names = {k.lower(): k for k in known}
    for key in options:
        if key.lower() not in names:
            near = difflib.get_close_matches(key.lower(), names, n=1)
            hint = f"did you mean {names[near[0]]!r}? " if near else ""
            raise StompmqError(f"unknown option {key!r}; {hint}the options are {', '.join(known)}")


def _planned(make: Callable[[], T]) -> T:
    """``make()`` (a reader or a writer, in the Python worker that plans the query), with an
    option error shown as its one line: the message used to come after some 2,000 characters
    of traceback.  The worker formats the exception it dies of after this, reading
    ``SPARK_HIDE_TRACEBACK`` then (pyspark.util.handle_worker_exception), and exits: setting it
    here concerns this worker's last exception only.  Without it (another Spark version) the
    traceback is still cut to the frames from here on."""
    try:
        return make()
    except StompmqError as error:
        os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise error.with_traceback(None) from None


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and int(value) > 0):
        raise StompmqError(f"option {name!r} must be a positive integer, not {value!r}")
    return int(value)


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise StompmqError(f"option {name!r} must be true or false, not {value!r}")
    return value.lower() == "true"


def _seconds(value: str, name: str) -> float:
    """A duration as Kafka's options write it: ``500ms``, ``30s``, ``15m``, ``1h``."""
    m = _DURATION.fullmatch(value.strip())
    if m is None:
        raise StompmqError(f"option {name!r} must be a duration such as 30s, 15m or 500ms, not {value!r}")
    return int(m[1]) * _UNITS[m[2]]


def _options(options: Mapping[str, str], *, reading: bool) -> Options:
    _check_known(options, READ_OPTIONS if reading else WRITE_OPTIONS)
    url = options.get("url")
    if not url:
        raise StompmqError("option 'url' is required (stomp://host:port)")
    login, passcode = options.get("login"), options.get("passcode")
    streams: list[str] = []
    if reading:
        destination, exchange = options.get("destination"), options.get("exchange")
        if exchange:
            with Connection(url, login, passcode) as conn:
                streams = conn.bound_streams(exchange)
        elif destination:
            for one in destination.split(","):
                one = one.strip()
                if not one.startswith(STREAM_PREFIX) or len(one) == len(STREAM_PREFIX):
                    raise StompmqError(f"option 'destination': {one!r} is not a stream (/stream/NAME)")
                streams.append(one[len(STREAM_PREFIX):])
        else:
            raise StompmqError("option 'destination' (/stream/NAME[,...]) or 'exchange' is required")
    return Options(url, login, passcode, streams, _flag(options, "failOnDataLoss", True),
                   _positive(options, "minPartitions") or 1)


def _bounds(opts: Options) -> dict[str, tuple[int, int]]:
    with opts.connect() as conn:
        return {s: conn.stream_bounds(s) for s in opts.streams}


def _resolve(spec: str | None, default: str, bounds: Mapping[str, tuple[int, int]], name: str) -> Offsets:
    """``earliest``, ``latest`` or JSON ``{"stream": offset}`` (missing streams: ``default``)."""
    spec = spec or default
    picks: dict[str, Any] = {}
    if spec not in ("earliest", "latest"):
        try:
            picks = json.loads(spec)
        except ValueError:
            raise StompmqError(f"option {name!r} must be earliest, latest or JSON {{stream: offset}}") from None
        if not isinstance(picks, dict) or not all(isinstance(v, int) and v >= 0 for v in picks.values()):
            raise StompmqError(f"option {name!r} must map stream names to offsets (whole numbers >= 0)")
        unknown = sorted(set(picks) - set(bounds))
        if unknown:
            raise StompmqError(f"option {name!r} names {', '.join(unknown)}, not a stream of this read")
        spec = default
    index = 0 if spec == "earliest" else 1
    return {s: int(picks.get(s, bounds[s][index])) for s in bounds}


@dataclass(frozen=True)
class Starting:
    """Where a read starts: ``startingOffsets``, then, for the streams the timestamp options
    name, the first offset at or after their time (Kafka's precedence)."""

    offsets: str | None
    times: dict[str, int]  # stream -> epoch milliseconds
    option: str  # the timestamp option given (for errors)
    latest: bool  # startingOffsetsByTimestampStrategy=latest: no entry that late starts at the end

    @classmethod
    def parse(cls, options: Mapping[str, str], streams: Sequence[str]) -> Starting:
        one, per = options.get("startingTimestamp"), options.get("startingOffsetsByTimestamp")
        strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").lower()
        if strategy not in ("error", "latest"):
            raise StompmqError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, not {strategy!r}")
        if one is not None and per is not None:
            raise StompmqError("options 'startingTimestamp' and 'startingOffsetsByTimestamp' both set a start: give one")
        times: Any = {}
        if one is not None:
            if not (one.isascii() and one.isdigit()) or len(one) > 18:
                raise StompmqError(f"option 'startingTimestamp' must be epoch milliseconds, not {one!r}")
            times = dict.fromkeys(streams, int(one))
        elif per is not None:
            try:
                times = json.loads(per)
            except ValueError:
                times = None
            if not isinstance(times, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**18 for v in times.values()
            ):
                raise StompmqError("option 'startingOffsetsByTimestamp' must be JSON {stream: epoch milliseconds}")
            unknown = sorted(set(times) - set(streams))
            if unknown:
                raise StompmqError(f"option 'startingOffsetsByTimestamp' names {', '.join(unknown)}, "
                                   "not a stream of this read")
        option = "startingTimestamp" if one is not None else "startingOffsetsByTimestamp"
        return cls(options.get("startingOffsets"), times, option, strategy == "latest")

    def resolve(self, opts: Options, default: str, bounds: Mapping[str, tuple[int, int]]) -> Offsets:
        """The offsets, asking the broker where each named time falls."""
        start = _resolve(self.offsets, default, bounds, "startingOffsets")
        if self.times:
            with opts.connect() as conn:
                for stream, ms in self.times.items():
                    offset, nxt = conn.offset_at(stream, ms)
                    if offset >= nxt and not self.latest:
                        raise StompmqError(
                            f"option {self.option!r}: stream {stream!r} has no entry at or after {ms} "
                            "(option startingOffsetsByTimestampStrategy=latest starts it at its end)")
                    start[stream] = offset
        return start


# -- reading ------------------------------------------------------------------------------------
class StreamRange(InputPartition):
    def __init__(self, stream: str, start: int, end: int) -> None:
        super().__init__((stream, start, end))
        self.stream, self.start, self.end = stream, start, end


#: The source's rows as Arrow: ``read`` yields record batches, which Spark takes without
#: converting Python tuples row by row (docs/benchmarks.md, "Streams and Spark").
ARROW_SCHEMA = pa.schema([
    ("destination", pa.string()), ("offset", pa.int64()), ("message_id", pa.string()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("priority", pa.int32()),
    ("headers", pa.map_(pa.string(), pa.string())), ("body", pa.binary()),
])
#: Rows per record batch: big enough to amortise the batch, small enough to bound memory.
BATCH_ROWS = 8192


def _read(opts: Options, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, StreamRange):
        return  # Spark's stand-in partition for an empty read (partitions() returned none)
    destination = STREAM_PREFIX + partition.stream
    with opts.connect() as conn:
        start, end = partition.start, partition.end
        first, _ = conn.stream_bounds(partition.stream)
        if start < first:  # known before subscribing: the broker would start at ``first``
            lost(partition.stream, start, first, opts.fail_on_data_loss)
            start = first
        for chunk in conn.read_chunks(partition.stream, start, end, BATCH_ROWS, opts.fail_on_data_loss):
            yield _batch(destination, chunk)


_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _batch(destination: str, chunk: Chunk) -> pa.RecordBatch:
    """The chunk's columns as Arrow arrays: the decimal numbers are parsed by Arrow's casts, in
    bulk, and the offsets are the range the reader checked entry by entry."""
    n = len(chunk.bodies)
    return pa.RecordBatch.from_arrays([
        pa.repeat(pa.scalar(destination, pa.string()), n),
        pa.array(range(chunk.start, chunk.start + n), pa.int64()),
        pa.array(chunk.ids, pa.string()),
        pc.multiply(pa.array(chunk.timestamps, pa.string()).cast(pa.int64()), 1000).cast(_TIMESTAMP),
        pa.array(chunk.priorities, pa.string()).cast(pa.int32()),
        _headers(chunk.headers),
        pa.array(chunk.bodies, pa.binary()),
    ], schema=ARROW_SCHEMA)


def _headers(blocks: list[bytes | dict[str, str]]) -> pa.MapArray:
    """The user headers of each entry, flattened into one map column (most entries have none)."""
    keys: list[str] = []
    values: list[str] = []
    ends = [0]
    if any(blocks):
        for block in blocks:
            if isinstance(block, dict):
                pairs = list(block.items())
            else:
                pairs = [line.partition(":")[::2] for line in block.decode().split("\n")[:-1]]
            for k, v in pairs:
                if k not in BROKER_HEADERS:
                    keys.append(k)
                    values.append(v)
            ends.append(len(keys))
    else:
        ends *= len(blocks) + 1
    return pa.MapArray.from_arrays(pa.array(ends, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string()))


def _ranges(start: Offsets, end: Offsets, pieces: int) -> list[InputPartition]:
    """The ranges [start, end) of the streams, cut into at least ``pieces`` partitions (as many
    as there are entries at most): a stream's share of the pieces follows its share of the
    entries, so each partition reads about as much (Kafka's ``minPartitions``)."""
    spans = {s: (start.get(s, end[s]), end[s]) for s in end if start.get(s, end[s]) < end[s]}
    total = sum(b - a for a, b in spans.values())
    ranges: list[InputPartition] = []
    for s, (a, b) in spans.items():
        n = min(b - a, max(1, math.ceil((b - a) * pieces / total)))
        ranges += [StreamRange(s, a + (b - a) * i // n, a + (b - a) * (i + 1) // n) for i in range(n)]
    return ranges


class StompmqBatchReader(DataSourceReader):
    """``spark.read``: the offset ranges [startingOffsets, endingOffsets) of the streams."""

    def __init__(self, opts: Options, options: Mapping[str, str]) -> None:
        for name in ("maxOffsetsPerTrigger", "maxMessagesPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
                     "group"):
            if name in options:
                raise StompmqError(f"option {name!r} applies to readStream only")
        self.opts = opts
        bounds = _bounds(opts)
        self.start = Starting.parse(options, opts.streams).resolve(opts, "earliest", bounds)
        self.end = _resolve(options.get("endingOffsets"), "latest", bounds, "endingOffsets")
        for s, offset in self.end.items():
            if offset > bounds[s][1]:
                raise StompmqError(f"option 'endingOffsets': {offset} is past the end of stream {s!r} "
                                   f"(its next offset is {bounds[s][1]})")

    def partitions(self) -> Sequence[InputPartition]:
        return _ranges(self.start, self.end, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class StompmqStreamReader(DataSourceStreamReader):
    """``spark.readStream``: per micro-batch, one partition per stream (or ``minPartitions``),
    offsets {stream: offset}."""

    def __init__(self, opts: Options, options: Mapping[str, str]) -> None:
        if "endingOffsets" in options:
            raise StompmqError("option 'endingOffsets' applies to batch reads (spark.read) only")
        self.opts = opts
        self.group = options.get("group")
        self.starting = Starting.parse(options, opts.streams)
        self.max_per_trigger = _positive(options, "maxOffsetsPerTrigger")
        alias = _positive(options, "maxMessagesPerTrigger")  # the name before Kafka's
        if alias is not None and self.max_per_trigger is not None:
            raise StompmqError("options 'maxOffsetsPerTrigger' and 'maxMessagesPerTrigger' are one limit: give one")
        self.max_per_trigger = self.max_per_trigger or alias
        self.min_per_trigger = _positive(options, "minOffsetsPerTrigger")
        delay = options.get("maxTriggerDelay")
        if delay is not None and self.min_per_trigger is None:
            raise StompmqError("option 'maxTriggerDelay' needs 'minOffsetsPerTrigger'")
        self.max_delay = _seconds(delay or TRIGGER_DELAY_DEFAULT, "maxTriggerDelay")
        if self.min_per_trigger and self.max_per_trigger and self.min_per_trigger > self.max_per_trigger:
            raise StompmqError("option 'minOffsetsPerTrigger' must not exceed 'maxOffsetsPerTrigger'")
        self.last_batch = time.monotonic()  # when the last batch was admitted (maxTriggerDelay)

    def initialOffset(self) -> dict:
        return self.starting.resolve(self.opts, "latest", _bounds(self.opts))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        return ReadMinRows(self.min_per_trigger) if self.min_per_trigger else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = {s: nxt for s, (_, nxt) in _bounds(self.opts).items()}
        start = {s: int(start.get(s, latest[s])) for s in latest}
        if isinstance(limit, ReadAllAvailable):  # Trigger.AvailableNow: neither limit applies
            return latest
        now = time.monotonic()
        if not _due(start, latest, self.min_per_trigger, now - self.last_batch >= self.max_delay):
            return start
        self.last_batch = now
        return _admit(start, latest, self.max_per_trigger) if self.max_per_trigger else latest

    def reportLatestOffset(self) -> dict:
        return {s: nxt for s, (_, nxt) in _bounds(self.opts).items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return _ranges({s: int(v) for s, v in start.items()}, {s: int(v) for s, v in end.items()},
                       self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: report it to the ``group`` (monitoring
        only; retention alone decides what the broker drops)."""
        if self.group is None:
            return
        try:
            with self.opts.connect() as conn:
                for stream, offset in sorted(end.items()):
                    conn.commit_group(stream, self.group, int(offset))
        except StompmqError as e:
            log.warning("could not commit offsets %s to group %r: %s", end, self.group, e)


def _due(start: Offsets, latest: Offsets, minimum: int | None, overdue: bool) -> bool:
    """Whether a batch runs now: ``minOffsetsPerTrigger`` entries are waiting, or some are and
    ``maxTriggerDelay`` has passed since the last batch."""
    waiting = sum(max(0, latest[s] - start[s]) for s in latest)
    return minimum is None or waiting >= minimum or (overdue and waiting > 0)


def _admit(start: Offsets, latest: Offsets, budget: int) -> Offsets:
    """At most ``budget`` entries past ``start``, shared in proportion to what each stream has."""
    backlog = {s: max(0, latest[s] - start[s]) for s in latest}
    total = sum(backlog.values())
    if total <= budget:
        return dict(latest)
    end = {s: start[s] + backlog[s] * budget // total for s in latest}
    spare = budget - sum(end[s] - start[s] for s in latest)
    for s in sorted(latest, key=lambda s: -backlog[s]):  # the rounding remainder, largest first
        if spare <= 0:
            break
        if end[s] < latest[s]:
            end[s] += 1
            spare -= 1
    return end


# -- writing ------------------------------------------------------------------------------------
@dataclass
class Sent(WriterCommitMessage):
    count: int


def _frames(rows: Iterator[Any], default: str | None, producer: tuple[str, int] | None = None,
            column: str | None = None) -> Iterator[bytes]:
    """The SENDs of ``rows``; with ``producer`` (id, first number) each is numbered for the broker
    to drop repeats: the first number plus the row's index, or the row's ``column``."""
    last = -1
    for i, row in enumerate(rows):
        fields = row.asDict()
        destination = fields.get("destination") or default
        if not destination:
            raise StompmqError("option 'destination' is required (or a 'destination' column)")
        body = fields.get("body")
        if body is None:
            raise StompmqError("a 'body' column is required (binary or string)")
        if isinstance(body, str):
            body = body.encode()
        headers = {k: str(v) for k, v in (fields.get("headers") or {}).items()}
        headers["destination"] = destination
        if fields.get("routing_key") is not None:
            headers["routing-key"] = str(fields["routing_key"])
        headers["receipt"] = str(i)
        if producer is not None:
            if column is None:
                if i >= SEQ_PER_BATCH:
                    raise StompmqError(f"a task writes at most {SEQ_PER_BATCH} numbered rows (per micro-batch)")
                seq = producer[1] + i
            else:
                seq = _sequence(fields.get(column), column, last)
                last = seq
            headers["x-producer-id"], headers["x-producer-seq"] = producer[0], str(seq)
        yield encode_frame(Frame("SEND", headers, bytes(body)), "1.2")


def _sequence(value: Any, column: str, last: int) -> int:
    """A row's number from the ``sequenceColumn``: a whole number above the partition's last
    (the broker would drop a lower one as a repeat, silently)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 10**18:
        raise StompmqError(f"option 'sequenceColumn': column {column!r} must hold whole numbers from 0 to 10**18 - 1,"
                           f" not {value!r}")
    if value <= last:
        raise StompmqError(f"option 'sequenceColumn': {column!r} must rise within each partition ({value} after "
                           f"{last}); sort the rows (sortWithinPartitions) before the write")
    return value


class StompmqWriter(DataSourceWriter):
    """``df.write``: each row is a SEND; a task is done once the broker stored all of them.  With
    ``producerId`` each task is the idempotent producer ``PRODUCERID/PARTITION`` (its rows numbered
    by index, or by ``sequenceColumn``): the same write again adds nothing (docs/decisions/
    batch-write-idempotency.md)."""

    def __init__(self, opts: Options, options: Mapping[str, str]) -> None:
        self.opts = opts
        self.destination = options.get("destination")
        self.producer_id = options.get("producerId")
        self.column = options.get("sequenceColumn")
        if self.column is not None and self.producer_id is None:
            raise StompmqError("option 'sequenceColumn' needs 'producerId'")
        if self.producer_id is not None and not 0 < len(self.producer_id) <= PRODUCER_ID_CHARS:
            raise StompmqError(f"option 'producerId' must be 1 to {PRODUCER_ID_CHARS} characters")

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        if self.producer_id is None:
            return self.send(iterator)
        context = TaskContext.get()
        if context is None:
            raise StompmqError("option 'producerId' needs a Spark task (its partition id)")
        return self.send(iterator, (f"{self.producer_id}/{context.partitionId()}", 0))

    def send(self, iterator: Iterator[Any], producer: tuple[str, int] | None = None) -> WriterCommitMessage:
        with self.opts.connect() as conn:
            return Sent(conn.send_all(_frames(iterator, self.destination, producer, self.column)))


class StompmqStreamWriter(DataSourceStreamWriter):
    """``df.writeStream``: exactly once, each task an idempotent producer (see the module doc)."""

    def __init__(self, opts: Options, options: Mapping[str, str]) -> None:
        for name in ("producerId", "sequenceColumn"):
            if name in options:
                raise StompmqError(f"option {name!r} applies to batch writes (df.write) only: a streaming write is"
                                   " exactly once by itself")
        self.writer = StompmqWriter(opts, options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = TaskContext.get()
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if context is None or query is None or batch is None:
            raise StompmqError("the stompmq sink runs in micro-batch streaming queries only (no query or batch id)")
        return self.writer.send(iterator, (f"{query}/{context.partitionId()}", int(batch) * SEQ_PER_BATCH))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # every row is stored once its task returned

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # rows already sent stay; a retry's repeats are dropped by the broker


class StompmqDataSource(DataSource):
    """``format("stompmq")``: options url, login, passcode, destination | exchange, ..."""

    @classmethod
    def name(cls) -> str:
        return "stompmq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _planned(lambda: StompmqBatchReader(_options(self.options, reading=True), self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _planned(lambda: StompmqStreamReader(_options(self.options, reading=True), self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return _planned(lambda: StompmqWriter(_options(self.options, reading=False), self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return _planned(lambda: StompmqStreamWriter(_options(self.options, reading=False), self.options))
