"""The engine build under test is the one the run asked for: scripts/test runs the suite on the
pure-Python engine (the reference) and scripts/test-compiled on the mypyc one, and a compiled
module left beside its source (an in-place build) would silently turn the first into the second."""

import os

import pytest

from stompmq.broker import build


@pytest.mark.skipif("STOMPMQ_EXPECT_ENGINE" not in os.environ, reason="no build asked for (STOMPMQ_EXPECT_ENGINE)")
def test_the_engine_is_the_build_the_run_asked_for() -> None:
    expected = os.environ["STOMPMQ_EXPECT_ENGINE"]
    assert expected in ("pure", "compiled")
    assert build.COMPILED == (expected == "compiled"), build.describe()

