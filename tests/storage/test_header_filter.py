"""A page read filtered by header (storage/header_filter.py) on a real SQLite file: it leaves out
only rows that match no term, keeps every row with an expiry, and pages on across priorities."""

from __future__ import annotations

from pathlib import Path

from stompmq.storage.groups import GroupRows, InsertRow
from stompmq.storage.header_filter import HeaderFilter, HeaderMatch
from stompmq.storage.sqlite import SQLiteBackend

from ..broker.fakes import passes

HEADERS: list[dict[str, str]] = [
    {"kind": "hit"},
    {"kind": "miss"},
    {},
    {"kind": "hit", "region": "eu"},
    {"kind": "h\u00eft \"quoted\" \\ back"},  # escaped in the JSON text, compared decoded
    {"x-tenant": "acme", "kind": "miss"},
    {"kind": "HIT"},  # strings compare exactly
    {"region": "us"},
]


def rows() -> list[InsertRow]:
    """HEADERS twice, the second round at priority 9 and with an expiry on every other row."""
    made: list[InsertRow] = []
    for round_, priority in enumerate((4, 9)):
        for i, headers in enumerate(HEADERS):
            seq = 1 + round_ * len(HEADERS) + i
            expires = 2_000_000_000_000 if round_ and i % 2 else None
            made.append((seq, "q", priority, headers, b"b", False, None, 0, 1_700_000_000_000, expires))
    return made


FILTERS: list[HeaderFilter] = [
    ((HeaderMatch("kind", frozenset({"hit"})),),),
    ((HeaderMatch("kind", frozenset({"hit", "h\u00eft \"quoted\" \\ back"})),),),
    ((HeaderMatch("kind", frozenset({"hit"})), HeaderMatch("region", frozenset({"eu"}))),),
    ((HeaderMatch("x-tenant", None),), (HeaderMatch("region", frozenset({"us"})),)),
    ((HeaderMatch("nobody", None),),),
]


def test_a_filtered_read_leaves_out_only_what_matches_no_term_and_keeps_what_expires(tmp_path: Path) -> None:
    backend = SQLiteBackend(str(tmp_path / "s.db"))
    backend.open()
    try:
        stored = rows()
        backend.commit(GroupRows([], stored, [], [], len(stored)))
        everything = [m.seq for m in backend.load_ready("q", None, 100)]
        for matching in FILTERS:
            expected = [seq for seq in everything
                        if passes(matching, stored[seq - 1][3]) or stored[seq - 1][9] is not None]
            assert [m.seq for m in backend.load_ready("q", None, 100, matching)] == expected, matching
            paged, after = [], None  # one row a page, from one priority to the next
            while page := backend.load_ready("q", after, 1, matching):
                paged += [m.seq for m in page]
                after = page[-1].order_key
            assert paged == expected, matching
            read, more = backend.read_ready("q", None, 100, frozenset({expected[0]} if expected else ()), matching)
            assert [m.seq for m in read] == expected[1:] and not more
    finally:
        backend.close()
