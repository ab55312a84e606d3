"""STOMP over WebSocket through a real listener: handshake, subprotocols and framing corner cases."""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from wsproto.events import AcceptConnection, RejectConnection

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password
from stompmq.server.listeners import listener_port
from stompmq.server.websocket import allowed_origins, choose_subprotocol, origin_allowed

from ..support.broker_thread import BrokerThread
from ..support.users import write_users
from ..support.waiting import wait_until
from ..support.wsclient import WSClient
from .test_tls import client_context, write_cert

CONNECT = "CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"


@pytest.fixture
def ws_port(make_memory_broker: Callable[..., BrokerThread]) -> int:
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0))
    return listener_port(broker.listeners[1])


@pytest.mark.parametrize(
    "offered, chosen",
    [
        (["v10.stomp", "v12.stomp", "v11.stomp"], "v12.stomp"),
        (["stomp", "v11.stomp"], "v11.stomp"),
        (["stomp"], "stomp"),
        (["mqtt"], None),
    ],
)
def test_the_best_offered_subprotocol_is_chosen(offered: list[str], chosen: str | None) -> None:
    assert choose_subprotocol(offered) == chosen


def test_handshake_answers_with_the_subprotocol(ws_port: int) -> None:
    client = WSClient(ws_port, ["v10.stomp", "v11.stomp"])
    assert isinstance(client.handshake, AcceptConnection) and client.handshake.subprotocol == "v11.stomp"
    assert client.connect().command == "CONNECTED"
    client.close()


def test_other_paths_are_not_found(ws_port: int) -> None:
    client = WSClient(ws_port, path="/other")
    assert isinstance(client.handshake, RejectConnection) and client.handshake.status_code == 404
    client.close()


def test_several_frames_in_one_message_and_replies_as_text(ws_port: int) -> None:
    with WSClient(ws_port) as client:
        client.send_message(
            CONNECT
            + "SUBSCRIBE\ndestination:/queue/a\nid:1\n\n\x00"
            + "SEND\ndestination:/queue/a\nreceipt:r\n\nhello\x00"
        )
        frames = {client.recv().command for _ in range(3)}
        assert frames == {"CONNECTED", "MESSAGE", "RECEIPT"}
        assert all(isinstance(m, str) for m in client.messages)


def test_one_frame_over_several_messages_and_fragments_text_and_binary(ws_port: int) -> None:
    with WSClient(ws_port) as client:
        client.connect()
        client.frame("SUBSCRIBE", {"destination": "/queue/a", "id": "1"})
        client.send_message("SEND\ndestination:/qu")
        client.send_message(b"eue/a\ncontent-length:3\n\n\x00\xff", finished=False)  # binary, fragmented
        client.send_message(b"\x01\x00")
        message = client.recv()
        assert message.command == "MESSAGE" and message.body == b"\x00\xff\x01"
        assert isinstance(client.messages[-1], bytes)  # not UTF-8: sent as a binary message


def test_heart_beats_are_eols_both_ways(make_memory_broker: Callable[..., BrokerThread]) -> None:
    # It beats every 100 ms; ours may come 1 s apart (a loaded machine may stall the client).
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0, heart_beat=(100, 1000)))
    with WSClient(listener_port(broker.listeners[1])) as client:
        client.send_message("CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:100,100\n\n\x00")
        assert client.recv().command == "CONNECTED"
        for _ in range(6):
            client.send_message("\n")  # our beats keep the connection alive
            client.no_frame(0.1)
        assert "\n" in client.messages  # and the broker's arrive as messages of one EOL
        client.frame("SEND", {"destination": "/queue/hb", "receipt": "r"})
        assert client.recv().command == "RECEIPT"


def test_ping_is_answered(ws_port: int) -> None:
    with WSClient(ws_port) as client:
        assert client.ping(b"are you there") == b"are you there"


