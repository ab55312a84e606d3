"""A selector's prefilter (storage/header_filter.py) is a necessary condition: every message the
selector matches satisfies it, so a store that leaves out what it rejects loses nobody's message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.broker.selectors import compile_selector
from stompmq.storage.base import StoredMessage
from stompmq.storage.header_filter import HeaderFilter, HeaderMatch

from .fakes import passes
from .test_selectors import GROUPS, MESSAGE


@pytest.mark.parametrize("selector", [s for vs in GROUPS.values() for s, _ in vs])
def test_every_vector_that_matches_satisfies_its_prefilter(selector: str) -> None:
    compiled = compile_selector(selector)
    assert compiled is not None
    if compiled.prefilter is not None and compiled.matches(MESSAGE):
        assert passes(compiled.prefilter, MESSAGE.headers)


def one(name: str, *values: str) -> HeaderFilter:
    return ((HeaderMatch(name, frozenset(values) if values else None),),)


@pytest.mark.parametrize(("selector", "prefilter"), [
    ("kind = 'hit'", one("kind", "hit")),
    ("kind IN ('a', 'b')", one("kind", "a", "b")),
    ("kind IS NOT NULL", one("kind")),
    ('"x-tenant" = \'acme\'', one("x-tenant", "acme")),
    ("JMSType = 'order'", one("type", "order")),
    ("kind = 'hit' AND price > 5", one("kind", "hit")),
    ("(kind = 'hit')", one("kind", "hit")),
    ("kind = 'a' AND region = 'eu'", ((HeaderMatch("kind", frozenset({"a"})), HeaderMatch("region", frozenset({"eu"}))),)),
    ("kind = 'a' OR region IS NOT NULL", (*one("kind", "a"), *one("region"))),
    ("(kind = 'a' OR kind = 'b') AND region = 'eu'", one("region", "eu")),
    ("kind = 'a' OR price > 5", None),  # a side says nothing of the headers
    ("NOT kind = 'a'", None),
    ("kind NOT IN ('a')", None),
    ("kind <> 'a'", None),
    ("kind IS NULL", None),
    ("kind LIKE 'a%'", None),
    ("price = 5", None),  # a number: '5.0' matches too
    ("kind = TRUE", None),
    ("kind", None),
    ("JMSPriority = 4", None),
    ('"we""ird" = \'a\'', None),  # a name with a quote: no plain JSON path
    ("kind = 'a\0b'", None),  # SQLite's json_extract ends a text at a NUL
])
def test_the_prefilter_of_each_shape(selector: str, prefilter: HeaderFilter | None) -> None:
    compiled = compile_selector(selector)
    assert compiled is not None
    assert compiled.prefilter == prefilter


NAMES = ["a", "b"]
VALUES = ["x", "y", "5", "true"]
leaf = st.one_of(
    st.builds(lambda n, v: f"{n} = '{v}'", st.sampled_from(NAMES), st.sampled_from(VALUES)),
    st.builds(lambda n, v: f"{n} <> '{v}'", st.sampled_from(NAMES), st.sampled_from(VALUES)),
    st.builds(lambda n, vs: f"{n} IN ({', '.join(repr(v) for v in vs)})", st.sampled_from(NAMES),
              st.lists(st.sampled_from(VALUES), min_size=1, max_size=3)),
    st.builds(lambda n: f"{n} IS NOT NULL", st.sampled_from(NAMES)),
    st.builds(lambda n: f"{n} IS NULL", st.sampled_from(NAMES)),
    st.builds(lambda n: f"{n} > 3", st.sampled_from(NAMES)),
    st.builds(lambda n: f"{n} = TRUE", st.sampled_from(NAMES)),
)
selectors = st.recursive(leaf, lambda inner: st.one_of(
    st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
    st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
    st.builds(lambda a, b, c: f"{a} AND {b} AND {c}", inner, inner, inner),
    st.builds(lambda a: f"NOT ({a})", inner),
), max_leaves=8)
headers = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES))


@settings(max_examples=300, deadline=None)
@given(selectors, st.lists(headers, min_size=1, max_size=8))
def test_a_prefilter_never_leaves_out_a_message_its_selector_matches(selector: str,
                                                                   messages: list[dict[str, str]]) -> None:
    compiled = compile_selector(selector)
    assert compiled is not None
    for i, hdrs in enumerate(messages):
        msg = StoredMessage(i + 1, "q", 4, hdrs, b"", 0)
        if compiled.prefilter is not None and compiled.matches(msg):
            assert passes(compiled.prefilter, hdrs), (selector, hdrs)
