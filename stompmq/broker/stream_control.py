"""What ``/control`` asks of streams: a consumer group's offset, the offset at a timestamp.

Consumer groups
---------------
A SUBSCRIBE with ``x-stream-group:NAME`` (client or client-individual acks) reads for a named
group: without ``x-stream-offset`` it starts at the group's committed offset (the subscription's
default, ``next``, when the group has none), and each ACK commits the acked entry's offset + 1
(the last ACK wins; a NACK commits nothing).  The engine keeps every stream's groups
(``Stream.groups``, recovered at open) and buffers each commit in the store
(``Store.save_stream_group``), where commits between two flushes coalesce to one row per
group: an ACK adds no write of its own.  ``/control/stream-group`` reads, sets or forgets a
group (refused while this broker has subscribers reading for it), and a stream keeps at most
``MAX_GROUPS`` groups, which bounds the memory and the lag series.  On a shared store other
brokers commit too, so a group SUBSCRIBE without an offset and ``/control/stream-group``
read the stored groups first (behind this broker's buffered commits); a listing shows the
groups as this broker last wrote or read them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Awaitable, Callable

from ..storage.base import Store, StreamState
from .errors import ClientError
from .stream_log import Stream, check_group
from .streams import Streams


class StreamControl:
    """The ``/control/stream-group`` and ``/control/stream-offsets`` answers over ``streams``."""

    def __init__(self, streams: Streams) -> None:
        self.streams = streams

    def set_group(self, name: str, headers: dict[str, str]) -> str:
        """``/control/stream-group/stream/NAME``: set the ``group``'s offset (``offset``) or forget
        it (``forget:true``), if asked; the group's name, for ``group_answer``."""
        group = headers.get("group")
        if group is None:
            raise ClientError("/control/stream-group needs a group header")
        offset, forget = headers.get("offset"), headers.get("forget") == "true"
        if offset is None and not forget:
            return group
        stream = self.streams.stream(name)
        check_group(stream, group)
        readers = sum(1 for sub in stream.subscribers if sub.group == group and sub.active)
        if readers:
            raise ClientError(f"group {group!r} of stream {name!r} has {readers} subscriber(s) on this broker;"
                              " unsubscribe them before moving its offset")
        if forget:
            stream.groups.pop(group, None)
            self.streams.store.save_stream_group(name, group, None)
            return group
        if not (offset is not None and offset.isascii() and offset.isdigit()) or len(offset) > 18:
            raise ClientError(f"offset must be a whole number >= 0, not {offset!r}")
        stream.groups[group] = int(offset)
        self.streams.store.save_stream_group(name, group, int(offset))
        return group

    def group_answer(self, name: str, group: str) -> dict[str, str]:
        """The RECEIPT of ``/control/stream-group``: the committed offset and the lag, when the
        group has one, and the stream's end."""
        stream = self.streams.streams.get(name)
        nxt = stream.next if stream is not None else 0
        answer = {"group": group, "next-offset": str(nxt)}
        committed = stream.groups.get(group) if stream is not None else None
        if committed is not None:
            answer["committed-offset"] = str(committed)
            answer["lag"] = str(max(0, nxt - committed))
        return answer

    def group_read(self, name: str, group: str) -> tuple[
        Callable[[Store], Awaitable[tuple[dict[str, int] | None, StreamState | None]]],
        Callable[[tuple[dict[str, int] | None, StreamState | None]], dict[str, str]],
    ]:
        """``/control/stream-group`` on a shared store: the stored groups and counter row, read
        behind every buffered write (this broker learns both)."""

        async def fetch(store: Store) -> tuple[dict[str, int] | None, StreamState | None]:
            return await store.stream_groups(name), await store.stream_state(name)

        def answer(read: tuple[dict[str, int] | None, StreamState | None]) -> dict[str, str]:
            groups, state = read
            self.streams.changed(name, state)
            stream = self.streams.streams.get(name)
            if stream is not None and groups is not None:
                stream.groups = groups
            return self.group_answer(name, group)

        return fetch, answer

    def offset_at(self, name: str, value: str) -> dict[str, str] | tuple[
        Callable[[Store], Awaitable[tuple[StreamState | None, int]]],
        Callable[[tuple[StreamState | None, int]], dict[str, str]],
    ]:
        """``/control/stream-offsets`` with ``timestamp: MS``: ``offsets`` and the first offset
        whose entry's timestamp is >= MS (``next-offset`` if none is that late) as
        ``timestamp-offset``; or, when the store must be read, (fetch, answer).

        Timestamps never decrease along a stream (``append``; on a shared store, the commit), so
        the offsets at or after MS are a suffix.  The marks and the tail narrow it down in memory
        (the memory store's tail is the whole stream); what is left, at most a segment unless
        other brokers appended, is a binary search of primary-key point reads behind every
        buffered append."""
        if not (value.isascii() and value.isdigit()) or len(value) > 18:
            raise ClientError(f"timestamp must be epoch milliseconds (a whole number >= 0), not {value!r}")
        ms = int(value)
        stream = self.streams.streams.get(name)
        lo, found = _narrow(stream, ms) if stream is not None else (0, None)
        shared = self.streams.shared

        def answer(read: tuple[StreamState | None, int]) -> dict[str, str]:
            state, offset = read
            if shared:
                self.streams.changed(name, state)
            now = self.streams.streams.get(name)
            if now is not None:  # (retention may have moved the first offset since)
                offset = min(max(offset, now.first), now.next)
            return {**self.streams.offsets(name), "timestamp-offset": str(offset)}

        if not shared:
            end = found if found is not None else stream.next if stream is not None else 0
            if lo >= end:
                return answer((None, end))

        async def fetch(store: Store) -> tuple[StreamState | None, int]:
            state = await store.stream_state(name) if shared else None
            low, high = lo, found
            if high is None:  # no entry in memory is that late: up to the (committed) end
                high = state.next if state is not None else stream.next if stream is not None else 0
            if state is not None:
                low = max(low, state.first)
            return state, await _search(store, name, ms, low, high)

        return fetch, answer


def _narrow(stream: Stream, ms: int) -> tuple[int, int | None]:
    """What memory tells of the first offset at or after ``ms``: it is at least the first value
    and, if the second is not None, at most it (an entry in memory that late)."""
    lo, found = stream.first, None
    for offset, timestamp, _ in stream.marks:
        if timestamp >= ms:
            found = offset
            break
        lo = max(lo, offset + 1)
    tail, first = stream.tail, stream.tail_first
    if tail and (found is None or found > first):
        i = bisect_left(tail, ms, key=lambda e: e.timestamp)
        if i == 0:
            found = first
        else:
            lo = max(lo, first + i)
            if i < len(tail):
                found = first + i
    return lo, found


async def _search(store: Store, name: str, ms: int, lo: int, hi: int) -> int:
    """The first offset in [lo, hi) whose entry is at or after ``ms``, else ``hi``: a binary
    search of point reads.  An entry read past the probe means retention removed everything
    below it (it drops from the front only)."""
    while lo < hi:
        mid = (lo + hi) // 2
        entries = await store.read_stream(name, mid, 1)
        if not entries or entries[0].offset >= hi:
            return hi
        entry = entries[0]
        if entry.offset > mid:
            lo = entry.offset
        if entry.timestamp >= ms:
            hi = entry.offset
        else:
            lo = entry.offset + 1
    return hi