def test_an_error_is_followed_by_a_websocket_close(ws_port: int) -> None:
    with WSClient(ws_port) as client:
        client.connect()
        client.frame("BOGUS")
        assert client.recv().command == "ERROR"
        assert client.close_code() == 1000


def test_wss_uses_the_tls_settings(tmp_path: Path, make_memory_broker: Callable[..., BrokerThread]) -> None:
    ca = trustme.CA()
    cert, key = write_cert(ca, tmp_path)
    broker = make_memory_broker(settings=ServerSettings(port=0, wss_port=0, tls_cert=cert, tls_key=key))
    port = listener_port(broker.listeners[1])
    with WSClient(port, context=client_context(ca)) as client:
        assert client.connect().command == "CONNECTED"
    with pytest.raises(ssl.SSLError):
        WSClient(port, context=client_context(trustme.CA()))


def test_logins_are_checked_over_websocket_too(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0, login="u", passcode="p"))
    port = listener_port(broker.listeners[1])
    with WSClient(port) as client:
        assert client.connect(login="u", passcode="p").command == "CONNECTED"
    with WSClient(port) as client:
        client.send_message("CONNECT\naccept-version:1.2\nhost:localhost\nlogin:u\npasscode:x\n\n\x00")
        assert client.recv()["message"] == "bad login or passcode"


@pytest.mark.parametrize(
    "origin, host, allowed, tls, ok",
    [
        (None, "broker:15674", (), False, True),  # no Origin: not a browser
        ("http://broker:15674", "broker:15674", (), False, True),  # the broker's own origin
        ("http://BROKER:15674", "broker:15674", (), False, True),
        ("https://broker", "broker", (), True, True),  # 443 on both sides
        ("https://broker", "broker:443", (), True, True),
        ("http://broker", "broker", (), True, False),  # 80 is not the wss listener's 443
        ("https://evil.example", "broker:15674", (), False, False),
        ("http://broker:8080", "broker:15674", (), False, False),  # another port: another origin
        ("null", "broker:15674", (), False, False),
        ("null", "broker:15674", ("null",), False, True),
        ("https://app.example", "broker:15674", ("https://app.example:443",), False, True),
        ("https://app.example:8443", "broker:15674", ("https://app.example",), False, False),
        ("https://evil.example", "broker:15674", ("*",), False, True),
        ("garbage", "broker:15674", (), False, False),
    ],
)
def test_which_origins_may_open_a_websocket(
    origin: str | None, host: str, allowed: tuple[str, ...], tls: bool, ok: bool
) -> None:
    assert origin_allowed(origin, host, allowed_origins(allowed), tls) is ok


def test_a_cross_origin_browser_handshake_is_refused_unless_allowed(
    make_memory_broker: Callable[..., BrokerThread],
) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0,
                                                        ws_allowed_origins=("https://app.example",)))
    port = listener_port(broker.listeners[1])
    evil = WSClient(port, origin="https://evil.example")
    assert isinstance(evil.handshake, RejectConnection) and evil.handshake.status_code == 403
    evil.close()
    for origin in ("https://app.example", f"http://localhost:{port}", None):
        with WSClient(port, origin=origin, host=f"localhost:{port}") as client:
            assert isinstance(client.handshake, AcceptConnection), origin
            assert client.connect().command == "CONNECTED"


