"""``CommitGroup``: one commit group in flight, as the group-commit store and its reads see it.

The store (storage/groupcommit.py) hands it to the database thread and merges it back if it
fails; its reads (storage/groupreads.py) lay its operations over what the disk shows until it
has committed.  Both import it from here, neither from the other.
"""

from __future__ import annotations

import trio

from stompmq.storage.base import StreamMessage
from stompmq.storage.groups import GroupRows, PendingOp, StructuralOp
from stompmq.storage.thread import Job


class CommitGroup:
    """One commit group handed to the database thread."""

    __slots__ = ("ticket", "submitted", "ops", "structural", "appends", "offsets", "job", "rows")

    def __init__(
        self,
        ticket: int,
        ops: dict[int, PendingOp],
        structural: list[StructuralOp],
        appends: list[StreamMessage],
        offsets: dict[tuple[str, str], int | None],
        job: Job[None],
        rows: GroupRows,
    ) -> None:
        self.ticket = ticket
        self.submitted = trio.current_time()
        self.ops = ops  # kept (with the broker's objects) to merge back if the group fails
        self.structural = structural
        self.appends = appends
        self.offsets = offsets
        self.job = job  # the database thread's reply
        self.rows = rows  # what the backend commits (and the stream states it reports)

    def __len__(self) -> int:
        return len(self.ops) + len(self.structural) + len(self.appends) + len(self.offsets)
