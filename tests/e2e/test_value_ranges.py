"""Every number a client gives is range-checked where it enters (docs/limits.md).

Each case sends the largest value accepted (which must be stored and answered with a RECEIPT)
and the smallest refused (which must be an ERROR for that frame, with nothing stored), on a
broker with a real SQLite file: the store is where an unchecked value did harm (a delay of 40
nines overflowed SQLite's INTEGER and stopped every client's writes).  After each
refusal a bystander's receipted SEND still gets its RECEIPT.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stompmq.broker.hashring import MAX_WEIGHT
from stompmq.broker.send_headers import MAX_COUNT, MAX_MS, MAX_REPEAT, MAX_SECONDS
from stompmq.protocol.negotiation import MAX_BEAT_MS

from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient
from ..support.stompclient import Client, control
from ..support.stores import make_store_factory

LIMITS_DOC = Path(__file__).parents[2] / "docs" / "limits.md"
SECONDS = int(MAX_SECONDS)

#: (name, frame command, destination, the header, its largest accepted value, smallest refused).
#: The destination is where the frame goes; a /control/ one is a declaration.
CASES = [
    ("priority", "SEND", "/queue/r", "priority", "9", "10"),
    ("ttl", "SEND", "/queue/r", "ttl", str(MAX_MS), str(MAX_MS + 1)),
    ("ttl-40-nines", "SEND", "/queue/r", "ttl", str(MAX_MS), "9" * 40),
    ("delay", "SEND", "/queue/r", "delay", str(MAX_MS), "9" * 40),
    ("amq-delay", "SEND", "/queue/r", "AMQ_SCHEDULED_DELAY", str(MAX_MS), str(MAX_MS + 1)),
    ("amq-period", "SEND", "/queue/r", "AMQ_SCHEDULED_PERIOD", str(MAX_MS), str(MAX_MS + 1)),
    ("amq-time", "SEND", "/queue/r", "AMQ_SCHEDULED_TIME", str(MAX_MS), str(MAX_MS + 1)),
    ("artemis-time", "SEND", "/queue/r", "_AMQ_SCHED_DELIVERY", str(MAX_MS), "9" * 40),
    ("expires", "SEND", "/queue/r", "expires", str(MAX_MS), str(2**63)),
    ("deliver-at", "SEND", "/queue/r", "deliver-at", str(MAX_MS), "9223372036854775808"),
    ("send-ack-timeout", "SEND", "/queue/r", "ack-timeout", str(SECONDS), "1e300"),
    ("message-ttl", "SEND", "/control/declare/queue/decl", "message-ttl", str(MAX_MS), str(MAX_MS + 1)),
    ("max-length", "SEND", "/control/declare/queue/decl", "max-length", str(MAX_COUNT), str(MAX_COUNT + 1)),
    ("max-length-bytes", "SEND", "/control/declare/queue/decl", "max-length-bytes", str(MAX_COUNT), "9" * 5000),
    ("stream-max-age", "SEND", "/control/declare/stream/s", "max-age", str(SECONDS), str(SECONDS + 1)),
    ("stream-max-bytes", "SEND", "/control/declare/stream/s", "max-bytes", str(MAX_COUNT), str(MAX_COUNT + 1)),
    ("subscribe-ack-timeout", "SUBSCRIBE", "/queue/s", "ack-timeout", str(SECONDS), str(SECONDS + 1)),
    ("stream-timestamp", "SUBSCRIBE", "/stream/t", "x-stream-offset", f"timestamp={SECONDS}", "timestamp=1e306"),
]
WEIGHT_CASE = ("weight", str(MAX_WEIGHT), str(MAX_WEIGHT + 1))


@pytest.fixture(scope="module")
def sqlite_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with BrokerThread(make_store_factory("sqlite", tmp_path_factory.mktemp("ranges"))).start() as thread:
        yield thread


def _frame(client: Client, command: str, destination: str, header: str, value: str, n: int) -> None:
    headers = {"destination": destination, header: value}
    if command == "SUBSCRIBE":
        headers["id"] = f"s{n}"
    client.request(command, headers, b"x")


def _bystander_receipt(broker: BrokerThread) -> None:
    with Client(broker.port) as c:
        c.send_to("/queue/bystander", "still here")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_largest_value_is_accepted_and_one_past_it_is_an_error(sqlite_broker, case) -> None:
    _, command, destination, header, largest, refused = case
    with Client(sqlite_broker.port) as c:
        _frame(c, command, destination, header, largest, 1)
    with Client(sqlite_broker.port) as c:
        headers = {"destination": destination, header: refused, "receipt": "bad"}
        if command == "SUBSCRIBE":
            headers["id"] = "bad"
        c.frame(command, headers, b"x")
        error = c.expect_error()
    assert header in error["message"] and ("from 0 to" in error["message"] or "1e306" in error["message"]), error
    assert len(error["message"]) < 300, "a refused value is quoted short"
    _bystander_receipt(sqlite_broker)


def test_a_schedules_repeat_is_checked(sqlite_broker) -> None:
    """The largest count is stored (its copies a period of 10^15 ms apart); one more is an ERROR."""
    schedule = {"AMQ_SCHEDULED_DELAY": str(MAX_MS), "AMQ_SCHEDULED_PERIOD": str(MAX_MS)}
    with Client(sqlite_broker.port) as c:
        c.send_to("/queue/r", "x", headers={**schedule, "AMQ_SCHEDULED_REPEAT": str(MAX_REPEAT)})
    with Client(sqlite_broker.port) as c:
        c.frame("SEND", {"destination": "/queue/r", **schedule, "AMQ_SCHEDULED_REPEAT": str(MAX_REPEAT + 1),
                         "receipt": "r"}, b"x")
        message = c.expect_error()["message"]
    assert "AMQ_SCHEDULED_REPEAT" in message and "from 0 to" in message
    _bystander_receipt(sqlite_broker)


def test_a_refused_send_stores_nothing(sqlite_broker) -> None:
    with Client(sqlite_broker.port) as c:
        c.frame("SEND", {"destination": "/queue/refused", "delay": "9" * 40, "receipt": "r"}, b"x")
        c.expect_error()
    with Client(sqlite_broker.port) as c:
        assert control(c, "count-msgs/queue/refused")["num-messages"] == "0"


def test_a_binding_weight_is_checked(sqlite_broker) -> None:
    _, largest, refused = WEIGHT_CASE
    with Client(sqlite_broker.port) as c:
        control(c, "declare/exchange/wx")
        control(c, "bind/exchange/wx", queue="/queue/wq", weight=largest)
    with Client(sqlite_broker.port) as c:
        c.frame("SEND", {"destination": "/control/bind/exchange/wx", "queue": "/queue/wq2", "weight": refused,
                         "receipt": "r"})
        assert "weight" in c.expect_error()["message"]
    _bystander_receipt(sqlite_broker)


@pytest.mark.parametrize("value", [f"{MAX_BEAT_MS + 1},0", "0," + "9" * 5000])
def test_a_huge_heart_beat_is_clamped(sqlite_broker, value) -> None:
    with RawClient(sqlite_broker.port) as c:
        c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "heart-beat": value})
        assert c.recv().command == "CONNECTED"
        c.frame("SEND", {"destination": "/queue/beats", "receipt": "r"}, b"x")
        assert c.recv().command == "RECEIPT"
    _bystander_receipt(sqlite_broker)


def test_a_malformed_heart_beat_is_an_error(sqlite_broker) -> None:
    with RawClient(sqlite_broker.port) as c:
        c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "heart-beat": "-1," + "9" * 5000})
        message = c.expect_error()["message"]
    assert "heart-beat" in message and len(message) < 300
    _bystander_receipt(sqlite_broker)


def test_a_content_length_of_thousands_of_digits_is_an_error(sqlite_broker) -> None:
    with RawClient(sqlite_broker.port) as c:
        c.connect()
        c.send(b"SEND\ndestination:/queue/r\ncontent-length:" + b"9" * 5000 + b"\n\nx\x00")
        assert "exceeds the limit" in c.expect_error()["message"]
    _bystander_receipt(sqlite_broker)


@pytest.mark.parametrize("value", ["9" * 5000, "99999999999999999999"])
def test_a_huge_prefetch_is_clamped_to_the_most_allowed(sqlite_broker, value) -> None:
    with Client(sqlite_broker.port) as c:
        c.subscribe("/queue/prefetch", prefetch=value)
        assert sqlite_broker.call(
            lambda: [sub.prefetch for s in sqlite_broker.broker.sessions.values() for sub in s.subscriptions.values()]
        ) == [sqlite_broker.config.max_prefetch]


def test_the_limits_page_names_every_checked_header() -> None:
    text = LIMITS_DOC.read_text()
    for header in {case[3] for case in CASES} | {"weight", "heart-beat", "content-length", "prefetch",
                                                  "AMQ_SCHEDULED_REPEAT", "AMQ_SCHEDULED_CRON"}:
        assert f"`{header}`" in text, f"docs/limits.md does not list {header}"
