"""JSON text of header dicts and options, as the SQL backends store them, at C speed.

``json.JSONEncoder.encode`` builds a new C encoder on every call and ``json.loads``
goes through two Python frames: for a message's small header dict that is most of
the cost (1.7 µs to encode, 1.0 µs to decode, against 0.6 and 0.3 here), paid once
per message that reaches the disk and once per message paged back.
The text is the same as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``.

Messages' headers go through :func:`headers_text` and :func:`headers`, which remember the
texts and dicts they made: most producers send the same few headers on every message, and a
hit costs 0.2 µs where encoding costs 0.8 and decoding 0.5 plus a dict the garbage collector
tracks (a backlog on disk pays both once per message).  A decoded dict is shared
by every message with that text, which is safe because a message's headers are never mutated
(``StoredMessage``); both caches are bounded, and long texts are never kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

_decoder = json.JSONDecoder()
_scan = _decoder.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


def _c_dumps() -> Callable[[Any], str]:
    # markers=None: no cycle check (these values are trees); the rest as json.dumps has them
    default = json.JSONEncoder().default  # TypeError for what JSON cannot hold
    encode = c_make_encoder(None, default, encode_basestring, None, ":", ",", False, False, True)

    def dumps(obj: Any) -> str:
        return "".join(encode(obj, 0))

    return dumps


#: ``obj`` (dicts, lists, strings, numbers; no cycles) as compact JSON text.
dumps: Callable[[Any], str] = (
    _c_dumps() if c_make_encoder is not None else json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
)


# Distinct header texts each cache keeps before it starts over; texts longer than
# HEADERS_CACHE_TEXT are never kept, so the caches stay below about a megabyte each.
HEADERS_CACHE_MAX = 1024
HEADERS_CACHE_TEXT = 512

_texts: dict[tuple[tuple[str, str], ...], str] = {}
_dicts: dict[str, dict[str, str]] = {}


def headers_text(headers: dict[str, str]) -> str:
    """The JSON text of a message's headers (as ``dumps``), from the cache when seen before."""
    key = tuple(headers.items())
    text = _texts.get(key)
    if text is None:
        text = dumps(headers)
        _keep(_texts, key, text, text)
    return text


def headers(text: str) -> dict[str, str]:
    """The headers of JSON ``text``: a dict shared with every caller of the same text, which
    nobody may mutate."""
    value = _dicts.get(text)
    if value is None:
        value = loads(text)
        _keep(_dicts, text, value, text)
    return value


def _keep(cache: dict[Any, Any], key: Any, value: Any, text: str) -> None:
    """Remember ``value`` under ``key`` unless its ``text`` is too long; start over when full
    (dict operations: atomic under the GIL, so any thread may call this)."""
    if len(text) <= HEADERS_CACHE_TEXT:
        if len(cache) >= HEADERS_CACHE_MAX:
            cache.clear()
        cache[key] = value


def loads(text: str) -> Any:
    """The value of JSON ``text`` (ValueError if it is not exactly one JSON value)."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        return _decoder.decode(text)  # whitespace around the value, or an error with a position
    return value
