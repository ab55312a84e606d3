"""Every protocol test runs twice: with the native fast path (``_frames.c``) and in pure Python.

The parser picks its implementation per instance (``FrameParser(native=...)``); the fixture
changes that default, so every ``FrameParser()`` a test builds uses the one under test.
"""

from __future__ import annotations

import pytest

from stompmq.protocol import FrameParser


@pytest.fixture(autouse=True, params=[True, False], ids=["native", "python"])
def native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    defaults = FrameParser.__init__.__kwdefaults__
    assert defaults is not None
    monkeypatch.setitem(defaults, "native", request.param)
    return bool(request.param)
