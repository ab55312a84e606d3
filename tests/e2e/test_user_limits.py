"""Limits against one client holding the broker's memory, through a real listening broker:
transaction frames and bytes (per login, over its connections), temporary queues per
connection, queues per vhost, connections per user, producer ids per stream; each hit is an ERROR naming its option,
counted in /metrics and logged once per (limit, login)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_process import BrokerProcess, free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import wait_until
from .test_http import Api
from .test_streams import produce


def _refused(client: Client, limit: str) -> str:
    message = client.expect_error()["message"]
    assert f"(limit {limit})" in message, message
    return message


def test_a_transaction_holds_at_most_max_transaction_frames(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_transaction_frames=3))
    with Client(broker.port) as client:
        client.frame("BEGIN", {"transaction": "t"})
        for _ in range(3):
            client.frame("SEND", {"destination": "/queue/tx", "transaction": "t"}, b"x")
        client.frame("SEND", {"destination": "/queue/tx", "transaction": "t", "receipt": "r"}, b"x")
        assert "transaction 't' holds 3 frames already" in _refused(client, "max-transaction-frames")


def test_transaction_bytes_are_counted_per_login_over_its_connections(
    make_memory_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_transaction_bytes=8192))
    with Client(broker.port) as first, Client(broker.port) as second:
        first.frame("BEGIN", {"transaction": "a"})
        first.frame("SEND", {"destination": "/queue/tx", "transaction": "a", "receipt": "held"}, b"x" * 5000)
        first.sync()
        second.frame("BEGIN", {"transaction": "b"})
        second.frame("SEND", {"destination": "/queue/tx", "transaction": "b"}, b"x" * 5000)
        _refused(second, "max-transaction-bytes")  # the same (anonymous) login holds the first's
        first.frame("COMMIT", {"transaction": "a", "receipt": "c"})
        first.wait_receipt("c")
        first.wait_receipt("held")
    with Client(broker.port) as third:  # given back at COMMIT: room again
        third.frame("BEGIN", {"transaction": "c"})
        third.frame("SEND", {"destination": "/queue/tx", "transaction": "c"}, b"x" * 5000)
        third.frame("COMMIT", {"transaction": "c", "receipt": "c"})
        third.wait_receipt("c")
    with Client(broker.port) as fourth:  # and at a connection's end with its transaction open
        fourth.frame("BEGIN", {"transaction": "d"})
        fourth.frame("SEND", {"destination": "/queue/tx", "transaction": "d"}, b"x" * 5000)
        fourth.sync()
    assert broker.broker is not None

    def held() -> object:
        assert broker.broker is not None
        return dict(broker.broker.config.held_bytes.held)

    wait_until(lambda: held() == {}, "the closed connection's transaction given back")


def test_temporary_queues_per_connection_are_limited(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_temp_queues=2))
    with Client(broker.port) as client:
        client.subscribe("/temp-queue/a", "a")
        client.subscribe("/temp-queue/b", "b")
        client.send_to("/queue/requests", "x", headers={"reply-to": "/temp-queue/a"})  # an existing one: fine
        client.frame("SUBSCRIBE", {"destination": "/temp-queue/c", "id": "c"})
        assert "this connection has 2 temporary queues already" in _refused(client, "max-temp-queues")
    with Client(broker.port) as other:  # per connection
        other.subscribe("/temp-queue/a", "a")


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_queues_per_vhost_are_limited(make_memory_broker: Callable[..., BrokerThread], command: str) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_queues=3))
    with Client(broker.port) as client:
        for i in range(3):
            client.send_to(f"/queue/q{i}", "x")
        client.send_to("/queue/q0", "again")  # a queue in use: fine
        client.subscribe("/queue/q1", "s")
        client.frame(command, {"destination": "/queue/q3", "id": "n", "receipt": "r"}, b"x")
        assert "this vhost has 3 queues in use already" in _refused(client, "max-queues")


def test_connections_per_user_are_limited(tmp_path: Path, make_memory_broker: Callable[..., BrokerThread]) -> None:
    users = Users({name: User(name, hash_password("pw"), [], {"/": Permission()}) for name in ("alice", "bob")})
    users.save(tmp_path / "users.toml")
    broker = make_memory_broker(settings=ServerSettings(port=0, users_file=str(tmp_path / "users.toml"),
                                                        max_connections_per_user=2))
    first = Client(broker.port, login="alice", passcode="pw")
    second = Client(broker.port, login="alice", passcode="pw")
    with Client(broker.port, connect=False) as third:
        third.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "alice", "passcode": "pw"})
        assert "user 'alice' has 2 connections open already" in _refused(third, "max-connections-per-user")
    with Client(broker.port, login="bob", passcode="pw"):  # another user is not affected
        pass
    first.disconnect()
    second.close()

    def alice_gets_in() -> bool:
        with Client(broker.port, connect=False) as client:
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "alice",
                                     "passcode": "pw"})
            return client.recv().command == "CONNECTED"

    wait_until(alice_gets_in, "a slot freed by alice's closed connections")


def test_hits_are_counted_in_metrics_and_logged_once(
    make_memory_broker: Callable[..., BrokerThread], caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port),
                                config=BrokerConfig(max_temp_queues=1))
    caplog.set_level(logging.WARNING, logger="stompmq.broker.limits")
    for _ in range(3):
        with Client(broker.port) as client:
            client.subscribe("/temp-queue/a", "a")
            client.frame("SUBSCRIBE", {"destination": "/temp-queue/b", "id": "b"})
            _refused(client, "max-temp-queues")
    status, text = Api(port).call("GET", "/metrics")
    assert status == 200
    assert 'stompmq_limit_refusals_total{limit="max-temp-queues"} 3.0' in text
    lines = [r for r in caplog.records if r.name == "stompmq.broker.limits"]
    assert len(lines) == 1 and "max-temp-queues" in lines[0].getMessage()


def _rss(pid: int) -> int:
    """Resident bytes of process ``pid`` now (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_transaction_flood_with_defaults_stays_within_64_mib(tmp_path: Path) -> None:
    """The figure: BEGIN then SENDs of 1 MiB (as the attack had it, 244 of them) stop at the
    default --max-transaction-bytes (32 MiB) with an ERROR; the broker's RSS grows by less than
    64 MiB, and another client's receipted SEND gets its RECEIPT within 1 s meanwhile."""
    with BrokerProcess(tmp_path / "db.sqlite") as broker:
        broker.start()
        assert broker.proc is not None
        pid = broker.proc.pid
        with Client(broker.port) as other:
            other.send_to("/queue/warm", "x")  # the store, the engine and the codec warmed up
            before = _rss(pid)
            with Client(broker.port) as flood:
                flood.frame("BEGIN", {"transaction": "t"})
                body = b"x" * 1024 * 1024
                for _ in range(31):  # just below the limit: what the broker holds at most
                    flood.frame("SEND", {"destination": "/queue/flood", "transaction": "t"}, body)
                flood.sync()
                peak = _rss(pid)
                sent = 31
                try:
                    for _ in range(244 - 31):
                        flood.frame("SEND", {"destination": "/queue/flood", "transaction": "t"}, body)
                        sent += 1
                except OSError:
                    pass  # the broker closed the connection at the limit
                _refused(flood, "max-transaction-bytes")
                peak = max(peak, _rss(pid))
                started = time.monotonic()
                other.send_to("/queue/other", "meanwhile")
                assert time.monotonic() - started < 1.0
        grown = peak - before
        print(f"transaction flood: {sent} SENDs of 1 MiB written, RSS {before >> 20} -> {peak >> 20} MiB "
              f"(+{grown / 2**20:.1f} MiB)")
        assert grown < 64 * 1024 * 1024


def _flood_queues(port: int, held: list[Client]) -> str:
    """SENDs to new queues, pipelined, until the default --max-queues refuses one."""
    flood = Client(port)
    held.append(flood)
    try:
        for i in range(20_001):
            flood.frame("SEND", {"destination": f"/queue/flood-{i}"}, b"x")
    except OSError:
        pass  # the broker closed the connection at the limit
    return _refused(flood, "max-queues")


def _flood_temp_queues(port: int, held: list[Client]) -> str:
    """100 connections holding the default 100 temporary queues each, then one more."""
    for _ in range(100):
        client = Client(port)
        held.append(client)
        for i in range(100):
            client.frame("SUBSCRIBE", {"destination": f"/temp-queue/t{i}", "id": str(i)})
        client.sync()
    held[0].frame("SUBSCRIBE", {"destination": "/temp-queue/one-more", "id": "more"})
    return _refused(held[0], "max-temp-queues")


def _flood_producer_ids(port: int, held: list[Client]) -> str:
    """New idempotent producers on one stream, pipelined, past the default --max-stream-producers."""
    flood = Client(port)
    held.append(flood)
    try:
        for i in range(12_000):
            flood.frame("SEND", {"destination": "/stream/ids", "x-producer-id": f"p{i}", "x-producer-seq": "1"},
                        b"x")
    except OSError:
        pass
    return _refused(flood, "max-stream-producers")


@pytest.mark.slow
@pytest.mark.parametrize("flood", [_flood_queues, _flood_temp_queues, _flood_producer_ids],
                         ids=["queues", "temp-queues", "producer-ids"])
def test_a_flood_up_to_a_default_limit_stays_within_64_mib(tmp_path: Path, flood: Callable[..., str]) -> None:
    """The figure for the other floods, as for transactions above: one client (or one address's
    connections) filling a limit with the defaults grows the broker's RSS by less than 64 MiB,
    and another client's receipted SEND gets its RECEIPT within 1 s while the flood holds it."""
    with BrokerProcess(tmp_path / "db.sqlite") as broker:
        broker.start()
        assert broker.proc is not None
        pid = broker.proc.pid
        held: list[Client] = []
        with Client(broker.port) as other:
            other.send_to("/queue/warm", "x")
            before = _rss(pid)
            try:
                flood(broker.port, held)
                peak = _rss(pid)
                started = time.monotonic()
                other.send_to("/queue/warm", "meanwhile")  # a queue in use: the vhost's are all taken
                waited = time.monotonic() - started
            finally:
                for client in held:
                    client.close()
        grown = peak - before
        print(f"{flood.__name__}: RSS {before >> 20} -> {peak >> 20} MiB (+{grown / 2**20:.1f} MiB), "
              f"the other client's RECEIPT after {waited * 1000:.1f} ms")
        assert grown < 64 * 1024 * 1024
        assert waited < 1.0


def test_producer_ids_per_stream_are_limited_and_expire(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_stream_producers=2, stream_producer_expiry=0.3))
    with Client(broker.port) as client:
        assert produce(client, "ids", "p1", 1, "a") and produce(client, "ids", "p2", 1, "b")
        assert not produce(client, "ids", "p1", 1, "again")  # a known one is still recognised
        client.frame("SEND", {"destination": "/stream/ids", "x-producer-id": "p3", "x-producer-seq": "1"}, b"c")
        assert "this stream has 2 idempotent producers" in _refused(client, "max-stream-producers")

    def p3_gets_in() -> bool:  # once p1 and p2 were not seen for the expiry
        with Client(broker.port) as c:
            c.frame("SEND", {"destination": "/stream/ids", "x-producer-id": "p3", "x-producer-seq": "1",
                             "receipt": "r"}, b"c")
            return c.recv().command == "RECEIPT"

    wait_until(p3_gets_in, "the stale producers forgotten")


