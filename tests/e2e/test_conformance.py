"""STOMP server conformance over real sockets, row by row of STOMP-CHECKLIST.md (S05, S12-S37).

Every test talks raw bytes to a real broker (``tests/support/rawclient.py`` splits
frames independently of stompmq's parser) and asserts on what the broker sent.
Pure protocol behaviour runs on the memory store; anything that involves queue
state (acks, transactions, redelivery) runs on every store through the
parametrised ``broker`` fixture.
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter

import pytest

from stompmq.protocol import Limits
from stompmq.server import ServerSettings

from ..support.rawclient import RawClient
from ..support.stompclient import BrokerError, Client
from ..support.waiting import pace, wait_sessions, wait_until

# ---------------------------------------------------------------------------- helpers


def read_raw_frame(c: Client, timeout: float = 5.0) -> bytes:
    """The raw bytes of the next frame (for bodies without NUL), heart-beat EOLs skipped."""
    deadline = time.monotonic() + timeout
    while True:
        c.buffer = c.buffer.lstrip(b"\r\n")
        end = c.buffer.find(b"\x00")
        if end >= 0:
            frame, c.buffer = c.buffer[:end], c.buffer[end + 1 :]
            return frame
        if not c._fill(deadline):
            raise EOFError("closed")


def wait_for_beats(c: Client, n: int, timeout: float = 10.0) -> None:
    """Read until ``n`` heart-beat EOLs came (nothing else may come); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    beats = 0
    while beats < n:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{beats} heart-beats in {timeout} s, expected {n}"
        c.sock.settimeout(remaining)
        try:
            chunk = c.sock.recv(4096)
        except TimeoutError:
            continue
        assert chunk, "broker closed the connection"
        assert chunk.strip(b"\r\n") == b"", f"unexpected data instead of heart-beats: {chunk!r}"
        beats += chunk.count(b"\n")


def hb_broker(make_memory_broker, **kw):
    settings = ServerSettings(port=0, heart_beat=(100, 100), heart_beat_grace=2.0, **kw)
    return make_memory_broker(settings=settings)


# ---------------------------------------------------------------------------- S01-S11 over the wire
# (the parser and encoder are covered byte by byte in tests/protocol; these check the server uses them)


def test_s01_crlf_frames_and_eols_between_frames(memory_broker):
    with RawClient(memory_broker.port) as c:
        c.send(b"\r\n\n\r\nCONNECT\r\naccept-version:1.2\r\nhost:localhost\r\n\r\n\x00\r\n\n")
        assert c.recv().command == "CONNECTED"
        c.send(b"SUBSCRIBE\r\nid:s\r\ndestination:/queue/s01\r\nreceipt:r1\r\n\r\n\x00\n\n\n")
        assert c.recv()["receipt-id"] == "r1"
        c.send(b"\r\nSEND\r\ndestination:/queue/s01\r\n\r\nbody\r\n\x00\r\n")
        msg = c.recv()
        assert (msg.command, msg.body) == ("MESSAGE", b"body\r\n")


