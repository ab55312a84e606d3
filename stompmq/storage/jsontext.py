"""JSON text of header dicts and options, as the SQL backends store them, at C speed.

``json.JSONEncoder.encode`` builds a new C encoder on every call and ``json.loads``
goes through two Python frames: for a message's small header dict that is most of
the cost (1.7 µs to encode, 1.0 µs to decode, against 0.6 and 0.3 here), paid once
per message that reaches the disk and once per message paged back (issue 17).
The text is the same as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``.
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


def loads(text: str) -> Any:
    """The value of JSON ``text`` (ValueError if it is not exactly one JSON value)."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        return _decoder.decode(text)  # whitespace around the value, or an error with a position
    return value