def test_http_connections_are_bounded_and_refused_with_429(make_memory_broker: Callable[..., BrokerThread]) -> None:
    """Idle HTTP connections (no request, so no credentials yet) hold at most the bound; one
    more is answered 429 at once and closed; once they go, the API answers again."""
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port, max_http_connections=2))
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as third:
            answer = b""
            while chunk := third.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 429") and b"limit max-http-connections" in answer
        with Client(broker.port) as stomp:  # STOMP is not affected
            stomp.send_to("/queue/q", "x")
    finally:
        for s in idle:
            s.close()

    def api_answers() -> bool:
        status, text = Api(port).call("GET", "/metrics")
        return status == 200 and 'stompmq_limit_refusals_total{limit="max-http-connections"}' in text

    # (Hypercorn's server of a connection ends up to its keep-alive timeout, 5 s, after the peer left)
    wait_until(api_answers, "the API serving again, the refusal counted", timeout=15)


def test_declared_queues_count_against_max_queues(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_queues=2))
    with Client(broker.port) as client:
        client.send_to("/control/declare/queue/d1", headers={"max-length": "5"})
        client.send_to("/control/declare/queue/d1", headers={"max-length": "6"})  # a redeclaration: fine
        client.send_to("/queue/q1", "x")
        client.frame("SEND", {"destination": "/control/declare/queue/d2", "receipt": "r"})
        assert "this vhost has 2 queues in use already" in _refused(client, "max-queues")
