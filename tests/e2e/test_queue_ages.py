"""How long messages have waited, per queue: the oldest ready and the oldest unacked message's
age, in the management API and /metrics, on a real broker and every store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import wait_until
from .test_http import Api

QUEUE = "/api/queues/%2F/aged"


def ages(api: Api) -> tuple[Any, Any]:
    queue = api.get(QUEUE)
    return queue["oldest_ready_age"], queue["oldest_unacked_age"]


def scraped(api: Api) -> dict[str, float]:
    text = api.get("/metrics")
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("stompmq_queue_oldest_") and 'queue="aged"' in line}


def test_oldest_ready_and_unacked_ages(make_broker: Callable[..., BrokerThread]) -> None:
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port))
    api = Api(port)
    with Client(broker.port) as c:
        c.send_to("/queue/aged", "old and low", headers={"priority": "1"})
        assert ages(api)[1] is None
        wait_until(lambda: ages(api)[0] >= 0.3, "the ready message ages")
        # A newer message of a higher priority is the queue's head, not its oldest.
        c.send_to("/queue/aged", "new and high", headers={"priority": "9"})
        c.send_to("/queue/aged", "new and low", headers={"priority": "1"})
        assert ages(api)[0] >= 0.3
        c.subscribe("/queue/aged", ack="client-individual", prefetch="2")
        held = c.messages(2)
        assert [m.body for m in held] == [b"new and high", b"old and low"]
        ready, unacked = ages(api)
        assert unacked >= 0.3 and ready < unacked  # what is left ready is the newest
        metrics = scraped(api)
        assert metrics["stompmq_queue_oldest_unacked_age_seconds"] >= 0.3
        assert 0 <= metrics["stompmq_queue_oldest_ready_age_seconds"] < metrics[
            "stompmq_queue_oldest_unacked_age_seconds"]
        [listed] = [q for q in api.get("/api/queues")["items"] if q["name"] == "aged"]
        assert listed["oldest_unacked_age"] >= 0.3 and listed["oldest_ready_age"] < 0.3
        assert listed["oldest_age"] == max(listed["oldest_unacked_age"], listed["oldest_ready_age"])
        for message in held:
            c.ack(message)
        c.ack(c.message())
    wait_until(lambda: ages(api) == (None, None), "nothing waits")
    assert scraped(api) == {"stompmq_queue_oldest_ready_age_seconds": 0.0,
                            "stompmq_queue_oldest_unacked_age_seconds": 0.0}
