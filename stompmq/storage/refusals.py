"""A commit group the database refuses for what it carries: commit the rest, name the rows refused.

Theory of operation
-------------------
A group the database refuses for what it carries, not for an outage (``StoreRejected``: a value
SQLite's INTEGER cannot hold, a broken constraint) would fail the same way forever and stop every
client's writes behind it.  So the database thread commits the rest without the rows refused
(``commit_isolating``): it bisects the group, in the order a backend applies its rows
(``ROW_LISTS``: any prefix commits on its own), committing each half that goes through, down to
the single rows that do not (about 2 log2 n commits for one bad row in n).  The group then counts
as committed; the refused messages go to ``events.rejected`` before its ``committed`` (their SENDs
get an ERROR, nobody gets them later) and are logged once per group (``report_rejected``).  An
outage during the bisection leaves the group in doubt (part of it is on disk).
docs/decisions/refused-rows.md has the why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stompmq.storage.backend import Backend
from stompmq.storage.base import CommitInDoubt, StoredMessage, StoreEvents, StoreRejected
from stompmq.storage.groups import ROW_LISTS, GroupRows

log = logging.getLogger(__name__)


def commit_isolating(backend: Backend, rows: GroupRows) -> None:
    """On the database thread: commit ``rows``; if the database refuses some of them
    (``StoreRejected``), commit the others and list the refused ones in ``rows.rejected``.  Any
    other failure during the bisection is CommitInDoubt: the halves committed before it are on
    disk."""
    try:
        backend.commit(rows)
        return
    except StoreRejected as error:
        refused = error
    try:
        _bisect(backend, rows, [(name, row) for name in ROW_LISTS for row in getattr(rows, name)], refused)
    except Exception as error:
        raise CommitInDoubt(f"{error} (while committing a group without the rows it refused)") from error


def _bisect(backend: Backend, rows: GroupRows, items: list[tuple[str, Any]], error: StoreRejected) -> None:
    """``items`` of ``rows`` were refused together (``error``): commit each half that the
    database takes, look into each half it does not, and list the single rows it refuses."""
    if len(items) <= 1:
        rows.rejected.extend((name, row, error) for name, row in items)
        return
    half = len(items) // 2
    for chunk in (items[:half], items[half:]):
        part = GroupRows([], [], [], [], rows.last_seq, rows.held, rows.claims_epoch)
        for name, row in chunk:
            getattr(part, name).append(row)
        inserted = {row[0] for row in part.inserts}
        part.promotions = {seq: delayed for seq, delayed in rows.promotions.items() if seq in inserted}
        try:
            backend.commit(part)
        except StoreRejected as refused:
            _bisect(backend, rows, chunk, refused)
        else:
            rows.stream_states.update(part.stream_states)


def report_rejected(store: str, rows: GroupRows, ops: Mapping[int, tuple[int, StoredMessage]], size: int,
                    events: StoreEvents) -> None:
    """The rows of a committed group (``rows``, of ``size`` operations, the messages' operations
    by seq in ``ops``) that the database refused: logged once, the messages among them reported
    (``events.rejected``), before the group's ``committed``."""
    rejected = rows.rejected
    messages: list[StoredMessage] = []
    for name, row, _ in rejected:
        if name in ("inserts", "delayed") and (op := ops.get(row[0])) is not None:
            messages.append(op[1])
    error = rejected[0][2]
    log.error("store %s refused %d of the %d operations of a commit group; they are not stored, the"
              " others are (first refused: %s %s): %s", store, len(rejected), size,
              rejected[0][0], _row_shown(rejected[0][1]), error)
    if messages:
        events.rejected(messages, error)


def _row_shown(row: Any) -> str:
    """A refused row as the log names it: its seq or name and its numbers, never a body."""
    if isinstance(row, tuple):
        return repr(tuple(v for v in row if isinstance(v, int | float | str) and not isinstance(v, bool))[:6])[:200]
    return repr(row)[:200]
