"""STOMP over TLS: stomp.py and raw clients against a real TLS listener, mutual TLS, reload, bad files.

Certificates are made by the test itself with trustme (a throw-away CA per test).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import stomp
import trustme

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password
from stompmq.server.listeners import listener_port
from stompmq.server.security import Security

from ..support.broker_process import BrokerProcess, free_port
from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient
from ..support.waiting import wait_until

TIMEOUT = 5.0
#: How a refused handshake shows on the client (TLS 1.3 reports a refused certificate after it).
REFUSED = (ssl.SSLError, ConnectionError, EOFError)


def write_cert(ca: trustme.CA, directory: Path, name: str = "server") -> tuple[str, str]:
    """A certificate for localhost/127.0.0.1 signed by ``ca``: (cert path, key path)."""
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert.private_key_pem.write_to_path(str(key_path))
    cert_path.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    return str(cert_path), str(key_path)


def tls_client(port: int, context: ssl.SSLContext) -> RawClient:
    client = RawClient(port)
    client.sock = context.wrap_socket(client.sock, server_hostname="localhost")
    return client


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.fixture
def tls_broker(tmp_path: Path, make_memory_broker: Callable[..., BrokerThread]) -> Callable[..., tuple[BrokerThread, int]]:
    def start(ca: trustme.CA, **settings: object) -> tuple[BrokerThread, int]:
        cert, key = write_cert(ca, tmp_path)
        broker = make_memory_broker(settings=ServerSettings(port=0, tls_port=0, tls_cert=cert, tls_key=key, **settings))
        return broker, listener_port(broker.listeners[1])

    return start


def test_stomp_py_over_tls_and_plain_tcp_on_one_broker(tls_broker, tmp_path: Path) -> None:
    ca = trustme.CA()
    broker, tls_port = tls_broker(ca)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    received: queue.Queue = queue.Queue()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame) -> None:
            received.put(frame.body)

    secure = stomp.Connection12([("127.0.0.1", tls_port)])
    secure.set_ssl(for_hosts=[("127.0.0.1", tls_port)], ca_certs=str(tmp_path / "ca.pem"))
    secure.set_listener("l", Listener())
    secure.connect(wait=True)
    secure.subscribe("/queue/tls", id="1", ack="auto")
    plain = stomp.Connection12([("127.0.0.1", broker.port)])
    plain.connect(wait=True)
    try:
        plain.send("/queue/tls", "from plain TCP")
        secure.send("/queue/tls", "from TLS")
        assert {received.get(timeout=TIMEOUT), received.get(timeout=TIMEOUT)} == {"from plain TCP", "from TLS"}
    finally:
        secure.disconnect()
        plain.disconnect()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated")
def test_only_tls_1_2_and_later_are_accepted(tls_broker) -> None:
    ca = trustme.CA()
    _, tls_port = tls_broker(ca)
    context = client_context(ca)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(REFUSED):
        tls_client(tls_port, context).connect()


def test_a_failed_handshake_is_logged_with_the_peer(tls_broker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stompmq.server.connection")
    _, tls_port = tls_broker(trustme.CA())
    with pytest.raises(REFUSED):
        tls_client(tls_port, client_context(trustme.CA())).connect()  # the client does not trust it
    wait_until(lambda: "TLS handshake failed" in caplog.text, "the failure logged")
    line = next(r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage())
    assert "from 127.0.0.1:" in line, line
    assert "Traceback" not in caplog.text


def test_mutual_tls_refuses_a_certificate_from_another_ca_and_serves_others(tls_broker, tmp_path: Path) -> None:
    ca, stranger = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    broker, tls_port = tls_broker(ca, tls_ca=str(tmp_path / "client-ca.pem"), tls_verify_client=True)
    bad = client_context(ca)
    stranger.issue_cert("mallory").configure_cert(bad)
    with pytest.raises(REFUSED):
        client = tls_client(tls_port, bad)
        client.connect()
    anonymous = client_context(ca)  # no certificate at all
    with pytest.raises(REFUSED):
        tls_client(tls_port, anonymous).connect()
    good = client_context(ca)
    ca.issue_cert("alice", common_name="alice").configure_cert(good)
    client = tls_client(tls_port, good)
    assert client.connect().command == "CONNECTED"
    assert broker.call(lambda: [s.login for s in broker.broker.sessions.values()]) == ["alice"]
    client.close()


def test_the_client_certificate_cn_is_the_login_with_tls_cert_login(tmp_path: Path, tls_broker) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    users = Users({"alice": User("alice", hash_password("pw"), [], {"/": Permission()})})
    users.save(tmp_path / "users.toml")
    broker, tls_port = tls_broker(ca, tls_ca=str(tmp_path / "client-ca.pem"), tls_verify_client=True,
                                  users_file=str(tmp_path / "users.toml"), tls_cert_login=True)
    context = client_context(ca)
    ca.issue_cert("alice", common_name="alice").configure_cert(context)
    client = tls_client(tls_port, context)
    client.connect()
    assert broker.call(lambda: [s.login for s in broker.broker.sessions.values()]) == ["alice"]
    client.close()
    unknown = client_context(ca)
    ca.issue_cert("bob", common_name="bob").configure_cert(unknown)
    client = tls_client(tls_port, unknown)
    client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
    assert client.expect_error()["message"] == "bad login or passcode"


def test_a_client_certificate_alone_does_not_log_in_by_default(tmp_path: Path, tls_broker) -> None:
    """A browser presents its certificate to any page that opens wss://: the certificate
    alone is a login only where the operator says so (--tls-cert-login)."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    users = Users({"alice": User("alice", hash_password("pw"), ["administrator"], {"/": Permission()})})
    users.save(tmp_path / "users.toml")
    broker, tls_port = tls_broker(ca, tls_ca=str(tmp_path / "client-ca.pem"), tls_verify_client=True,
                                  users_file=str(tmp_path / "users.toml"))
    context = client_context(ca)
    ca.issue_cert("alice", common_name="alice").configure_cert(context)
    with tls_client(tls_port, context) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        assert client.expect_error()["message"] == "bad login or passcode"
    with tls_client(tls_port, context) as client:  # the password still works with the certificate
        assert client.connect(login="alice", passcode="pw").command == "CONNECTED"


