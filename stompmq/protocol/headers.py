"""Header dicts: a frame's headers without some names (what a SEND forwards in its MESSAGE).

``headers_without`` below is the reference; the name is bound to the native one from
``_frames.c`` when that is built and not switched off (native.py), as the encoders are.
"""

from __future__ import annotations

from .native import frames as _native


def _headers_without(headers: dict[str, str], names: frozenset[str]) -> dict[str, str]:
    """A copy of ``headers`` without the keys in ``names``, the rest in their order (a frame has
    few headers, so copy and delete rather than filter)."""
    copy = headers.copy()
    for name in headers:
        if name in names:
            del copy[name]
    return copy


headers_without = _native.headers_without if _native is not None else _headers_without
