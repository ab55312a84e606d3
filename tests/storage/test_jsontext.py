"""JSON text as the SQL backends store it (storage/jsontext.py): the same text as ``json.dumps``,
and message headers through bounded caches that hand every reader of a text the same dict."""

from __future__ import annotations

import json

import pytest

from stompmq.storage import jsontext

VALUES = [
    {},
    {"content-type": "text/plain"},
    {"b": "2", "a": "1"},  # order kept, not sorted
    {"ünïcode": "日本語", "quote": 'say "hi"\n', "nul": "a\x00b", "slash": "\\/"},
    {"options": {"max-length": "10", "nested": ["x", 1, 2.5, None, True]}},
]


def reference(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", VALUES)
def test_dumps_writes_what_json_dumps_writes_and_loads_reads_it_back(value: object) -> None:
    assert jsontext.dumps(value) == reference(value)
    assert jsontext.loads(reference(value)) == value


@pytest.mark.parametrize("text", ["", "{", '{"a":1} x', "[1,]", "nope"])
def test_loads_refuses_what_is_not_exactly_one_json_value(text: str) -> None:
    with pytest.raises(ValueError):
        jsontext.loads(text)


def test_loads_allows_whitespace_around_the_value() -> None:
    assert jsontext.loads(' {"a": "1"} \n') == {"a": "1"}


@pytest.mark.parametrize("headers", [v for v in VALUES if all(isinstance(x, str) for x in v.values())])
def test_header_text_is_the_json_text_on_every_call(headers: dict[str, str]) -> None:
    assert jsontext.headers_text(headers) == reference(headers)
    assert jsontext.headers_text(dict(headers)) == reference(headers)  # a second dict, from the cache


def test_headers_in_another_order_are_another_text() -> None:
    assert jsontext.headers_text({"a": "1", "b": "2"}) == '{"a":"1","b":"2"}'
    assert jsontext.headers_text({"b": "2", "a": "1"}) == '{"b":"2","a":"1"}'


def test_one_text_decodes_to_one_shared_dict_and_a_long_one_to_a_new_dict_each_time() -> None:
    text = '{"content-type":"application/json","x-kind":"job"}'
    first = jsontext.headers(text)
    assert first == {"content-type": "application/json", "x-kind": "job"}
    assert jsontext.headers(text) is first
    long_text = reference({"big": "x" * jsontext.HEADERS_CACHE_TEXT})
    assert jsontext.headers(long_text) == jsontext.headers(long_text)
    assert jsontext.headers(long_text) is not jsontext.headers(long_text)


def test_the_caches_stay_within_their_bound() -> None:
    for i in range(jsontext.HEADERS_CACHE_MAX * 2 + 7):
        headers = {"correlation-id": str(i)}
        assert jsontext.headers(jsontext.headers_text(headers)) == headers
        assert len(jsontext._texts) <= jsontext.HEADERS_CACHE_MAX
        assert len(jsontext._dicts) <= jsontext.HEADERS_CACHE_MAX
