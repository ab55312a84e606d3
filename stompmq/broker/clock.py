"""The engine's wall time and message numbering: what every new message is stamped with.

The engine reads no clock: the runtime gives it the wall time (``Broker.advance``), which
stamps messages and decides expiry and due times.  Sequence numbers come from the store in
blocks (``Store.seq_block``: on a shared store each broker numbers from blocks of its own), so
numbering a message costs no store call but once per block.
"""

from __future__ import annotations

from ..storage.base import Store


class Clock:
    __slots__ = ("store", "wall_ms", "seq", "seq_end")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.wall_ms = 0  # wall-clock milliseconds, as the runtime said last
        self.seq = 0  # the last sequence number handed out
        self.seq_end = 0  # the end of the block ``seq`` is from

    def advance(self, wall: float) -> None:
        """The wall time is ``wall`` (epoch seconds)."""
        self.wall_ms = int(wall * 1000)

    def recovered(self, last_seq: int) -> None:
        """The store's last sequence number at start: numbering goes on after it."""
        self.seq = last_seq

    def next_seq(self) -> int:
        """The number of a new queue message (or topic message, never stored)."""
        seq = self.seq + 1
        if seq >= self.seq_end:
            seq, self.seq_end = self.store.seq_block(self.seq)
        self.seq = seq
        return seq

    def next_entry_seq(self) -> int:
        """The number of a new stream entry: the next one, without a look at the block (an entry's
        place in its stream is its offset)."""
        self.seq += 1
        return self.seq
