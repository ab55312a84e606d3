"""Whether the broker traces: OpenTelemetry spans when the ``otel`` extra is installed and
``OTEL_TRACES_EXPORTER`` names an exporter, nothing otherwise.

Off is the default and costs nothing: OpenTelemetry is not even imported, and no engine is
watched (broker/events.py: each of its few message steps then tests one field, None).  On,
``otel.Tracing`` builds its tracer provider from the standard ``OTEL_*`` variables (the
exporter, its endpoint and headers, the sampler, the batch processor, the resource) and
the runtime watches every vhost's engine with it (``Runtime``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .otel import Tracing

log = logging.getLogger(__name__)


def tracing_from_environment(environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """The tracing ``OTEL_TRACES_EXPORTER`` asks for (None: unset, ``none``, or no ``otel``
    extra, which is logged)."""
    names = [name.strip() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if not names or names == ["none"]:
        return None
    try:
        from .otel import Tracing
    except ImportError as exc:
        log.warning("OTEL_TRACES_EXPORTER is %s but OpenTelemetry is not installed (pip install "
                    "'stompmq[otel]'): no traces (%s)", ",".join(names), exc)
        return None
    return Tracing.from_environment(names, environ)
