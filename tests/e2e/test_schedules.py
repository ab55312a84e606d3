"""Scheduled messages against real brokers: the timing over a socket, kill -9 of a broker
subprocess mid-schedule, and the API and ``stompmq admin`` listing and cancelling them.

Every wait has a deadline; the only waits that must pass without a frame are the checks that a
finished or cancelled schedule sends nothing more.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.cli import main
from stompmq.server import ServerSettings

from ..support.broker_process import BrokerProcess, Peer, free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import STORES, make_store_factory
from ..support.waiting import wait_until

SCHEDULE = {"AMQ_SCHEDULED_DELAY": "1000", "AMQ_SCHEDULED_PERIOD": "500", "AMQ_SCHEDULED_REPEAT": "3"}


def delayed_rows(db: Path) -> list[str]:
    """The headers of the delayed rows on disk, read with an outside connection."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        return [row[0] for row in conn.execute("SELECT headers FROM delayed_messages")]
    finally:
        conn.close()


@pytest.mark.parametrize("store_kind", STORES)
def test_delay_period_repeat_gives_four_deliveries_the_first_after_a_second(store_kind: str, tmp_path: Path) -> None:
    with BrokerThread(make_store_factory(store_kind, tmp_path)).start() as broker, \
            Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe("/queue/sched", ack="auto")
        consumer.sync()
        sent = time.monotonic()
        producer.send_to("/queue/sched", "tick", headers=SCHEDULE)
        arrived = []
        for _ in range(4):
            msg = consumer.message(timeout=10)
            arrived.append(time.monotonic() - sent)
            assert msg.body == b"tick" and "AMQ_SCHEDULED_REPEAT" not in msg.headers and msg.headers["scheduledJobId"]
        assert arrived[0] >= 1.0
        assert all(b - a >= 0.45 for a, b in zip(arrived, arrived[1:], strict=False)), arrived
        consumer.expect_nothing(0.8)


def test_a_schedule_survives_kill_9_and_keeps_firing(tmp_path: Path) -> None:
    """Six copies a second apart; the broker is killed after the second one is acked.  The
    schedule's row is on disk from the RECEIPT and after the kill; the restarted broker sends the
    remaining copies, and every copy is a distinct message: six in all, then nothing."""
    db = tmp_path / "broker.db"
    schedule = {"AMQ_SCHEDULED_DELAY": "300", "AMQ_SCHEDULED_PERIOD": "1000", "AMQ_SCHEDULED_REPEAT": "5"}
    seen: set[str] = set()
    with BrokerProcess(db).start() as first:
        with Peer(first.port) as producer:
            producer.send_to("/queue/tick", "tick", headers=schedule)
        assert len(delayed_rows(db)) == 1  # stored before the RECEIPT
        consumer = Peer(first.port)
        consumer.subscribe("/queue/tick", ack="client-individual")
        while len(seen) < 2:
            msg = consumer.message(timeout=10)
            seen.add(msg.headers["message-id"])
            consumer.ack(msg)  # with a receipt: the delete is committed
        first.kill9()
        consumer.abort_connection()
    (row,) = delayed_rows(db)
    assert '"x-schedule-left"' in row
    with BrokerProcess(db).start() as second, Peer(second.port) as consumer:
        consumer.subscribe("/queue/tick", ack="client-individual")
        while len(seen) < 6:
            msg = consumer.message(timeout=10)
            seen.add(msg.headers["message-id"])
            consumer.ack(msg)
        assert consumer.no_frame(1.5)
        wait_until(lambda: delayed_rows(db) == [], "the schedule's last row gone")
    assert len(seen) == 6


def test_schedules_listed_and_cancelled_through_the_api_and_the_cli(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    http_port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=http_port))
    url = f"http://127.0.0.1:{http_port}"

    def admin(*args: str) -> tuple[int, str, str]:
        code = main(["admin", "--url", url, *args])
        out, err = capsys.readouterr()
        return code, out, err

    with Client(broker.port) as producer:
        producer.send_to("/queue/reports", "r", headers={"AMQ_SCHEDULED_CRON": "0 6 * * 1-5"})
        producer.send_to("/queue/ticks", "t", headers={"AMQ_SCHEDULED_DELAY": "600000",
                                                       "AMQ_SCHEDULED_PERIOD": "1000", "AMQ_SCHEDULED_REPEAT": "4"})
        code, out, _ = admin("--json", "list-schedules")
        assert code == 0
        rows = json.loads(out)
        by_queue = {row["queue"]: row for row in rows}
        assert by_queue["ticks"]["remaining"] == 5 and by_queue["ticks"]["period"] == 1000
        assert by_queue["reports"]["remaining"] is None and by_queue["reports"]["cron"] == "0 6 * * 1-5"
        assert by_queue["ticks"]["next_at"] - time.time() * 1000 > 590_000
        assert "T06:00:00.000" in by_queue["reports"]["next"]  # the broker's local time, with its offset
        code, out, _ = admin("list-schedules")
        header, *lines = out.splitlines()
        assert header.split() == ["ID", "QUEUE", "NEXT", "REMAINING", "PERIOD", "CRON"] and len(lines) == 2
        code, out, _ = admin("cancel-schedule", by_queue["ticks"]["id"])
        assert code == 0 and "cancelled" in out
        assert [row["queue"] for row in json.loads(admin("--json", "list-schedules")[1])] == ["reports"]
        code, _, err = admin("cancel-schedule", by_queue["ticks"]["id"])
        assert code == 1 and "404" in err and "no schedule" in err
