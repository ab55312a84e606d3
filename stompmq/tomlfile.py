"""The definitions file on disk: read (TOML, or JSON by its suffix) for the engine to check and
apply (``broker/definitions.py``), and written as TOML (the standard library reads TOML but does
not write it).

Only the shape a definitions file has is written: a table whose values are scalars
(strings, integers, floats, booleans), lists of scalars, tables written inline (a policy's
``definition``) or lists of tables, nested as arrays of tables (``[[vhosts]]`` holding
``[[vhosts.exchanges]]``).  Anything else is a ``ValueError``, so
a file this writes is one ``tomllib`` reads back to the same data.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from .broker.definitions import TOP_LEVEL, DefinitionsError

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def load_definitions(path: str) -> dict[str, Any]:
    """The definitions file at ``path`` (``.json``, else TOML) as data."""
    file = Path(path)
    try:
        text = file.read_bytes()
        data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text.decode())
    except (OSError, ValueError) as e:
        raise DefinitionsError(f"cannot read definitions file {path}: {e}") from None
    if not isinstance(data, dict):
        raise DefinitionsError(f"{path}: expected a table of lists ({', '.join(TOP_LEVEL)})")
    return data


def dumps(data: dict[str, Any]) -> str:
    """``data`` as TOML text."""
    lines: list[str] = []
    _table(data, [], lines)
    return "\n".join(lines) + "\n"


def _table(table: dict[str, Any], path: list[str], lines: list[str]) -> None:
    nested = []
    for key, value in table.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, entries in nested:
        for entry in entries:
            if lines:
                lines.append("")
            lines.append(f"[[{'.'.join(_key(k) for k in [*path, key])}]]")
            _table(entry, [*path, key], lines)


def _key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table (a policy's definition, a user's permissions)
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {value!r} in a definitions file")


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
