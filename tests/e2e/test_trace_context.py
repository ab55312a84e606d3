"""W3C trace context (``traceparent``, ``tracestate``) sent on a SEND reaches every MESSAGE of it,
on a real broker over real sockets: a queue, a topic, an exchange, after a delay, a dead-letter
(NACK and expiry), a shovel to another broker, and a stream read live and from the store."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig

from ..support.broker_process import ROOT
from ..support.broker_thread import BrokerThread, restarting
from ..support.rawclient import RawFrame
from ..support.stompclient import Client, control
from ..support.waiting import wait_past

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
         "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}


def assert_traced(message: RawFrame) -> None:
    assert {name: message.headers.get(name) for name in TRACE} == TRACE, message.headers


def test_a_queue_a_topic_and_an_exchange_keep_it(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        c.subscribe("/queue/tc.q")
        c.subscribe("/topic/tc.t")
        control(c, "declare/exchange/tc.x")
        control(c, "bind/exchange/tc.x", queue="/queue/tc.xq")
        c.subscribe("/queue/tc.xq")
        for destination in ("/queue/tc.q", "/topic/tc.t", "/exchange/tc.x"):
            c.send_to(destination, "m", headers=TRACE)
        c.frame("BEGIN", {"transaction": "t"})  # a transaction's SEND waits in the session, then publishes
        c.send_to("/queue/tc.q", "in a transaction", headers={**TRACE, "transaction": "t"})
        c.request("COMMIT", {"transaction": "t"})
        for message in c.messages(4):
            assert_traced(message)


def test_a_delay_and_a_dead_letter_keep_it(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(config=BrokerConfig(dead_letter_rejected=True))
    with Client(broker.port) as c:
        c.send_to("/queue/tc.later", "late", headers={**TRACE, "delay": "150"})
        c.subscribe("/queue/tc.later", ack="client-individual")
        delayed = c.message()
        assert_traced(delayed)
        c.nack(delayed, requeue="false")
        c.subscribe("/queue/DLQ.tc.later")
        dead = c.message()
        assert dead["dead-letter-reason"].startswith("rejected with NACK")
        assert_traced(dead)
        control(c, "declare/queue/tc.old", **{"message-ttl": "50", "dead-letter": "true"})
        sent = time.time() * 1000
        c.send_to("/queue/tc.old", "old", headers=TRACE)
        wait_past(sent + 50, "its 50 ms TTL")  # it dies when the queue is next looked at
        c.subscribe("/queue/tc.old")
        c.subscribe("/queue/DLQ.tc.old")
        expired = c.message()
        assert expired["dead-letter-reason"] == "expired"
        assert_traced(expired)


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_a_stream_keeps_it_live_and_from_the_store(store_kind: str, tmp_path: Path) -> None:
    with restarting(store_kind, tmp_path) as start:
        broker = start()
        with Client(broker.port) as c:
            c.subscribe("/stream/tc.s", x_stream_offset="next")
            c.send_to("/stream/tc.s", "e", headers=TRACE)
            assert_traced(c.message())
        broker = start()  # a restart: the entry is read back from the database
        with Client(broker.port) as c:
            c.subscribe("/stream/tc.s", x_stream_offset="first")
            assert_traced(c.message())


def test_a_shovel_keeps_it(make_memory_broker: Callable[..., BrokerThread]) -> None:
    source, target = make_memory_broker(), make_memory_broker()
    with Client(source.port) as c:
        c.send_to("/queue/tc.moved", "m", headers=TRACE)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "stompmq.cli", "shovel", "--from", f"stomp://127.0.0.1:{source.port}/queue/tc.moved",
         "--to", f"stomp://127.0.0.1:{target.port}/queue/tc.moved", "--until-empty", "0.5"],
        capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with Client(target.port) as c:
        c.subscribe("/queue/tc.moved")
        assert_traced(c.message())
