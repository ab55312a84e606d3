"""The spans' shortcut sampling decision (server/otel.py ``decider``) is what the SDK's own
samplers decide, for every standard sampler, over many trace ids and both parent flags."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("opentelemetry.sdk")  # the otel extra

from opentelemetry.sdk.trace.sampling import (  # noqa: E402
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

from stompmq.server.otel import decider  # noqa: E402

SAMPLERS = [ALWAYS_ON, ALWAYS_OFF, TraceIdRatioBased(0.01), TraceIdRatioBased(0.5), TraceIdRatioBased(1.0),
            ParentBased(ALWAYS_ON), ParentBased(TraceIdRatioBased(0.25)),
            ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON),
            ParentBased(ALWAYS_ON, remote_parent_sampled=TraceIdRatioBased(0.1))]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: s.get_description())
def test_the_shortcut_decides_as_the_sampler(sampler: Sampler) -> None:
    decide = decider(sampler)
    assert decide is not None
    rng = random.Random(46)
    propagator = TraceContextTextMapPropagator()
    for _ in range(400):
        trace_id, flag = rng.getrandbits(128) | 1, rng.getrandbits(1)
        header = f"00-{trace_id:032x}-{rng.getrandbits(64) | 1:016x}-0{flag}"
        context = propagator.extract({"traceparent": header})
        expected = sampler.should_sample(context, trace_id, "message").decision is Decision.RECORD_AND_SAMPLE
        assert decide(header) == expected, header


def test_another_sampler_is_asked() -> None:
    class Custom(StaticSampler):
        pass

    assert decider(Custom(Decision.DROP)) is None
