"""``/api/cluster``: the brokers sharing a PostgreSQL database (``Store.brokers``), each with the
counters it wrote at its last lease renewal, and their totals over the live ones."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker.stats import TOTALS

if TYPE_CHECKING:
    from .management import Management


class ClusterApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def cluster(self, request: Request) -> Response:
        """Every broker on a shared store's database: lease, last renewal, claims, version and the
        counters it wrote at that renewal; ``totals`` sums those of every broker listed and of every
        broker that left the database before (stored: cumulative across restarts; a store of one
        broker has no cluster: no brokers, no totals).  Ages are on this broker's clock."""
        store = self.app.runtime.store
        now = time.time()
        listed = await store.brokers()
        leases = listed.leases
        brokers = [
            {
                "id": lease.id,
                "this": lease.id == store.node_id,
                "live": lease.live,
                "epoch": lease.epoch,
                "lease_until": _iso(lease.lease_until),
                "lease_remaining": round(lease.lease_until - now, 1),
                "last_renewal": None if lease.renewed is None else _iso(lease.renewed),
                "renewal_age": None if lease.renewed is None else round(now - lease.renewed, 1),
                "claimed": lease.claimed,
                "unacked": lease.unacked,
                "version": lease.version,
                "counters": {key: lease.counters.get(key, 0) for key in TOTALS},
            }
            for lease in leases
        ]
        departed = listed.departed
        totals = {key: departed.get(key, 0) + sum(lease.counters.get(key, 0) for lease in leases) for key in TOTALS}
        return JSONResponse({"shared": store.shared, "brokers": brokers, "totals": totals if store.shared else None})


def _iso(seconds: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time (milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"
