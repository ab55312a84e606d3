"""What a page read may leave out: a necessary condition of a queue's selectors on stored headers.

Why: a queue whose subscribers all have selectors read its whole backlog into the broker to find
the few messages they match, one row at a time (36 us a row on SQLite, headers decoded, a
``StoredMessage`` made, the selector run, the message sifted out).  A store can test a header
inside its scan for a fraction of that (docs/decisions/selector-prefilter.md).

A ``HeaderFilter`` is a disjunction of terms, each a conjunction of ``HeaderMatch``: a row that
matches no term matches no subscriber's selector.  It is only a necessary condition, built from
the parts of the selectors that say so exactly (``broker/selectors.py``, ``Selector.prefilter``):
what a read returns is still sifted by the selectors themselves (``broker/sift.py``), so a store
may apply it, or ignore it, wholly.  A row with an expiry is always returned: the expiry sweep
must know which expiring rows are not in memory, and only a row the broker saw tells it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """The stored header ``name`` is one of ``values`` (None: the header is present)."""

    name: str
    values: frozenset[str] | None


#: A conjunction of header matches.
Term = tuple[HeaderMatch, ...]
#: A disjunction of terms: a row matching none of them may be left out of a page.
HeaderFilter = tuple[Term, ...]
