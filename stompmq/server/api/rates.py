"""Rates derived from samples of the engines' plain counters, and the histories they feed.

Rates are derived here, not counted in the engine: ``Rates`` samples the engine's plain
counters every ``SAMPLE_SECONDS`` and a rate is the change since the older of the last two
samples (a 5-10 s window).  Each sample also adds a point to the history the dashboard charts
(``server/history.py``, ``/api/history``).
"""

from __future__ import annotations

import time

import trio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import Broker
from ..connection import Connection
from ..history import COARSE_EVERY, HOUR_RANGE, RANGES, Counters, Point, QueueKey, RateHistory

#: Seconds between two samples of the counters the rates are computed from.
SAMPLE_SECONDS = 5.0


class Rates:
    """Messages per second from samples of the engines' counters (every vhost's), and bytes and
    frames per second of the open connections."""

    def __init__(self, engines: dict[str, Broker], connections: dict[str, Connection]) -> None:
        self.engines = engines
        self.connections = connections
        self._older: tuple[float, dict[QueueKey, Counters]] = (time.monotonic(), {})
        self._newer = self._older
        self.history = RateHistory()
        self._older_connections: dict[str, Counters] = {}
        self._newer_connections: dict[str, Counters] = {}

    def sample(self) -> None:
        counters = {
            (vhost, name): (s.published, s.delivered, s.acked)
            for vhost, engine in self.engines.items()
            for name, s in engine.queue_stats.items()
        }
        previous = self._newer
        self._older, self._newer = previous, (time.monotonic(), counters)
        self.history.record(time.time(), self._newer[0] - previous[0], previous[1], counters)
        self._older_connections, self._newer_connections = self._newer_connections, {
            conn.id: (conn.bytes_in, conn.bytes_out, conn.frames_in) for conn in self.connections.values()}

    def of_connection(self, conn: Connection) -> dict[str, float]:
        """Bytes in and out and frames in per second (since the connection opened, while it is
        younger than the samples)."""
        then = self._older[0]
        before = self._older_connections.get(conn.id)
        if before is None:
            before, then = (0, 0, 0), time.monotonic() - (time.time() - conn.since)
        elapsed = max(time.monotonic() - then, 1e-3)
        now = (conn.bytes_in, conn.bytes_out, conn.frames_in)
        keys = ("bytes_in", "bytes_out", "frames_in")
        return {k: round(max(0, n - b) / elapsed, 1) for k, n, b in zip(keys, now, before)}

    def of(self, vhost: str, name: str) -> dict[str, float]:
        engine = self.engines.get(vhost)
        stats = engine.queue_stats.get(name) if engine is not None else None
        then, counters = self._older
        before = counters.get((vhost, name), (0, 0, 0))
        now = (stats.published, stats.delivered, stats.acked) if stats is not None else (0, 0, 0)
        return _per_second(now, before, time.monotonic() - then)

    def total(self) -> dict[str, float]:
        then, counters = self._older
        before = [sum(c[i] for c in counters.values()) for i in range(3)]
        stats = [s for engine in self.engines.values() for s in engine.queue_stats.values()]
        now = (sum(s.published for s in stats), sum(s.delivered for s in stats), sum(s.acked for s in stats))
        return _per_second(now, tuple(before), time.monotonic() - then)  # type: ignore[arg-type]

    async def run(self) -> None:
        while True:
            await trio.sleep(SAMPLE_SECONDS)
            self.sample()


def _per_second(now: Counters, before: Counters, elapsed: float) -> dict[str, float]:
    elapsed = max(elapsed, 1e-3)
    keys = ("publish", "deliver", "ack")
    return {k: round(max(0, n - b) / elapsed, 1) for k, n, b in zip(keys, now, before)}


def history_range(request: Request) -> int:
    """The ``?range=`` of a history request, in seconds (one of ``RANGES``; default an hour)."""
    text = request.query_params.get("range", str(HOUR_RANGE))
    if not text.isdigit() or int(text) not in RANGES:
        raise HTTPException(400, f"range must be one of {', '.join(map(str, RANGES))} seconds, not {text!r}")
    return int(text)


def history_json(points: list[Point], coarse: bool) -> Response:
    interval = SAMPLE_SECONDS * COARSE_EVERY if coarse else SAMPLE_SECONDS
    return JSONResponse({"interval": interval, "columns": ["time", "publish", "deliver", "ack"],
                         "points": points})
