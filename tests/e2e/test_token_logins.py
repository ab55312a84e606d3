"""Token logins through a real broker (server/tokens.py): a JWT as CONNECT's passcode or the
WebSocket handshake's Bearer, its scopes as permissions, key rotation through the JWKS file, and
a session that ends with an ERROR when its token expires unless a fresh one came first."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.listeners import listener_port

from ..support.broker_process import BrokerProcess, free_port, port_open
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client

pytest.importorskip("jwt", reason="token logins need the oauth extra")

from ..support.tokens import RESOURCE_SERVER, Issuer
from ..support.waiting import wait_until
from ..support.wsclient import WSClient

ORDERS = f"{RESOURCE_SERVER}.read:*/orders-* {RESOURCE_SERVER}.write:%2F/orders-*"


@pytest.fixture
def issuer() -> Issuer:
    return Issuer("k1")


@pytest.fixture
def tokens_broker(tmp_path: Path, issuer: Issuer, make_memory_broker: Callable[..., BrokerThread]) -> BrokerThread:
    jwks = issuer.write_jwks(tmp_path / "jwks.json")
    return make_memory_broker(settings=ServerSettings(port=0, ws_port=0, oauth_jwks=str(jwks)))


def _connect(broker: BrokerThread, token: str) -> Client:
    return Client(broker.port, login="", passcode=token)


def test_a_token_logs_in_its_subject_with_its_scopes(tokens_broker: BrokerThread, issuer: Issuer) -> None:
    with _connect(tokens_broker, issuer.token(sub="svc", scope=ORDERS)) as client:
        assert client.connected is not None
        client.subscribe("/queue/orders-eu", "s")
        client.send_to("/queue/orders-eu", "x")
        assert client.message().body == b"x"
        client.frame("SEND", {"destination": "/queue/payroll", "receipt": "r"}, b"x")
        assert "access refused" in client.expect_error()["message"]


@pytest.mark.parametrize("case", ["expired", "foreign-key", "wrong-audience", "not-a-token", "anonymous"])
def test_bad_tokens_and_anonymous_clients_are_refused(tokens_broker: BrokerThread, issuer: Issuer,
                                                       case: str) -> None:
    passcode = {"expired": issuer.token(lifetime=-10), "foreign-key": Issuer("k1").token(),
                "wrong-audience": issuer.token(aud="other"), "not-a-token": "password", "anonymous": None}[case]
    with Client(tokens_broker.port, connect=False) as client:
        headers = {"accept-version": "1.2", "host": "localhost"}
        if passcode is not None:
            headers.update(login="x", passcode=passcode)
        client.frame("CONNECT", headers)
        message = client.expect_error()["message"]
        assert ("bad access token" if case in ("expired", "foreign-key", "wrong-audience")
                else "bad login or passcode") in message, message


def test_a_rotated_key_is_fetched_on_its_first_token(tokens_broker: BrokerThread, issuer: Issuer,
                                                      tmp_path: Path) -> None:
    issuer.add_key("k2")
    issuer.write_jwks(tmp_path / "jwks.json")
    with _connect(tokens_broker, issuer.token(kid="k2", scope=ORDERS)) as client:
        assert client.connected is not None


def test_a_bearer_token_on_the_websocket_handshake_logs_in(tokens_broker: BrokerThread, issuer: Issuer) -> None:
    port = listener_port(tokens_broker.listeners[1])
    with WSClient(port, headers={"Authorization": "Bearer " + issuer.token(scope=ORDERS)}) as client:
        assert client.connect().command == "CONNECTED"
    with WSClient(port) as client:  # without it: no anonymous access
        client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        assert "bad login or passcode" in client.expect_error()["message"]


def test_a_short_token_ends_its_session_with_an_error_at_its_expiry(tokens_broker: BrokerThread,
                                                                    issuer: Issuer) -> None:
    """A 2 s token: deliveries stop at 2 s (within the timer's tick and this machine's delays)
    with an ERROR saying why."""
    start = time.monotonic()
    with _connect(tokens_broker, issuer.token(scope=ORDERS, lifetime=2.0)) as consumer, \
            _connect(tokens_broker, issuer.token(sub="producer", scope=ORDERS, lifetime=60)) as producer:
        consumer.subscribe("/queue/orders-live", "s")
        producer.send_to("/queue/orders-live", "before")
        assert consumer.message().body == b"before"
        error = consumer.expect_error(timeout=10)
        ended = time.monotonic() - start
        assert "access token expired" in error["message"] and "/control/refresh-token" in error["message"]
        assert 1.8 <= ended <= 3.0, ended
        producer.send_to("/queue/orders-live", "after")  # the producer's own token still holds


def test_a_fresh_token_before_expiry_keeps_the_session(tokens_broker: BrokerThread, issuer: Issuer) -> None:
    start = time.monotonic()
    with _connect(tokens_broker, issuer.token(scope=ORDERS, lifetime=2.0)) as client:
        client.subscribe("/queue/orders-kept", "s")
        client.request("SEND", {"destination": "/control/refresh-token",
                                "token": issuer.token(scope=ORDERS, lifetime=4.0)})
        while time.monotonic() - start < 2.5:  # past the first token's expiry
            client.send_to("/queue/orders-kept", "x")
            assert client.message().body == b"x"
        error = client.expect_error(timeout=10)
        assert "access token expired" in error["message"]
        assert 3.7 <= time.monotonic() - start <= 5.0


def test_a_fresh_token_of_another_subject_is_refused(tokens_broker: BrokerThread, issuer: Issuer) -> None:
    with _connect(tokens_broker, issuer.token(scope=ORDERS)) as client:
        client.frame("SEND", {"destination": "/control/refresh-token", "receipt": "r",
                              "token": issuer.token(sub="mallory", scope=ORDERS)})
        error = client.expect_error()
        assert "for 'mallory', not 'alice'" in error["message"] and error["receipt-id"] == "r"


@pytest.mark.parametrize("with_tokens", [True, False])
def test_a_refresh_without_a_token_login_is_an_error(tmp_path: Path, issuer: Issuer, with_tokens: bool,
                                                     make_memory_broker: Callable[..., BrokerThread]) -> None:
    """An anonymous session (no --oauth-jwks) or one without a token header: an ERROR, no crash."""
    settings = ServerSettings(port=0, oauth_jwks=str(issuer.write_jwks(tmp_path / "j.json")) if with_tokens else None)
    broker = make_memory_broker(settings=settings)
    client = _connect(broker, issuer.token()) if with_tokens else Client(broker.port)
    with client:
        client.frame("SEND", {"destination": "/control/refresh-token", "receipt": "r"})
        error = client.expect_error()
        assert "/control/refresh-token needs a token login" in error["message"] and error["receipt-id"] == "r"


@pytest.mark.parametrize("jwks", ["missing", "not-json"])
def test_an_unusable_jwks_stops_the_broker_at_start_with_exit_2(tmp_path: Path, jwks: str) -> None:
    path = tmp_path / "jwks.json"
    if jwks == "not-json":
        path.write_text("not json")
    result = subprocess.run([sys.executable, "-m", "stompmq.cli", "--store", "memory", "--port", str(free_port()),
                             "--http-port", "0", "--oauth-jwks", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stompmq: --oauth-jwks {path}:"), result.stderr


def test_the_command_line_turns_token_logins_on(tmp_path: Path, issuer: Issuer) -> None:
    jwks = issuer.write_jwks(tmp_path / "jwks.json")
    with BrokerProcess(tmp_path / "db.sqlite", "--oauth-jwks", str(jwks), "--oauth-resource-server-id", "mq") as broker:
        broker.spawn()  # (start() waits for an anonymous CONNECT, which token logins refuse)
        wait_until(lambda: port_open(broker.port), "the broker listening", timeout=30)
        with Client(broker.port, login="", passcode=issuer.token(aud="mq", scope="mq.write:*/*")) as client:
            client.send_to("/queue/cli", "x")
        with Client(broker.port, connect=False) as client:  # the default audience is not this broker's now
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "passcode": issuer.token()})
            assert "bad access token" in client.expect_error()["message"]
