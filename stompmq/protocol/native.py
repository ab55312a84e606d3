"""Which frame codec runs: the native fast path (``_frames.c``) or pure Python only.

``stompmq.protocol._frames`` is an optional extension (setup.py): without a C
compiler at install time it is missing and ``parser.py`` / ``encoder.py`` do
all the work, with the same results.  Setting ``STOMPMQ_PURE_PYTHON_CODEC=1``
in the environment turns it off even when it is built, to measure the
difference or to rule it out while hunting a bug; the variable is read once,
at import.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

ENV_VAR = "STOMPMQ_PURE_PYTHON_CODEC"
"""Set to anything but "" or "0" to use the pure-Python parser and encoder only."""

BUILT: ModuleType | None
try:
    from . import _frames as BUILT
except ImportError:  # installed without a C compiler
    BUILT = None

frames: ModuleType | None = None if os.environ.get(ENV_VAR, "") not in ("", "0") else BUILT
"""The native module in use, or None when the pure-Python code runs alone."""

NATIVE = frames is not None
"""Whether the broker parses and encodes frames with the native fast path."""


def describe() -> str:
    """The codec in use, for the start-up log line: "native", or why it is pure Python."""
    if NATIVE:
        return "native"
    if BUILT is not None:
        return f"pure Python ({ENV_VAR} is set)"
    return "pure Python (stompmq.protocol._frames is not built)"
