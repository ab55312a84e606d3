"""``/metrics`` has series for the queues holding messages after a restart, dead-letter queues
always among them, up to ``--metrics-top-queues`` (and the dead-letter queues besides)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import send_all, wait_until


def ready_series(http_port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {queue: int(float(value)) for queue, value in
            re.findall(r'^stompmq_queue_ready\{queue="([^"]+)",vhost="/"\} (\S+)$', text, re.MULTILINE)}


def test_after_a_restart_every_queue_holding_messages_has_series_and_dead_letters_always(tmp_path: Path) -> None:
    store = make_store_factory("sqlite", tmp_path)
    http_port = free_port()
    settings = ServerSettings(port=0, http_port=http_port, metrics_top_queues=4)
    with BrokerThread(store, settings=settings).start() as broker:
        with Client(broker.port) as c:
            c.request("SEND", {"destination": "/control/declare/queue/short", "message-ttl": "50",
                               "dead-letter": "true"})
            c.send_to("/queue/short", "dies")
        for i in range(6):
            send_all(broker.port, f"/queue/backlog{i}", ["m"] * (i + 1))
        wait_until(lambda: ready_series(http_port).get("DLQ.short") == 1, "dead-lettered", timeout=20)
    with BrokerThread(store, settings=settings).start():
        series = ready_series(http_port)
    # the four holding most, touched since start or not, and the dead-letter queue besides
    assert series == {"backlog5": 6, "backlog4": 5, "backlog3": 4, "backlog2": 3, "DLQ.short": 1}