@pytest.mark.parametrize("users", [False, True])
def test_a_handshake_to_a_host_that_is_not_the_brokers_is_refused(
    make_memory_broker: Callable[..., BrokerThread], tmp_path: Path, caplog: pytest.LogCaptureFixture, users: bool,
) -> None:
    """DNS rebinding: a page of evil.example whose name resolves to the broker sends its own
    Host and a matching Origin; refused with and without a users file, while the broker's own
    names and those of --host-names get through."""
    users_file = write_users(tmp_path / "users.toml", {"alice": Permission()}) if users else None
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0, users_file=users_file,
                                                        host_names=("broker.example",)))
    port = listener_port(broker.listeners[1])
    for host in (f"evil.example:{port}", "evil.example"):
        with caplog.at_level(logging.INFO, logger="stompmq.server.websocket"):
            evil = WSClient(port, origin=f"http://{host}", host=host)
        assert isinstance(evil.handshake, RejectConnection) and evil.handshake.status_code == 403, host
        evil.close()
    refusals = [r for r in caplog.records if "not a name of this broker" in r.getMessage()]
    assert len(refusals) == 2 and all(r.levelno == logging.INFO and r.exc_info is None for r in refusals)
    login = {"login": "alice", "passcode": "pw-alice"} if users else {}
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"broker.example:{port}"):
        with WSClient(port, origin=f"http://{host}", host=host) as client:
            assert isinstance(client.handshake, AcceptConnection), host
            assert client.connect(**login).command == "CONNECTED"


def test_wss_with_a_client_certificate_from_another_origin_is_not_a_login(
    tmp_path: Path, make_memory_broker: Callable[..., BrokerThread]
) -> None:
    """What a page of evil.example could do with the browser of alice (who holds a client
    certificate): neither open the WebSocket nor log in as alice with the certificate alone."""
    ca = trustme.CA()
    cert, key = write_cert(ca, tmp_path)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    users = Users({"alice": User("alice", hash_password("pw"), ["administrator"], {"/": Permission()})})
    users.save(tmp_path / "users.toml")
    broker = make_memory_broker(settings=ServerSettings(
        port=0, wss_port=0, tls_cert=cert, tls_key=key, tls_ca=str(tmp_path / "ca.pem"),
        users_file=str(tmp_path / "users.toml")))
    port = listener_port(broker.listeners[1])
    context = client_context(ca)
    ca.issue_cert("alice", common_name="alice").configure_cert(context)
    evil = WSClient(port, context=context, origin="https://evil.example")
    assert isinstance(evil.handshake, RejectConnection) and evil.handshake.status_code == 403
    evil.close()
    with WSClient(port, context=context) as client:  # even where the handshake passes
        client.send_message(CONNECT)
        assert client.expect_error()["message"] == "bad login or passcode"


def test_a_client_gone_without_a_close_frame_is_one_quiet_line(
    ws_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="stompmq.server")
    client = WSClient(ws_port)
    client.connect()
    client.sock.close()  # no Close frame
    wait_until(lambda: "disconnected after" in caplog.text, "the disconnection logged")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "ready" not in r.getMessage()]
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("handshake", [
    b"GET /ws HTTP/1.1\r\nHost: localhost\r\n\r\n",  # no Upgrade: a plain HTTP request
    b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",  # no key
    b"hello there\r\n\r\n",  # not HTTP at all
    b"GET /ws HTTP/1.1\r\nHost: localhost\r\n" + b"X: " + b"y" * 70_000 + b"\r\n\r\n",  # too long
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64),  # a TLS ClientHello on the plain port
])
def test_a_bad_handshake_is_one_quiet_line(ws_port: int, caplog: pytest.LogCaptureFixture, handshake: bytes) -> None:
    """A bad handshake is the client's mistake, not the broker's: one INFO line, no traceback,
    and the broker serves the next client."""
    caplog.set_level(logging.DEBUG, logger="stompmq")
    with socket.create_connection(("127.0.0.1", ws_port), timeout=5) as sock:
        try:
            sock.sendall(handshake)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # the broker may close first
    wait_until(lambda: "disconnected after" in caplog.text or "websocket:" in caplog.text, "the bad handshake logged")
    with WSClient(ws_port) as client:
        assert client.connect().command == "CONNECTED"
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud and "Traceback" not in caplog.text, caplog.text
    websocket_lines = [r for r in caplog.records if r.name.endswith("websocket") and r.levelno >= logging.INFO]
    assert len(websocket_lines) <= 1, caplog.text
