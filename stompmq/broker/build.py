"""Which engine runs: ``stompmq/broker/`` compiled by mypyc or pure Python.

setup.py compiles every module of the engine with mypyc when it is asked to
(``STOMPMQ_MYPYC=1``, docs/decisions/compiled-engine.md); otherwise, or without
mypyc or a C compiler, the same modules run as Python.  Both give the same
answers (the test suite runs against both); the compiled one spends about a
third fewer instructions per message.  The start-up log line says which one runs.
"""

from __future__ import annotations

from types import FunctionType


def _probe() -> None:
    """A function of this module: once mypyc compiled it, it is no longer a Python function."""


COMPILED = not isinstance(_probe, FunctionType)
"""Whether the engine's modules run compiled (this one is compiled with all the others)."""


def describe() -> str:
    """The engine in use, for the start-up log line."""
    if COMPILED:
        return "compiled (mypyc)"
    return "pure Python (not compiled: setup.py compiles it with STOMPMQ_MYPYC=1)"
