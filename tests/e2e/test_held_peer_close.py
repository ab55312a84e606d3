"""A reader held by an alarm still notices its peer closing, end to end (server/connection.py).

While a resource alarm holds a producer at its SEND, its reader does not read its socket, so
the EOF of a client that gave up waiting sat unread: the session stayed, and with it its open
transaction and its unacked messages (which an alarm on memory may be waiting for).  Now the
held reader looks at its socket every ``PEER_CHECK_SECONDS``: the session closes, its unacked
message goes to another consumer (redelivered), its transaction is dropped.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import wait_until
from .test_http import Api

from stompmq.server.settings import ServerSettings


def test_a_peer_that_closes_while_held_by_an_alarm_is_released(tmp_path: Path) -> None:
    port = free_port()
    api = Api(port)
    with BrokerThread(make_store_factory("sqlite", tmp_path), settings=ServerSettings(port=0, http_port=port)).start() \
            as broker:
        wait_until(lambda: api.call("GET", "/readyz")[0] == 200, "the API answers")
        with Client(broker.port) as producer:
            producer.send_to("/queue/held", "one")
        held = Client(broker.port)
        held.subscribe("/queue/held", "s", ack="client-individual")
        assert held.message().body == b"one"  # unacked
        held.frame("BEGIN", {"transaction": "tx"})
        held.send_to("/queue/held", "in tx", receipt=False, headers={"transaction": "tx"})
        held.sync()
        assert api.call("PUT", "/api/alarms", {"memory_high_watermark": 1000})[0] == 200
        held.send_to("/queue/held", "blocked", receipt=False)
        wait_until(lambda: [api.get(f"/api/connections/{c['id']}")["held_by"]
                            for c in api.get("/api/connections")["items"]] == ["alarm"],
                   "the producer is held by the alarm")
        held.close()  # gives up: FIN, with nothing unread after the SEND that waits
        closed_at = time.monotonic()
        wait_until(lambda: broker.call(lambda: len(broker.broker.sessions)) == 0, "the held session closed",
                   timeout=5.0)
        released_in = time.monotonic() - closed_at
        assert api.call("PUT", "/api/alarms", {"memory_high_watermark": None})[0] == 200
        with Client(broker.port) as consumer:
            consumer.subscribe("/queue/held", "c")
            again = consumer.message()
            assert again.body == b"one" and again.headers.get("redelivered") == "true"
            consumer.expect_nothing(0.3)  # neither the transaction's SEND nor the held one
        assert released_in < 3.0