def test_s02_commands_and_headers_case_sensitive(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s02")
        # "Destination" is not "destination": this SEND has no destination header
        c.frame("SEND", {"Destination": "/queue/s02", "receipt": "r"}, b"x")
        assert "destination" in c.expect_error()["message"]
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s02")
        c.send_to("/queue/s02", "y", headers={"X-Case": "upper", "x-case": "lower"})
        msg = c.message()
        assert (msg["X-Case"], msg["x-case"]) == ("upper", "lower")


def test_s06_header_names_and_values_not_trimmed(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s06")
        c.send(b"SEND\ndestination:/queue/s06\n padded : both sides \ntab:\tx\t\n\nx\x00")
        msg = c.message()
        assert msg[" padded "] == " both sides "
        assert msg["tab"] == "\tx\t"


def test_s11_first_repeated_header_wins(memory_broker):
    with Client(memory_broker.port) as c, Client(memory_broker.port) as producer:
        c.subscribe("/queue/s11a")
        producer.send(b"SEND\ndestination:/queue/s11a\ndestination:/queue/s11b\nk:first\nk:second\nreceipt:r\n\nx\x00")
        producer.wait_receipt("r")
        raw = read_raw_frame(c)
        assert b"\nk:first\n" in raw and b"k:second" not in raw
        assert b"\ndestination:/queue/s11a\n" in raw


# ---------------------------------------------------------------------------- S12-S15 connecting


def test_s12_stomp_frame_is_connect(memory_broker):
    with RawClient(memory_broker.port) as c:
        c.frame("STOMP", {"accept-version": "1.2", "host": "localhost"})
        reply = c.recv()
        assert reply.command == "CONNECTED"
        assert reply["version"] == "1.2"
        # the session works exactly as after CONNECT
        c.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/s12", "receipt": "r"})
        assert c.recv()["receipt-id"] == "r"
        c.frame("SEND", {"destination": "/queue/s12"}, b"x")
        assert c.recv().body == b"x"


def test_s12_stomp_frame_headers_not_unescaped(memory_broker):
    """CONNECT/STOMP headers are never unescaped: a backslash in login is taken literally."""
    broker = memory_broker
    with RawClient(broker.port) as c:
        c.send(b"STOMP\naccept-version:1.2\nhost:localhost\nlogin:a\\qb\n\n\x00")
        reply = c.recv()
        assert reply.command == "CONNECTED", reply  # \q would be a fatal escape elsewhere
        sid = reply["session"]
        assert broker.call(lambda: broker.broker.sessions[sid].login) == "a\\qb"


@pytest.mark.parametrize(
    "accept, expected",
    [
        (None, "1.0"),
        ("1.0", "1.0"),
        ("1.1", "1.1"),
        ("1.2", "1.2"),
        ("1.0,1.1", "1.1"),
        ("1.1,1.0", "1.1"),
        ("1.0,1.1,1.2", "1.2"),
        ("1.2,1.0", "1.2"),
        ("1.1,2.0", "1.1"),
        ("1.2,3.9", "1.2"),
    ],
)
def test_s13_version_negotiation(memory_broker, accept, expected):
    with RawClient(memory_broker.port) as c:
        headers = {"host": "localhost"}
        if accept is not None:
            headers["accept-version"] = accept
        c.frame("CONNECT", headers)
        reply = c.recv()
        assert reply.command == "CONNECTED"
        assert reply["version"] == expected


def test_s13_missing_accept_version_means_10_no_escaping(memory_broker):
    """A client without accept-version speaks 1.0: its headers are taken literally."""
    with Client(memory_broker.port, version=None) as c:
        assert c.connected["version"] == "1.0"
        c.frame("SUBSCRIBE", {"destination": "/queue/s13", "receipt": "r"})  # 1.0: id optional
        c.wait_receipt("r")
        c.send(b"SEND\ndestination:/queue/s13\nk:a\\qb\n\nx\x00")  # no escapes in 1.0: not an error
        msg = c.message()
        assert msg["k"] == "a\\qb"


@pytest.mark.parametrize("accept", ["2.0", "0.9,3.0", "", "1.3"])
def test_s14_no_common_version_error_then_close(memory_broker, accept):
    with RawClient(memory_broker.port) as c:
        c.frame("CONNECT", {"accept-version": accept, "host": "localhost"})
        error = c.expect_error()
        assert error.command == "ERROR"
        assert set(error["version"].split(",")) == {"1.0", "1.1", "1.2"}
        assert error["message"]
    wait_sessions(memory_broker, 0)


def test_s15_connected_has_version_and_server(memory_broker):
    with RawClient(memory_broker.port) as c:
        c.frame("CONNECT", {"accept-version": "1.1,1.2", "host": "localhost"})
        head = read_raw_frame(c)
        assert head.endswith(b"\n\n"), "CONNECTED must not carry a body (S07)"
        lines = head.decode().split("\n")
        assert lines[0] == "CONNECTED"
        headers = dict(line.split(":", 1) for line in lines[1:] if line)
        assert headers["version"] == "1.2"
        # server = name ["/" version] *(SP comment)
        assert re.fullmatch(r"[^/\s:]+(/[^\s/]+)?( .*)?", headers["server"]), headers["server"]
        assert headers["server"].split("/")[0] == "stompmq"


# ---------------------------------------------------------------------------- S16-S18 heart-beating


def test_s16_missing_heart_beat_means_none(make_memory_broker):
    broker = hb_broker(make_memory_broker)
    with Client(broker.port) as c:  # no heart-beat header
        assert c.connected["heart-beat"] == "0,0"  # as RabbitMQ and ActiveMQ answer (test_interop.py)
        assert c.raw_bytes(0.4) == b"", "server sent beats the client did not ask for"
        # and it did not expect any either: still alive well past 100 ms x grace
        c.sync()


def test_s16_zero_heart_beat_means_none(make_memory_broker):
    broker = hb_broker(make_memory_broker)
    with Client(broker.port, heart_beat="0,0") as c:
        assert c.connected["heart-beat"] == "0,0"
        assert c.raw_bytes(0.4) == b""
        c.sync()


def test_s17_server_sends_heart_beats(make_memory_broker):
    """Beats reach a real socket and the session stays usable; the negotiated intervals and the
    grace are asserted exactly, in virtual time, in tests/server/test_heart_beats.py."""
    broker = hb_broker(make_memory_broker)
    with Client(broker.port, heart_beat="0,200") as c:
        wait_for_beats(c, 3)
        c.sync()


def test_s17_data_counts_as_heart_beat(make_memory_broker):
    """While the server sends frames, it need not add EOLs (but the session stays alive)."""
    broker = hb_broker(make_memory_broker)
    with Client(broker.port, heart_beat="0,100") as c:
        c.subscribe("/queue/s17")
        for i in range(5):
            c.send_to("/queue/s17", str(i), receipt=False)
            assert c.message().body == str(i).encode()
        c.sync()


def test_s18_silent_client_closed_after_grace(make_memory_broker):
    broker = hb_broker(make_memory_broker)
    with Client(broker.port, heart_beat="100,0") as c:
        c.subscribe("/queue/s18")
        error = c.expect_error(timeout=5)
        assert "heart-beat" in error["message"]
    wait_sessions(broker, 0)


def test_s18_an_idle_client_beating_stays_and_falls_silent_after_its_beats(make_memory_broker):
    """An idle client's beats alone park its connection (server/parking.py): a frame after them is
    answered, and silence after them closes the connection as silence after a frame does."""
    broker = hb_broker(make_memory_broker)
    with Client(broker.port, heart_beat="100,0") as c:
        for _ in range(2):
            for _ in range(8):
                c.sock.sendall(b"\n")
                pace(0.05)  # a client beating every 50 ms
            c.sync()
        for _ in range(4):
            c.sock.sendall(b"\r\n")
            pace(0.05)  # the same client's beats, then silence
        error = c.expect_error(timeout=5)
        assert "heart-beat" in error["message"]
    wait_sessions(broker, 0)


# ---------------------------------------------------------------------------- S19-S23 SEND / SUBSCRIBE


def test_s19_send_without_destination(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"receipt": "r19"}, b"lost")
        error = c.expect_error()
        assert error["receipt-id"] == "r19"
        assert "destination" in error["message"]


@pytest.mark.parametrize(
    "headers",
    [
        {"destination": "/nowhere/x"},
        {"destination": "/queue/"},
        {"destination": "/queue/x", "priority": "high"},
        {"destination": "/queue/x", "ack-timeout": "soon"},
    ],
    ids=["unknown-prefix", "empty-name", "bad-priority", "bad-ack-timeout"],
)
def test_s19_unprocessable_send(memory_broker, headers):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {**headers, "receipt": "r"}, b"x")
        error = c.expect_error()
        assert error["receipt-id"] == "r"
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/x")
        c.expect_nothing()


def test_s20_s28_user_headers_passed_through(broker):
    with Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe("/queue/s20")
        producer.send_to(
            "/queue/s20",
            b"payload",
            headers={
                "x-custom": "1",
                "colon": "a:b:c",  # raw colons after the first are part of the value
                "empty": "",
                "content-type": "text/plain;charset=utf-8",
                "reply-to": "/queue/replies",
                "correlation-id": "c-42",
                "persistent": "true",
                "unicode-h\u00e9": "caf\u00e9 \u2603",
            },
        )
        raw = read_raw_frame(consumer)
        head = raw.split(b"\n\n", 1)[0].decode()
        lines = head.split("\n")
        assert lines[0] == "MESSAGE"
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(name, value)
        assert headers["destination"] == "/queue/s20"  # S28
        assert headers["x-custom"] == "1"
        assert headers["colon"] == "a\\cb\\cc"  # 1.2 escapes colons on the way out (S05)
        assert headers["empty"] == ""
        assert headers["content-type"] == "text/plain;charset=utf-8"
        assert headers["reply-to"] == "/queue/replies"
        assert headers["correlation-id"] == "c-42"
        assert headers["persistent"] == "true"
        assert headers["unicode-h\u00e9"] == "caf\u00e9 \u2603"
        assert raw.endswith(b"\n\npayload")


def test_s20_broker_headers_cannot_be_forged(memory_broker):
    with Client(memory_broker.port) as consumer, Client(memory_broker.port) as producer:
        consumer.subscribe("/queue/s20f", "real-sub", ack="client-individual")
        forged = {
            "message-id": "forged",
            "subscription": "forged",
            "ack": "forged",
            "redelivered": "true",
            "redelivery-count": "99",
            "timestamp": "1",
            "content-length": "7",
        }
        producer.send_to("/queue/s20f", b"payload", headers=forged)
        raw = read_raw_frame(consumer, 5)
        assert b"forged" not in raw and b":99\n" not in raw and b"timestamp:1\n" not in raw, raw
        assert raw.count(b"\nsubscription:") == 1 and raw.count(b"\nmessage-id:") == 1


