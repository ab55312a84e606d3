"""The STOMP frame value type.

A ``Frame`` is a NamedTuple rather than a frozen dataclass because the parser
creates one per frame on the hot path and tuple construction is the cheapest
immutable object CPython offers.  Do not subclass it.  ``headers`` keeps the
first occurrence of each header name (STOMP 1.2: the first one wins) in wire
order; treat it as read-only.
"""

from __future__ import annotations

from typing import NamedTuple


class Frame(NamedTuple):
    command: str
    headers: dict[str, str]
    body: bytes = b""