def test_a_changed_certificate_is_used_for_new_connections(tls_broker, tmp_path: Path) -> None:
    old, new = trustme.CA(), trustme.CA()
    _, tls_port = tls_broker(old)
    kept = tls_client(tls_port, client_context(old))
    kept.connect()
    write_cert(new, tmp_path)  # the same paths: the broker notices the change (or a SIGHUP)

    def new_one_served() -> bool:
        try:
            tls_client(tls_port, client_context(new)).close()
        except ssl.SSLError:
            return False
        return True

    wait_until(new_one_served, "the new certificate served", timeout=10)
    kept.frame("SEND", {"destination": "/queue/x", "receipt": "r"})
    assert kept.recv().command == "RECEIPT"  # connections already open keep working


@pytest.mark.parametrize("problem", ["missing", "mismatched", "garbage"])
def test_unusable_tls_files_stop_the_start_with_one_line_and_exit_2(tmp_path: Path, problem: str) -> None:
    cert, key = write_cert(trustme.CA(), tmp_path)
    if problem == "missing":
        cert = str(tmp_path / "nope.pem")
    elif problem == "mismatched":
        _, key = write_cert(trustme.CA(), tmp_path, "other")
    else:
        Path(cert).write_text("not a certificate\n")
    result = subprocess.run(
        [sys.executable, "-m", "stompmq.cli", "--store", "memory", "--port", str(free_port()), "--tls-port", "0",
         "--tls-cert", cert, "--tls-key", key],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stompmq: cannot load --tls-cert"), result.stderr


def test_sighup_reloads_the_certificate_of_a_running_broker(tmp_path: Path) -> None:
    old, new = trustme.CA(), trustme.CA()
    cert, key = write_cert(old, tmp_path)
    tls_port = free_port()
    broker = BrokerProcess(tmp_path / "b.db", "--tls-port", str(tls_port), "--tls-cert", cert, "--tls-key", key,
                           log_level="INFO").start()
    try:
        tls_client(tls_port, client_context(old)).close()
        write_cert(new, tmp_path)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "TLS certificate reloaded" in broker.stderr, "the reload logged", timeout=1.5)
        tls_client(tls_port, client_context(new)).close()
        assert broker.proc.poll() is None  # SIGHUP does not stop the broker
    finally:
        assert broker.terminate() == 0


def test_a_changed_file_reloads_that_file_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stompmq.server.security")
    cert, key = write_cert(trustme.CA(), tmp_path)
    users = Users({"alice": User("alice", hash_password("pw"), [], {"/": Permission()})})
    users.save(tmp_path / "users.toml")
    security = Security(ServerSettings(tls_port=0, tls_cert=cert, tls_key=key, users_file=str(tmp_path / "users.toml")))
    users.users["bob"] = User("bob", hash_password("pw"), [], {})
    users.save(tmp_path / "users.toml")
    security.reload_changed()
    assert "users reloaded" in caplog.text and "TLS certificate reloaded" not in caplog.text
    caplog.clear()
    cert, _ = write_cert(trustme.CA(), tmp_path)
    os.utime(cert, (time.time() + 10, time.time() + 10))  # changed even within the clock's granularity
    security.reload_changed()
    assert "TLS certificate reloaded" in caplog.text and "users reloaded" not in caplog.text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--users-file", "/nonexistent/users.toml"], "stompmq: cannot read users file /nonexistent/users.toml"),
        (["--tls-port", "0"], "stompmq: TLS needs both --tls-cert and --tls-key"),
    ],
)
def test_other_unusable_security_settings_exit_2(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "stompmq.cli", "--store", "memory", "--port", str(free_port()), *args],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and result.stderr.strip().startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