def test_s28_message_destination_equals_send_destination(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/topic/s28*")
        c.subscribe("/queue/s28.q")
        c.send_to("/topic/s28.a.b", "t", receipt=False)
        c.send_to("/queue/s28.q", "q", receipt=False)
        got = {m.body: m["destination"] for m in c.messages(2)}
        assert got == {b"t": "/topic/s28.a.b", b"q": "/queue/s28.q"}


@pytest.mark.parametrize("version", ["1.1", "1.2"])
@pytest.mark.parametrize(
    "headers",
    [{"destination": "/queue/s21"}, {"id": "s"}, {}],
    ids=["no-id", "no-destination", "neither"],
)
def test_s21_subscribe_needs_id_and_destination(memory_broker, version, headers):
    with Client(memory_broker.port, version) as c:
        c.frame("SUBSCRIBE", {**headers, "receipt": "r21"})
        error = c.expect_error()
        assert error["receipt-id"] == "r21"


def test_s21_stomp_10_subscribe_id_optional(memory_broker):
    with Client(memory_broker.port, "1.0") as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/s21-10", "receipt": "r"})
        c.wait_receipt("r")
        c.send_to("/queue/s21-10", "x", receipt=False)
        msg = c.message()
        assert msg.body == b"x"
        assert msg["destination"] == "/queue/s21-10"
        c.frame("UNSUBSCRIBE", {"destination": "/queue/s21-10", "receipt": "u"})
        c.wait_receipt("u")
        c.send_to("/queue/s21-10", "y")
        c.expect_nothing()


def test_s22_ack_default_is_auto(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s22")
        c.send_to("/queue/s22", "one")
        msg = c.message()
        assert "ack" not in msg.headers
        c.disconnect()
    with Client(broker.port) as c:  # nothing left to redeliver: it was acked on delivery
        c.subscribe("/queue/s22")
        c.send_to("/queue/s22", "two")
        assert c.message().body == b"two"
        c.expect_nothing()


@pytest.mark.parametrize("mode", ["auto", "client", "client-individual"])
def test_s22_accepted_ack_modes(memory_broker, mode):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s22m", ack=mode)
        c.send_to("/queue/s22m", "x")
        msg = c.message()
        assert ("ack" in msg.headers) == (mode != "auto")


@pytest.mark.parametrize("mode", ["bogus", "Client", "AUTO", "", "client individual"])
def test_s22_invalid_ack_mode(memory_broker, mode):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/s22i", "ack": mode, "receipt": "r"})
        error = c.expect_error()
        assert error["receipt-id"] == "r"


def test_s23_duplicate_subscription_id(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s23a", "dup")
        c.frame("SUBSCRIBE", {"id": "dup", "destination": "/queue/s23b", "receipt": "r"})
        error = c.expect_error()
        assert error["receipt-id"] == "r"
        assert "dup" in error["message"]


def test_s23_subscription_id_reusable_after_unsubscribe(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s23c", "same")
        c.unsubscribe("same")
        c.subscribe("/queue/s23d", "same")
        c.send_to("/queue/s23c", "old")
        c.send_to("/queue/s23d", "new")
        msg = c.message()
        assert (msg.body, msg["subscription"]) == (b"new", "same")
        c.expect_nothing()


def test_s23_unsubscribe_unknown_id(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s23e", "known")
        c.frame("UNSUBSCRIBE", {"id": "unknown", "receipt": "r"})
        error = c.expect_error()
        assert error["receipt-id"] == "r"


def test_s23_unsubscribe_without_id(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("UNSUBSCRIBE", {"receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


# ---------------------------------------------------------------------------- S24-S27 ACK / NACK


def redelivered_bodies(port: int, destination: str, expected: int) -> list[tuple[bytes, str, str]]:
    """Subscribe fresh and collect (body, redelivered, redelivery-count) of ``expected`` messages."""
    with Client(port) as c:
        c.subscribe(destination, ack="client-individual")
        msgs = c.messages(expected)
        c.expect_nothing()
        for m in msgs:
            c.ack(m)
        return [(m.body, m["redelivered"], m["redelivery-count"]) for m in msgs]


def test_s24_client_ack_is_cumulative(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s24", ack="client")
        for i in range(4):
            c.send_to("/queue/s24", f"m{i}")
        msgs = c.messages(4)
        c.ack(msgs[2])  # acks m0, m1, m2
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s24", 1) == [(b"m3", "true", "1")]


def test_s24_client_ack_only_covers_its_subscription(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s24a", ack="client")
        c.subscribe("/queue/s24b", ack="client")
        c.send_to("/queue/s24a", "a0")
        a0 = c.message()
        c.send_to("/queue/s24b", "b0")
        b0 = c.message()
        c.send_to("/queue/s24a", "a1")
        a1 = c.message()
        assert (a0.body, b0.body, a1.body) == (b"a0", b"b0", b"a1")
        c.ack(a1)  # cumulative over /queue/s24a only
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s24b", 1) == [(b"b0", "true", "1")]
    assert redelivered_bodies(broker.port, "/queue/s24a", 0) == []


def test_s24_client_nack_is_cumulative(broker):
    with Client(broker.port, "1.2") as c:
        c.subscribe("/queue/s24n", ack="client", prefetch="3")
        for i in range(3):
            c.send_to("/queue/s24n", f"m{i}")
        msgs = c.messages(3)
        assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
        c.nack(msgs[1])  # m0 and m1 go back; m2 stays with us
        again = c.messages(2)  # redelivered to us: we are the only subscriber
        assert [(m.body, m["redelivered"]) for m in again] == [(b"m0", "true"), (b"m1", "true")]
        c.ack(again[1])  # cumulative: m2 (delivered earlier) and both redeliveries
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s24n", 0) == []


def test_s25_client_individual_ack_touches_one(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s25", ack="client-individual")
        for i in range(3):
            c.send_to("/queue/s25", f"m{i}")
        msgs = c.messages(3)
        c.ack(msgs[1])
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s25", 2) == [(b"m0", "true", "1"), (b"m2", "true", "1")]


def test_s25_client_individual_nack_touches_one(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s25n", ack="client-individual")
        for i in range(3):
            c.send_to("/queue/s25n", f"m{i}")
        msgs = c.messages(3)
        c.nack(msgs[2], requeue="false")  # m2 discarded, m0/m1 untouched
        c.expect_nothing()
        c.ack(msgs[0])
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s25n", 1) == [(b"m1", "true", "1")]


def test_s26_v12_ack_by_id_equal_to_message_ack_header(broker):
    with Client(broker.port, "1.2") as c:
        c.subscribe("/queue/s26", ack="client-individual")
        c.send_to("/queue/s26", "x")
        msg = c.message()
        assert msg["ack"]
        c.request("ACK", {"id": msg["ack"]})
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s26", 0) == []


def test_s26_v12_ack_ids_unique_per_delivery(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.subscribe("/queue/s26u", ack="client-individual")
        c.subscribe("/topic/s26u", ack="client")
        for _ in range(3):
            c.send_to("/queue/s26u", "q", receipt=False)
            c.send_to("/topic/s26u", "t", receipt=False)
        acks = [m["ack"] for m in c.messages(6)]
        assert len(set(acks)) == 6


def test_s26_v12_ack_by_message_id_rejected(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.subscribe("/queue/s26m", "s", ack="client-individual")
        c.send_to("/queue/s26m", "x")
        msg = c.message()
        c.frame("ACK", {"message-id": msg["message-id"], "subscription": "s", "receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


def test_s26_v11_ack_by_message_id_and_subscription(broker):
    with Client(broker.port, "1.1") as c:
        sub = c.subscribe("/queue/s26b", ack="client-individual")
        c.send_to("/queue/s26b", "x")
        c.send_to("/queue/s26b", "y")
        x, y = c.messages(2)
        assert "ack" not in x.headers  # 1.1 MESSAGE has no ack header
        assert x["subscription"] == sub
        c.request("ACK", {"message-id": x["message-id"], "subscription": sub})
        c.request("NACK", {"message-id": y["message-id"], "subscription": sub, "requeue": "false"})
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s26b", 0) == []


def test_s26_v11_ack_with_wrong_subscription_acks_the_message(memory_broker):
    """As RabbitMQ and ActiveMQ do, a 1.1 ACK naming another subscription acts on the
    message-id when it is unacked on this connection (it used to be an ERROR)."""
    with Client(memory_broker.port, "1.1") as c:
        c.subscribe("/queue/s26w", "right", ack="client-individual")
        c.subscribe("/queue/s26other", "other", ack="client-individual")
        c.send_to("/queue/s26w", "x")
        msg = c.message()
        c.request("ACK", {"message-id": msg["message-id"], "subscription": "other"})
        c.unsubscribe("right")
        c.expect_nothing()  # acked: nothing to requeue to the other subscription


def test_s26_v10_ack_by_message_id(broker):
    with Client(broker.port, "1.0") as c:
        c.subscribe("/queue/s26c", ack="client")
        c.send_to("/queue/s26c", "x")
        msg = c.message()
        assert "ack" not in msg.headers
        c.request("ACK", {"message-id": msg["message-id"]})
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s26c", 0) == []


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("mode", ["client", "client-individual"])
def test_s26_one_message_held_by_two_subscriptions_of_a_session(memory_broker, version, mode):
    """Overlapping topic subscriptions deliver one message twice with one message-id: in 1.0/1.1
    (ACK by message-id [+ subscription]) each copy must still be ackable on its own."""
    with Client(memory_broker.port, version) as c:
        c.subscribe("/topic/s26o", "exact", ack=mode)
        c.subscribe("/topic/s26o*", "prefix", ack=mode)
        c.send_to("/topic/s26o", "x")
        first, second = c.messages(2)
        assert first["message-id"] == second["message-id"]
        assert {first["subscription"], second["subscription"]} == {"exact", "prefix"}
        c.ack(second)
        c.ack(first)
        c.send_to("/topic/s26o", "y")  # both subscriptions have room again
        assert sorted(m["subscription"] for m in c.messages(2)) == ["exact", "prefix"]
        c.disconnect()  # with two copies unacked: must not upset the broker
    wait_sessions(memory_broker, 0)
    with Client(memory_broker.port) as c:
        c.sync()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_s26_close_while_two_subscriptions_hold_one_message(memory_broker, version):
    """Regression: closing such a session crashed the whole broker (KeyError in close_session)."""
    c = Client(memory_broker.port, version)
    c.subscribe("/topic/s26p", "a", ack="client-individual")
    c.subscribe("/topic/s26p", "b", ack="client-individual")
    c.send_to("/topic/s26p", "x")
    c.messages(2)
    c.close()
    wait_sessions(memory_broker, 0)
    with Client(memory_broker.port) as other:
        other.subscribe("/queue/alive")
        other.send_to("/queue/alive", "still serving")
        assert other.message().body == b"still serving"


def test_s26_v11_transactional_acks_of_shared_message_id(memory_broker):
    with Client(memory_broker.port, "1.1") as c:
        c.subscribe("/topic/s26q", "a", ack="client-individual", prefetch="1")
        c.subscribe("/topic/s26q", "b", ack="client-individual", prefetch="1")
        c.send_to("/topic/s26q", "x")
        first, second = c.messages(2)
        c.request("BEGIN", {"transaction": "t"})
        c.ack(first, transaction="t")
        c.ack(second, transaction="t")
        c.request("COMMIT", {"transaction": "t"})
        c.send_to("/topic/s26q", "y")  # prefetch 1: only delivered if both copies were acked
        assert sorted(m["subscription"] for m in c.messages(2)) == ["a", "b"]


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_s26_ack_without_id(memory_broker, command):
    with Client(memory_broker.port, "1.2") as c:
        c.subscribe("/queue/s26e", ack="client")
        c.send_to("/queue/s26e", "x")
        c.message()
        c.frame(command, {"receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


def test_s26_ack_of_auto_delivery_rejected(memory_broker):
    """An auto-acked MESSAGE has no ack id to settle: ACKing its message-id is an error."""
    with Client(memory_broker.port, "1.1") as c:
        sub = c.subscribe("/queue/s26f")
        c.send_to("/queue/s26f", "x")
        msg = c.message()
        c.frame("ACK", {"message-id": msg["message-id"], "subscription": sub, "receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


def test_s26_double_ack_rejected(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.subscribe("/queue/s26g", ack="client-individual")
        c.send_to("/queue/s26g", "x")
        msg = c.message()
        c.ack(msg)
        c.frame("ACK", {"id": msg["ack"], "receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("mode", ["auto", "client", "client-individual"])
def test_s27_message_headers(memory_broker, version, mode):
    with Client(memory_broker.port, version) as c:
        sub = c.subscribe("/queue/s27", "sub-27", ack=mode)
        before = int(time.time() * 1000)
        for i in range(3):
            c.send_to("/queue/s27", f"body-{i}", headers={"priority": "6"} if i == 1 else None)
        msgs = c.messages(3)
        after = int(time.time() * 1000)
        ids = set()
        for msg in msgs:
            assert msg.command == "MESSAGE"
            assert msg["destination"] == "/queue/s27"
            assert msg["subscription"] == sub
            ids.add(msg["message-id"])
            # sent without content-length (send_to): a text message, delivered without one as
            # ActiveMQ does (docs/decisions/text-messages.md)
            assert "content-length" not in msg.headers and msg["amq-msg-type"] == "text"
            assert msg["redelivered"] == "false"
            assert msg["redelivery-count"] == "0"
            assert before - 1000 <= int(msg["timestamp"]) <= after + 1000
            if mode != "auto" and version == "1.2":
                assert msg["ack"]
            else:
                assert "ack" not in msg.headers
        assert len(ids) == 3
        # the queue was already subscribed, so delivery order is send order
        assert [(m.body, m["priority"]) for m in msgs] == [(b"body-0", "4"), (b"body-1", "6"), (b"body-2", "4")]


def test_s27_topic_message_headers(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/topic/s27", "t", ack="client-individual")
        c.send_to("/topic/s27", "a", receipt=False)
        c.send_to("/topic/s27", "b", receipt=False)
        a, b = c.messages(2)
        for msg in (a, b):
            assert msg["destination"] == "/topic/s27"
            assert msg["subscription"] == "t"
            assert msg["ack"]
            assert "content-length" not in msg.headers  # (text: sent without one)
        assert a["message-id"] != b["message-id"]


def test_s08_s09_nul_in_body_over_the_wire(broker):
    body = b"a\x00b\x00\x00c"
    with Client(broker.port) as c:
        c.subscribe("/queue/nul")
        c.send(b"SEND\ndestination:/queue/nul\ncontent-length:%d\nreceipt:r\n\n%s\x00" % (len(body), body))
        c.wait_receipt("r")
        msg = c.message()
        assert msg.body == body
        assert msg["content-length"] == str(len(body))


def test_s10_body_bytes_untouched(broker):
    body = bytes(range(1, 256)) + "\r\n\u2603".encode()  # no NUL: no content-length sent by the client
    with Client(broker.port) as c:
        c.subscribe("/queue/bytes")
        c.send(b"SEND\ndestination:/queue/bytes\n\n" + body + b"\x00")
        assert c.message().body == body


# ---------------------------------------------------------------------------- S29-S31 transactions


@pytest.mark.parametrize("command", ["BEGIN", "COMMIT", "ABORT"])
def test_s29_transaction_header_required(memory_broker, command):
    with Client(memory_broker.port) as c:
        c.frame(command, {"receipt": "r"})
        error = c.expect_error()
        assert error["receipt-id"] == "r"
        assert "transaction" in error["message"]


def test_s29_duplicate_transaction_id(memory_broker):
    with Client(memory_broker.port) as c:
        c.request("BEGIN", {"transaction": "tx"})
        c.frame("BEGIN", {"transaction": "tx", "receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


@pytest.mark.parametrize("command", ["COMMIT", "ABORT"])
def test_s29_unknown_transaction(memory_broker, command):
    with Client(memory_broker.port) as c:
        c.frame(command, {"transaction": "never-begun", "receipt": "r"})
        assert c.expect_error()["receipt-id"] == "r"


def test_s29_send_in_unknown_transaction(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"destination": "/queue/s29", "transaction": "nope", "receipt": "r"}, b"x")
        assert c.expect_error()["receipt-id"] == "r"


def test_s29_transaction_ids_per_connection_and_reusable(memory_broker):
    port = memory_broker.port
    with Client(port) as a, Client(port) as b, Client(port) as consumer:
        consumer.subscribe("/queue/s29ids")
        in_same = {"transaction": "same"}
        a.request("BEGIN", in_same)
        b.request("BEGIN", in_same)  # another connection: no clash
        a.send_to("/queue/s29ids", "a1", headers=in_same)
        b.send_to("/queue/s29ids", "b1", headers=in_same)
        a.request("COMMIT", in_same)  # a's "same" only: b's SEND is still held
        assert consumer.message().body == b"a1"
        consumer.expect_nothing()
        a.request("BEGIN", in_same)  # finished: reusable
        a.send_to("/queue/s29ids", "a2", headers=in_same)
        a.request("ABORT", in_same)
        b.request("COMMIT", in_same)
        assert consumer.message().body == b"b1"
        consumer.expect_nothing()  # a2 went with the abort


def test_s30_send_applied_at_commit(broker):
    with Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe("/queue/s30")
        producer.request("BEGIN", {"transaction": "t"})
        producer.send_to("/queue/s30", "one", headers={"transaction": "t"})
        producer.send_to("/queue/s30", "two", headers={"transaction": "t"})
        consumer.expect_nothing()
        producer.request("COMMIT", {"transaction": "t"})
        assert [m.body for m in consumer.messages(2)] == [b"one", b"two"]
        consumer.expect_nothing()


def test_s30_send_dropped_at_abort(broker):
    with Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe("/queue/s30a")
        consumer.subscribe("/topic/s30a")
        producer.request("BEGIN", {"transaction": "t"})
        producer.send_to("/queue/s30a", "gone", headers={"transaction": "t"})
        producer.send_to("/topic/s30a", "gone", headers={"transaction": "t"})
        producer.request("ABORT", {"transaction": "t"})
        producer.send_to("/queue/s30a", "kept")
        assert consumer.message().body == b"kept"
        consumer.expect_nothing()


def test_s30_topic_send_applied_at_commit(memory_broker):
    with Client(memory_broker.port) as consumer, Client(memory_broker.port) as producer:
        consumer.subscribe("/topic/s30t")
        producer.request("BEGIN", {"transaction": "t"})
        producer.send_to("/topic/s30t", "later", headers={"transaction": "t"})
        consumer.expect_nothing()
        producer.request("COMMIT", {"transaction": "t"})
        assert consumer.message().body == b"later"


def test_s30_ack_applied_at_commit(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s30b", ack="client-individual")
        c.send_to("/queue/s30b", "x")
        c.send_to("/queue/s30b", "y")
        x, y = c.messages(2)
        c.request("BEGIN", {"transaction": "t"})
        c.ack(x, transaction="t")
        c.ack(y, transaction="t")
        c.request("COMMIT", {"transaction": "t"})
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s30b", 0) == []


def test_s30_ack_dropped_at_abort(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s30c", ack="client-individual")
        c.send_to("/queue/s30c", "x")
        x = c.message()
        c.request("BEGIN", {"transaction": "t"})
        c.ack(x, transaction="t")
        c.request("ABORT", {"transaction": "t"})
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s30c", 1) == [(b"x", "true", "1")]


def test_s30_nack_applied_at_commit(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s30d", ack="client-individual")
        c.send_to("/queue/s30d", "x")
        x = c.message()
        c.request("BEGIN", {"transaction": "t"})
        c.nack(x, transaction="t")
        c.expect_nothing()  # not requeued before COMMIT
        c.request("COMMIT", {"transaction": "t"})
        again = c.message()
        assert (again.body, again["redelivered"], again["redelivery-count"]) == (b"x", "true", "1")


def test_s30_commit_mixes_send_and_ack(broker):
    """Consume-transform-produce: the ACK and the SEND land together at COMMIT."""
    with Client(broker.port) as c, Client(broker.port) as out:
        out.subscribe("/queue/s30-out")
        c.subscribe("/queue/s30-in", ack="client-individual")
        c.send_to("/queue/s30-in", "in")
        msg = c.message()
        c.request("BEGIN", {"transaction": "t"})
        c.ack(msg, transaction="t")
        c.send_to("/queue/s30-out", "out", headers={"transaction": "t"})
        out.expect_nothing()
        c.request("COMMIT", {"transaction": "t"})
        assert out.message().body == b"out"
        c.disconnect()
    assert redelivered_bodies(broker.port, "/queue/s30-in", 0) == []


def test_s31_transaction_aborted_on_disconnect(broker):
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/s31", ack="client-individual")
        with Client(broker.port) as producer:
            producer.request("BEGIN", {"transaction": "t"})
            producer.send_to("/queue/s31", "never", headers={"transaction": "t"})
            producer.disconnect()
        with Client(broker.port) as marker:
            marker.send_to("/queue/s31", "marker")
        assert consumer.message().body == b"marker"
        consumer.expect_nothing()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_s31_transaction_aborted_on_connection_loss(broker, how):
    with Client(broker.port) as consumer:
        consumer.subscribe("/queue/s31b")
        producer = Client(broker.port)
        producer.request("BEGIN", {"transaction": "t"})
        producer.send_to("/queue/s31b", "never", headers={"transaction": "t"})
        if how == "close":
            producer.close()
        else:
            producer.abort_connection()
        wait_sessions(broker, 1)
        with Client(broker.port) as marker:
            marker.send_to("/queue/s31b", "marker")
        assert consumer.message().body == b"marker"
        consumer.expect_nothing()


def test_s31_transactional_ack_dropped_on_connection_loss(broker):
    c = Client(broker.port)
    c.subscribe("/queue/s31c", ack="client-individual")
    c.send_to("/queue/s31c", "x")
    x = c.message()
    c.request("BEGIN", {"transaction": "t"})
    c.ack(x, transaction="t")
    c.abort_connection()
    wait_sessions(broker, 0)
    assert redelivered_bodies(broker.port, "/queue/s31c", 1) == [(b"x", "true", "1")]


# ---------------------------------------------------------------------------- S32-S34 receipts and errors


def test_s32_exactly_one_receipt_per_frame(broker):
    c = Client(broker.port, receipt="connect-receipt")
    frames = []

    def step(command, headers, body=b""):
        rid = f"{command.lower()}-{len(frames)}"
        c.frame(command, {**headers, "receipt": rid}, body)
        while True:
            f = c.next()
            frames.append(f)
            assert f.command != "ERROR", f
            if f.command == "RECEIPT" and f["receipt-id"] == rid:
                return [m for m in frames if m.command == "MESSAGE"]

    step("SUBSCRIBE", {"id": "s", "destination": "/queue/s32", "ack": "client-individual"})
    step("SEND", {"destination": "/queue/s32"}, b"1")
    msgs = step("SEND", {"destination": "/queue/s32"}, b"2")
    while len(msgs) < 2:
        msgs.append(c.message())
        frames.append(msgs[-1])
    step("ACK", {"id": msgs[0]["ack"]})
    step("NACK", {"id": msgs[1]["ack"], "requeue": "false"})
    step("BEGIN", {"transaction": "t"})
    # a transactional SEND's RECEIPT comes at COMMIT, just before the COMMIT's own
    c.frame("SEND", {"destination": "/queue/s32", "transaction": "t", "receipt": f"send-{len(frames)}"}, b"3")
    step("COMMIT", {"transaction": "t"})
    step("BEGIN", {"transaction": "t2"})
    step("ABORT", {"transaction": "t2"})
    step("SEND", {"destination": "/topic/s32"}, b"4")
    step("UNSUBSCRIBE", {"id": "s"})
    c.frame("DISCONNECT", {"receipt": "bye"})
    while True:
        try:
            frames.append(c.recv())
        except EOFError:
            break
    c.close()
    receipts = Counter(f["receipt-id"] for f in frames if f.command == "RECEIPT")
    assert "connect-receipt" not in receipts, "CONNECT must not be answered with a RECEIPT"
    assert receipts["bye"] == 1
    assert len(receipts) == 13, receipts
    assert set(receipts.values()) == {1}, receipts
    order = [f["receipt-id"] for f in frames if f.command == "RECEIPT"]
    assert order == sorted(order, key=lambda r: int(r.rsplit("-", 1)[1]) if r != "bye" else 10**9)
    assert all(f.body == b"" for f in frames if f.command == "RECEIPT"), "RECEIPT must not carry a body (S07)"


def test_s32_receipt_id_escaped(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.send(b"BEGIN\ntransaction:t\nreceipt:a\\cb\\\\c\n\n\x00")
        raw = read_raw_frame(c)
        assert raw == b"RECEIPT\nreceipt-id:a\\cb\\\\c\n\n"


def test_s32_disconnect_receipt_then_close(broker):
    with Client(broker.port) as c:
        c.subscribe("/queue/s32d")
        c.frame("DISCONNECT", {"receipt": "last"})
        receipt = c.recv()
        assert (receipt.command, receipt["receipt-id"]) == ("RECEIPT", "last")
        c.assert_closed()
    wait_sessions(broker, 0)


def test_s32_durable_send_receipt_after_commit(broker):
    """A RECEIPT for a SEND to a queue means the message is stored: a fresh subscriber sees it."""
    with Client(broker.port) as c:
        for i in range(20):
            c.send_to("/queue/s32s", f"m{i}")
    with Client(broker.port) as c:
        c.subscribe("/queue/s32s")
        assert [m.body for m in c.messages(20)] == [f"m{i}".encode() for i in range(20)]


def test_s33_error_then_close_even_if_client_keeps_sending(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/s33", "receipt": "bad"})  # no id
        c.frame("SEND", {"destination": "/queue/s33"}, b"after the error")
        error = c.expect_error()
        assert error["receipt-id"] == "bad"
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s33")
        c.expect_nothing()  # nothing after the ERROR'd frame was processed


def test_s33_error_delivered_before_close_when_client_never_reads_eof(memory_broker):
    """The broker half-closes and lingers: the ERROR arrives although we keep the socket open."""
    with Client(memory_broker.port) as c:
        c.frame("FROB", {})
        error = c.recv()
        assert error.command == "ERROR"
        with pytest.raises(EOFError):
            c.recv(timeout=3)


def test_s34_error_carries_message_and_receipt_id(memory_broker):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/s34", "receipt": "rcpt-34"})
        error = c.recv()  # the ERROR replaces the RECEIPT: nothing comes before it
        assert error.command == "ERROR", error
        c.assert_closed()
        assert error["receipt-id"] == "rcpt-34"
        assert "id" in error["message"]
        assert error["content-length"] == str(len(error.body))
        assert error.body


def test_s34_protocol_error_carries_receipt_id(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.send(b"SEND\ndestination:/queue/s34\nreceipt:rcpt-esc\nbad:a\\tb\n\nx\x00")
        error = c.expect_error()
        assert error["receipt-id"] == "rcpt-esc"
        assert "escape" in error["message"]


def test_s34_error_message_is_single_line(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        # an ack mode containing an (escaped) newline ends up in the error text
        c.send(b"SUBSCRIBE\nid:s\ndestination:/queue/s34n\nack:a\\nb\nreceipt:r\n\n\x00")
        raw = read_raw_frame(c)
        head = raw.split(b"\n\n", 1)[0].decode()
        lines = head.split("\n")
        assert lines[0] == "ERROR"
        names = [line.partition(":")[0] for line in lines[1:]]
        assert "message" in names and "receipt-id" in names
        assert all(":" in line for line in lines[1:]), lines
        c.assert_closed()


# ---------------------------------------------------------------------------- S35 unknown commands, limits


@pytest.mark.parametrize("command", ["FROB", "send", "Subscribe", "CONNECTED", "MESSAGE", "RECEIPT", "ERROR"])
def test_s35_unknown_command(memory_broker, command):
    with Client(memory_broker.port) as c:
        c.frame(command, {"destination": "/queue/s35", "receipt": "r"}, b"")
        error = c.expect_error()
        assert error["receipt-id"] == "r"
        assert command in error["message"]


def limited_broker(make_memory_broker):
    limits = Limits(max_body=1024, max_header_bytes=512, max_headers=10)
    return make_memory_broker(settings=ServerSettings(port=0, limits=limits))


@pytest.mark.parametrize(
    "frame",
    [
        b"SEND\ndestination:/queue/s35\ncontent-length:1025\n\n" + b"x" * 1025 + b"\x00",
        b"SEND\ndestination:/queue/s35\ncontent-length:999999999\n\n",
        b"SEND\ndestination:/queue/s35\n\n" + b"x" * 2000 + b"\x00",
        b"SEND\ndestination:/queue/s35\nbig:" + b"h" * 600 + b"\n\n\x00",
        b"SEND\ndestination:/queue/s35\n" + b"".join(b"h%d:v\n" % i for i in range(11)) + b"\n\x00",
    ],
    ids=["body-with-length", "huge-content-length", "body-without-length", "header-block", "header-count"],
)
def test_s35_limits_exceeded(make_memory_broker, frame):
    broker = limited_broker(make_memory_broker)
    with Client(broker.port) as c:
        c.send(frame)
        error = c.expect_error()
        assert error["message"]
    with Client(broker.port) as c:  # nothing was delivered, and the broker still works
        c.subscribe("/queue/s35")
        c.send_to("/queue/s35", b"y" * 1024)  # exactly at the limit is fine
        assert c.message().body == b"y" * 1024
        c.expect_nothing()


# ---------------------------------------------------------------------------- S36 rapid connect/disconnect


def test_s36_rapid_connect_disconnect(broker):
    for i in range(200):
        with Client(broker.port, "1.2" if i % 2 else "1.1") as c:
            c.frame("DISCONNECT", {"receipt": f"d{i}"})
            assert c.recv()["receipt-id"] == f"d{i}"
            c.assert_closed()
    wait_sessions(broker, 0)
    with Client(broker.port) as c:
        c.subscribe("/queue/s36")
        c.send_to("/queue/s36", "still fine")
        assert c.message().body == b"still fine"


def test_s36_rapid_connect_drop_with_unacked(broker):
    """200 connections that subscribe, take a message unacked and vanish without DISCONNECT."""
    with Client(broker.port) as producer:
        producer.send_to("/queue/s36b", "hot potato")
    for i in range(200):
        c = Client(broker.port)
        c.subscribe("/queue/s36b", ack="client-individual")
        msg = c.message()
        assert msg.body == b"hot potato"
        assert msg["redelivery-count"] == str(i)
        if i % 2:
            c.abort_connection()
        else:
            c.close()
    with Client(broker.port) as c:
        c.subscribe("/queue/s36b", ack="client-individual")
        msg = c.message()
        assert (msg.body, msg["redelivered"], msg["redelivery-count"]) == (b"hot potato", "true", "200")


# ---------------------------------------------------------------------------- S37 CONNECT first, once


@pytest.mark.parametrize(
    "command, headers",
    [
        ("SEND", {"destination": "/queue/s37"}),
        ("SUBSCRIBE", {"id": "s", "destination": "/queue/s37"}),
        ("BEGIN", {"transaction": "t"}),
        ("DISCONNECT", {}),
        ("ACK", {"id": "1"}),
    ],
)
def test_s37_frames_before_connect_rejected(memory_broker, command, headers):
    with RawClient(memory_broker.port) as c:
        c.frame(command, {**headers, "receipt": "early"}, b"")
        c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        error = c.expect_error()
        assert error["receipt-id"] == "early"
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/s37")
        c.expect_nothing()  # the pre-CONNECT SEND was not applied
    wait_sessions(memory_broker, 0)


@pytest.mark.parametrize("second", ["CONNECT", "STOMP"])
def test_s37_second_connect_rejected(memory_broker, second):
    with Client(memory_broker.port) as c:
        c.frame(second, {"accept-version": "1.2", "host": "localhost", "receipt": "again"})
        error = c.expect_error()
        assert error["receipt-id"] == "again"
    wait_sessions(memory_broker, 0)


def test_s37_bad_credentials_rejected(make_memory_broker):
    broker = make_memory_broker(settings=ServerSettings(port=0, login="u", passcode="p"))
    with RawClient(broker.port) as c:
        c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "u", "passcode": "wrong"})
        c.frame("SEND", {"destination": "/queue/auth"}, b"x")
        error = c.expect_error()
        assert error["message"]
    with RawClient(broker.port) as c:
        c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        assert c.expect_error()["message"]

    def logged_in() -> bool:  # once the back-off after u's failed login from this address is over
        with RawClient(broker.port) as c:
            c.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "u", "passcode": "p"})
            return c.recv().command == "CONNECTED"

    wait_until(logged_in, "the back-off after a failed login")
    with Client(broker.port, login="u", passcode="p") as c:
        c.subscribe("/queue/auth")
        c.expect_nothing()


# ---------------------------------------------------------------------------- S05 escaping over the wire

ESCAPED_SEND = (
    b"SEND\ndestination:/queue/esc\nreceipt:r\n"
    b"k\\cey:v\\c1\\n2\\\\3\n"  # name "k:ey", value "v:1<LF>2\3"
    b"plain:a\\cb\\\\c\n"  # value "a:b\c": expressible in every version
    b"\nbody\x00"
)


def test_s05_v12_escapes_everything(memory_broker):
    with Client(memory_broker.port, "1.2") as consumer, Client(memory_broker.port, "1.2") as producer:
        consumer.subscribe("/queue/esc")
        producer.send(ESCAPED_SEND)
        producer.wait_receipt("r")
        raw = read_raw_frame(consumer)
        assert b"\nk\\cey:v\\c1\\n2\\\\3\n" in raw
        assert b"\nplain:a\\cb\\\\c\n" in raw


def test_s05_v11_gets_the_escapes_it_has(memory_broker):
    with Client(memory_broker.port, "1.1") as consumer, Client(memory_broker.port, "1.2") as producer:
        consumer.subscribe("/queue/esc")
        producer.send(ESCAPED_SEND)
        producer.wait_receipt("r")
        raw = read_raw_frame(consumer)
        assert b"\nk\\cey:v\\c1\\n2\\\\3\n" in raw
        assert b"\nplain:a\\cb\\\\c\n" in raw


ESCAPES = {"cr": (b"\\r", "\r"), "newline": (b"\\n", "\n"), "colon": (b"\\c", ":"), "backslash": (b"\\\\", "\\")}
"""STOMP 1.2's escapes: what a SEND writes, and the character it stands for."""

CARRIED = {"1.2": {"cr", "newline", "colon", "backslash"}, "1.1": {"newline", "colon", "backslash"},
           "1.0": {"colon", "backslash"}}
"""Which escaped characters a subscriber of each version receives (docs/security.md): the
header with one it cannot carry is left out of its MESSAGE, never altered."""


@pytest.mark.parametrize("version", ["1.2", "1.1", "1.0"])
@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_s05_every_v12_escape_is_accepted_and_delivered(memory_broker, name: str, version: str):
    """A legal 1.2 header value (here with each escape, at its end as
    stomp.py's own test has it) is accepted; 1.2 subscribers get it intact, older ones
    get it intact or not at all, and every other header and the body in any case."""
    wire, char = ESCAPES[name]
    with Client(memory_broker.port, version) as consumer, Client(memory_broker.port, "1.2") as producer:
        consumer.subscribe("/queue/esc")
        producer.send(b"SEND\ndestination:/queue/esc\nreceipt:r\nspecial:test with " + wire +
                      b"\nplain:ok\n\nbody\x00")
        producer.wait_receipt("r")
        raw = read_raw_frame(consumer)
        assert raw.startswith(b"MESSAGE\n") and b"\nplain:ok\n" in raw and raw.endswith(b"\n\nbody")
        if name not in CARRIED[version]:
            assert b"special" not in raw
        else:  # 1.1 and 1.2 escape it again, 1.0 sends the character itself
            assert b"\nspecial:test with " + (char.encode() if version == "1.0" else wire) + b"\n" in raw


@pytest.mark.parametrize("version", ["1.2", "1.1", "1.0"])
def test_s05_a_send_with_a_raw_cr_in_a_header_is_refused(memory_broker, version: str):
    """A raw CR inside a header line is not legal 1.2 (only ``\\r`` is) and 1.0/1.1 receivers
    misread it: such a SEND is an ERROR naming the header, never stored."""
    with Client(memory_broker.port, "1.1") as consumer, Client(memory_broker.port, version) as producer:
        consumer.subscribe("/queue/esc")
        producer.send(b"SEND\ndestination:/queue/esc\nreceipt:r\nk:a\rb\n\nbody\x00")
        error = producer.expect_error()
        assert "raw carriage return" in error["message"] and error["receipt-id"] == "r"
        assert consumer.no_frame()


def test_s05_v10_gets_no_escapes(memory_broker):
    with Client(memory_broker.port, "1.0") as consumer, Client(memory_broker.port, "1.2") as producer:
        consumer.subscribe("/queue/esc")
        producer.send(b"SEND\ndestination:/queue/esc\nreceipt:r\nplain:a\\cb\\\\c\n\nbody\x00")
        producer.wait_receipt("r")
        raw = read_raw_frame(consumer)
        assert b"\nplain:a:b\\c\n" in raw  # raw colon and backslash: 1.0 has no escaping


def test_s05_v10_headers_taken_literally_and_escaped_for_v12(memory_broker):
    with Client(memory_broker.port, "1.2") as consumer, Client(memory_broker.port, "1.0") as producer:
        consumer.subscribe("/queue/esc10")
        producer.send(b"SEND\ndestination:/queue/esc10\nreceipt:r\nk:a\\nb:c\n\nbody\x00")
        producer.wait_receipt("r")
        raw = read_raw_frame(consumer)
        assert b"\nk:a\\\\nb\\cc\n" in raw


def test_s05_header_unencodable_for_v10_does_not_break_anyone(memory_broker):
    """A 1.2 producer sends a header with a newline; a 1.0 subscriber cannot be sent it unescaped.

    The producer must not be disconnected, the message must still reach the
    1.0 subscriber (without the header it cannot express) and the 1.2 one.
    """
    with (
        Client(memory_broker.port, "1.0") as old,
        Client(memory_broker.port, "1.2") as new,
        Client(memory_broker.port, "1.2") as producer,
    ):
        old.subscribe("/topic/esc-nl")
        new.subscribe("/topic/esc-nl")
        old.subscribe("/queue/esc-nl")
        producer.send(b"SEND\ndestination:/topic/esc-nl\nreceipt:r1\nnl:a\\nb\nok:1\n\ntopic\x00")
        producer.wait_receipt("r1")
        producer.send(b"SEND\ndestination:/queue/esc-nl\nreceipt:r2\nnl:a\\nb\nok:2\n\nqueue\x00")
        producer.wait_receipt("r2")
        got_new = new.message()
        assert got_new["nl"] == "a\\nb" and got_new.body == b"topic"
        got_old = sorted(old.messages(2), key=lambda m: m.body)
        assert [(m.body, m["ok"]) for m in got_old] == [(b"queue", "2"), (b"topic", "1")]
        for m in got_old:
            assert "\n" not in m.headers.get("nl", "")
        producer.sync()


def test_s05_subscription_and_destination_escaped(memory_broker):
    with Client(memory_broker.port, "1.2") as c:
        c.send(b"SUBSCRIBE\nid:s\\c1\ndestination:/queue/a\\cb\nreceipt:r\n\n\x00")
        c.wait_receipt("r")
        c.send(b"SEND\ndestination:/queue/a\\cb\n\nx\x00")
        raw = read_raw_frame(c)
        assert b"\nsubscription:s\\c1\n" in raw
        assert b"\ndestination:/queue/a\\cb\n" in raw


# ---------------------------------------------------------------------------- misc: robustness of the helpers


def test_client_helper_reports_errors(memory_broker):
    """Sanity check of the test helper itself: an ERROR while waiting fails loudly."""
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/x", "receipt": "r"})
        with pytest.raises(BrokerError):
            c.wait_receipt("r")


def test_s36_reset_and_bare_connections_cleaned_up(memory_broker):
    """A session whose socket is reset, and a TCP connection closed before CONNECT, leave nothing."""
    c = Client(memory_broker.port)
    c.subscribe("/queue/s36r", ack="client-individual")
    c.abort_connection()
    s = socket.create_connection(("127.0.0.1", memory_broker.port))
    s.close()
    wait_sessions(memory_broker, 0)
    assert memory_broker.call(lambda: "s36r" in memory_broker.broker.queues and
                              bool(memory_broker.broker.queues["s36r"].subs)) is False
