"""Stream entries reach readers only once they are committed, on a store of one broker.

A stream reader is told each entry's offset (``x-stream-offset``) and resumes after the last
one it saw.  With a write-behind store an appended entry sits in memory until its group
commits; handed to a reader before that, a ``kill -9`` could take it back, and the offset it
had would be given to the next entry appended after the restart, which that reader then
skips: a receipted entry never read.  So on a durable store of one broker a reader at the
tail waits for the commit that covers the entries it is about to get (``Stream.visible`` is
the end of what is committed), as a shared store's readers already do
(``Streams.changed``).  Entries read from the store are committed by then (a read runs
behind the writes buffered before it), so only the tail waits.

The cost is one group commit of latency for a reader that keeps up, and no more writes: a
waiting stream asks for the commit of what is buffered (``Store.sync_ticket``, as a RECEIPT
does) and waits for that one ticket, however many entries are appended meanwhile; when it
commits, the readers are fed up to the end it covered and ask again for what came after.
The memory store has nothing to lose and a shared store numbers entries in the commit, so
neither waits (``Streams.settling`` is None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..storage.base import Store

if TYPE_CHECKING:
    from .stream_log import Stream


class Settling:
    """The streams whose readers wait at the tail, each for one ticket."""

    __slots__ = ("store", "waiting")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.waiting: dict[Stream, tuple[int, int]] = {}  # stream -> (ticket, end that ticket covers)

    def wait(self, stream: Stream) -> bool:
        """True if every appended entry of ``stream`` is committed (``visible`` moves to its
        end); otherwise its commit is asked for and ``committed`` reports the stream later."""
        if stream in self.waiting:
            return False
        store = self.store
        ticket = store.sync_ticket()
        if ticket <= store.committed:
            stream.visible = stream.next
            return True
        self.waiting[stream] = (ticket, stream.next)
        return False

    def committed(self, ticket: int) -> list[Stream]:
        """Every group up to ``ticket`` is on disk: the streams whose wait it ends, with
        ``visible`` moved on."""
        if not self.waiting:
            return []
        settled = [stream for stream, (wanted, _) in self.waiting.items() if wanted <= ticket]
        for stream in settled:
            stream.visible = max(stream.visible, self.waiting.pop(stream)[1])
        return settled
