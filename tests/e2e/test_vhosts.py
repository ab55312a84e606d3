"""Virtual hosts through a real listening broker: selection by CONNECT's host header,
declaration, isolation (on every store, across a restart), and the permission matrix
with the vhost as one more dimension."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient, RawFrame
from ..support.stores import make_store_factory

_receipts = itertools.count(1)


def connect(port: int, host: str | None, **credentials: str) -> RawClient:
    client = RawClient(port)
    headers = {"accept-version": "1.2", **credentials}
    if host is not None:
        headers["host"] = host
    client.frame("CONNECT", headers)
    reply = client.recv()
    assert reply.command == "CONNECTED", reply
    return client


def request(client: RawClient, command: str, headers: dict[str, str], body: bytes = b"") -> RawFrame:
    """Send a frame with a receipt; the RECEIPT (or the ERROR) that answers it (frames before it
    are dropped)."""
    receipt = f"r{next(_receipts)}"
    client.frame(command, {**headers, "receipt": receipt}, body)
    while True:
        reply = client.recv()
        if reply.command == "ERROR" or reply.headers.get("receipt-id") == receipt:
            return reply


def declare(port: int, vhost: str) -> None:
    with connect(port, None) as client:
        assert request(client, "SEND", {"destination": "/control/declare/vhost/" + vhost}).command == "RECEIPT"


def receive(port: int, host: str | None, count: int, queue: str = "/queue/q") -> list[bytes]:
    """``count`` messages of ``queue`` in that vhost, then none more within half a second."""
    with connect(port, host) as client:
        client.frame("SUBSCRIBE", {"destination": queue, "id": "s", "ack": "client-individual"})
        bodies = []
        for _ in range(count):
            message = client.recv()
            assert message.command == "MESSAGE", message
            bodies.append(message.body)
            client.frame("ACK", {"id": message["ack"]})
        assert client.no_frame(0.5)
        return bodies


def test_the_host_header_selects_the_vhost(memory_broker: BrokerThread) -> None:
    port = memory_broker.port
    declare(port, "dev")
    for host in (None, "", "localhost", "LOCALHOST:61613", "127.0.0.1", "[::1]:61613", "/"):
        with connect(port, host) as client:
            request(client, "SEND", {"destination": "/queue/q"}, b"default")
    with connect(port, "dev") as client:
        request(client, "SEND", {"destination": "/queue/q"}, b"dev")
    assert receive(port, "dev", 1) == [b"dev"]
    assert receive(port, "/", 7) == [b"default"] * 7


@pytest.mark.parametrize("host", ["nosuchvhost", "dev.example.com", "Dev"])
def test_an_unknown_vhost_is_an_error_at_connect(memory_broker: BrokerThread, host: str) -> None:
    declare(memory_broker.port, "dev")
    with RawClient(memory_broker.port) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": host})
        assert client.expect_error().body.decode() == f"unknown vhost {host!r}"


def test_host_names_adds_names_of_the_default_vhost(make_memory_broker: Callable[..., BrokerThread]) -> None:
    thread = make_memory_broker(settings=ServerSettings(port=0, host_names=("broker.example.com",)))
    with connect(thread.port, "Broker.Example.Com:61613") as client:
        assert request(client, "SEND", {"destination": "/queue/q"}, b"x").command == "RECEIPT"
    assert receive(thread.port, None, 1) == [b"x"]


@pytest.mark.parametrize("name, error", [
    ("a\\nb", "a vhost name must not contain NUL, CR or LF"),
    ("x" * 256, "a vhost name must be 1-255 bytes of UTF-8"),
    ("", "a vhost name must be 1-255 bytes of UTF-8"),
])
def test_a_bad_vhost_name_is_an_error(memory_broker: BrokerThread, name: str, error: str) -> None:
    with connect(memory_broker.port, None) as client:
        client.frame("SEND", {"destination": "/control/declare/vhost/" + name})
        assert client.expect_error().body.decode() == error


def test_vhosts_are_isolated_and_survive_a_restart(store_kind: str, tmp_path: Path) -> None:
    """Same queue, exchange and stream names in two vhosts are different things, on every store."""
    make_store = make_store_factory(store_kind, tmp_path)

    @contextmanager
    def running() -> Iterator[int]:
        with BrokerThread(make_store).start() as thread:
            yield thread.port

    with running() as port:
        declare(port, "dev")
        for host, body in ((None, b"in /"), ("dev", b"in dev")):
            with connect(port, host) as client:
                assert request(client, "SEND", {"destination": "/queue/q"}, body).command == "RECEIPT"
                assert request(client, "SEND", {"destination": "/stream/s"}, body).command == "RECEIPT"
        with connect(port, "dev") as client:
            declared = request(client, "SEND", {"destination": "/control/declare/exchange/ring",
                                                "type": "consistent-hash"})
            assert declared.command == "RECEIPT"
            bound = request(client, "SEND", {"destination": "/control/bind/exchange/ring", "queue": "/queue/q",
                                             "weight": "1"})
            assert bound.command == "RECEIPT"
        with connect(port, None) as client:  # no exchange "ring" in the default vhost
            assert request(client, "SEND", {"destination": "/exchange/ring/k"}, b"x").command == "ERROR"
    if store_kind == "memory":
        return  # nothing survives a restart of the memory store
    with running() as port:
        with connect(port, "dev") as client:  # the vhost, its exchange and its binding are back
            assert request(client, "SEND", {"destination": "/exchange/ring/k"}, b"routed").command == "RECEIPT"
            counted = request(client, "SEND", {"destination": "/control/count-msgs/queue/q"})
            assert counted["num-messages"] == "2"
        assert receive(port, "dev", 2) == [b"in dev", b"routed"]
        assert receive(port, None, 1) == [b"in /"]
        for host, body in ((None, b"in /"), ("dev", b"in dev")):  # each vhost's stream from the store
            with connect(port, host) as client:
                client.frame("SUBSCRIBE", {"destination": "/stream/s", "id": "s", "x-stream-offset": "first"})
                entry = client.recv()
                assert (entry.body, entry["x-stream-offset"]) == (body, "0")
                assert client.no_frame(0.5)


def test_a_private_queue_and_a_durable_subscription_stay_in_their_vhost(store_kind: str, tmp_path: Path) -> None:
    with BrokerThread(make_store_factory(store_kind, tmp_path)).start() as thread:
        declare(thread.port, "dev")
        with connect(thread.port, "dev") as dev, connect(thread.port, None) as default:
            for client in (dev, default):
                subscribed = request(client, "SUBSCRIBE", {"destination": "/topic/t", "id": "d", "durable": "true"})
                assert subscribed.command == "RECEIPT"
            dev.frame("SEND", {"destination": "/topic/t"}, b"dev only")
            message = dev.recv()
            assert (message.command, message.body) == ("MESSAGE", b"dev only")
            assert default.no_frame(0.5)


@contextmanager
def restarting(store_kind: str, tmp_path: Path) -> Iterator[Callable[[], int]]:
    """``start()`` (re)starts a broker on the same store and returns its port; a memory store is
    started once (a restart would lose everything), so its test runs from the engine's memory."""
    make_store = make_store_factory(store_kind, tmp_path)
    running: list[BrokerThread] = []

    def start() -> int:
        if running and store_kind == "memory":
            return running[-1].port
        if running:
            running.pop().stop()
        running.append(BrokerThread(make_store).start())
        return running[-1].port

    try:
        yield start
    finally:
        for thread in running:
            thread.stop()


def send(port: int, host: str | None, destination: str, body: bytes, **headers: str) -> RawFrame:
    with connect(port, host) as client:
        return request(client, "SEND", {"destination": destination, **headers}, body)


def control(port: int, host: str | None, path: str, **headers: str) -> RawFrame:
    return send(port, host, "/control/" + path, b"", **headers)


def test_delayed_and_expiring_messages_stay_in_their_vhost(store_kind: str, tmp_path: Path) -> None:
    """After a restart the store hands each vhost's engine only its own delayed rows and its own
    expired rows (``load_due``/``load_expired`` by vhost): the default vhost's engine neither
    publishes dev's delayed message nor expires dev's message under its own queue's policy."""
    with restarting(store_kind, tmp_path) as start:
        port = start()
        declare(port, "dev")
        assert control(port, "dev", "declare/queue/q", **{"message-ttl": "300", "dead-letter": "true"}).command \
            == "RECEIPT"
        assert send(port, "dev", "/queue/q", b"dev expires").command == "RECEIPT"
        assert send(port, "dev", "/queue/d", b"dev delayed", delay="500").command == "RECEIPT"
        assert send(port, "dev", "/queue/t", b"dev ttl", ttl="300").command == "RECEIPT"
        assert send(port, None, "/queue/d", b"default delayed", delay="500").command == "RECEIPT"
        assert send(port, None, "/queue/q", b"default kept").command == "RECEIPT"
        assert send(port, None, "/queue/t", b"default kept").command == "RECEIPT"
        port = start()
        assert receive(port, "dev", 1, "/queue/d") == [b"dev delayed"]
        assert receive(port, None, 1, "/queue/d") == [b"default delayed"]
        assert receive(port, "dev", 0, "/queue/q") == []
        assert receive(port, "dev", 1, "/queue/DLQ.q") == [b"dev expires"]
        assert receive(port, "dev", 0, "/queue/t") == []
        assert receive(port, None, 1, "/queue/q") == [b"default kept"]
        assert receive(port, None, 1, "/queue/t") == [b"default kept"]
        assert receive(port, None, 0, "/queue/DLQ.q") == []


def test_a_queue_policy_binds_only_its_vhost(store_kind: str, tmp_path: Path) -> None:
    with restarting(store_kind, tmp_path) as start:
        port = start()
        declare(port, "dev")
        declared = control(port, "dev", "declare/queue/b", **{"max-length": "1", "overflow": "reject-publish"})
        assert declared.command == "RECEIPT"
        assert send(port, "dev", "/queue/b", b"1").command == "RECEIPT"
        for _ in range(2):  # the declaration and the count come back from the store after a restart
            refused = send(port, "dev", "/queue/b", b"2")
            assert refused.command == "ERROR" and "is full" in refused["message"], refused
            assert send(port, None, "/queue/b", b"default").command == "RECEIPT"
            port = start()
        assert receive(port, "dev", 1, "/queue/b") == [b"1"]
        assert receive(port, None, 2, "/queue/b") == [b"default"] * 2


def browse(port: int, host: str | None, queue: str) -> list[bytes]:
    with connect(port, host) as client:
        client.frame("SUBSCRIBE", {"destination": queue, "id": "b", "browser": "true"})
        shown = []
        while (message := client.recv()).headers.get("browser") != "end":
            shown.append(message.body)
        return shown


def test_browsing_temp_queues_and_amq_queue_stay_in_their_vhost(store_kind: str, tmp_path: Path) -> None:
    with restarting(store_kind, tmp_path) as start:
        port = start()
        declare(port, "dev")
        for i in range(3):
            assert send(port, "dev", "/queue/br", b"dev %d" % i).command == "RECEIPT"
        assert send(port, None, "/queue/br", b"default").command == "RECEIPT"
        assert send(port, "dev", "/queue/devonly", b"x").command == "RECEIPT"
        port = start()  # browsing and /amq/queue read the store
        assert browse(port, "dev", "/queue/br") == [b"dev 0", b"dev 1", b"dev 2"]
        assert browse(port, None, "/queue/br") == [b"default"]
        with connect(port, None) as client:  # dev's queue is unknown in the default vhost
            client.frame("SUBSCRIBE", {"destination": "/amq/queue/devonly", "id": "a"})
            assert "'devonly'" in client.expect_error()["message"]
        assert receive(port, "dev", 1, "/amq/queue/devonly") == [b"x"]
        with connect(port, "dev") as requester, connect(port, "dev") as worker:
            assert request(requester, "SUBSCRIBE", {"destination": "/temp-queue/answers", "id": "t"}).command \
                == "RECEIPT"
            assert request(worker, "SUBSCRIBE", {"destination": "/queue/work", "id": "w"}).command == "RECEIPT"
            request(requester, "SEND", {"destination": "/queue/work", "reply-to": "/temp-queue/answers"}, b"q")
            asked = worker.recv()
            assert request(worker, "SEND", {"destination": asked["reply-to"]}, b"a").command == "RECEIPT"
            answer = requester.recv()
            assert (answer.body, answer["destination"]) == (b"a", "/temp-queue/answers")
        assert receive(port, None, 0, "/queue/work") == []


def test_purging_and_deleting_a_stream_stays_in_its_vhost(store_kind: str, tmp_path: Path) -> None:
    def entries(port: int, host: str | None, stream: str) -> list[bytes]:
        with connect(port, host) as client:
            client.frame("SUBSCRIBE", {"destination": stream, "id": "s", "x-stream-offset": "first"})
            shown = []
            try:
                while True:
                    shown.append(client.recv(0.5).body)
            except TimeoutError:
                return shown

    with restarting(store_kind, tmp_path) as start:
        port = start()
        declare(port, "dev")
        for host in (None, "dev"):
            for stream in ("/stream/p", "/stream/g"):
                assert send(port, host, stream, b"e").command == "RECEIPT"
        assert control(port, "dev", "purge/stream/p").command == "RECEIPT"
        assert control(port, "dev", "delete/stream/g").command == "RECEIPT"
        for _ in range(2):  # as done, then as stored
            assert entries(port, "dev", "/stream/p") == []
            assert entries(port, "dev", "/stream/g") == []
            assert entries(port, None, "/stream/p") == [b"e"]
            assert entries(port, None, "/stream/g") == [b"e"]
            port = start()


def test_the_definitions_file_declares_vhosts(make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    path = tmp_path / "definitions.toml"
    path.write_text('[[vhosts]]\nname = "staging"\n[[vhosts.exchanges]]\nname = "ring"\ntype = "consistent-hash"\n'
                    '[[vhosts.bindings]]\nexchange = "ring"\nqueue = "/queue/q"\n')
    thread = make_memory_broker(config=BrokerConfig(definitions=str(path)))
    with connect(thread.port, "staging") as client:
        assert request(client, "SEND", {"destination": "/exchange/ring/k"}, b"x").command == "RECEIPT"
    assert receive(thread.port, "staging", 1) == [b"x"]


# -- the permission matrix: user x vhost x configure/write/read -> allowed or denied ------------
NOTHING = "^$"
USERS = {
    # user: tags, {vhost: permission}
    "root": (["administrator"], {"/": Permission(), "dev": Permission()}),
    "dev-writer": ([], {"dev": Permission(NOTHING, "^/queue/", NOTHING)}),
    "split": ([], {"/": Permission(NOTHING, NOTHING, "^/queue/"), "dev": Permission("^/queue/", NOTHING, NOTHING)}),
    "reader": ([], {"/": Permission(NOTHING, NOTHING, ".*")}),
}
VHOSTS = ("/", "dev")
ACTIONS = {
    "configure": ("SEND", {"destination": "/control/purge/queue/q"}),
    "write": ("SEND", {"destination": "/queue/q"}),
    "read": ("SUBSCRIBE", {"destination": "/queue/q", "id": "1"}),
}
#: (user, vhost) -> the actions allowed; a vhost missing here is refused at CONNECT
ALLOWED = {
    ("root", "/"): {"configure", "write", "read"},
    ("root", "dev"): {"configure", "write", "read"},
    ("dev-writer", "dev"): {"write"},
    ("split", "/"): {"read"},
    ("split", "dev"): {"configure"},
    ("reader", "/"): {"read"},
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    from stompmq.storage.memory import MemoryStore

    path = tmp_path_factory.mktemp("users") / "users.toml"
    users = Users({name: User(name, hash_password("pw-" + name), tags, perms)
                   for name, (tags, perms) in USERS.items()})
    users.save(path)
    thread = BrokerThread(MemoryStore, settings=ServerSettings(port=0, users_file=str(path))).start()
    with connect(thread.port, None, login="root", passcode="pw-root") as client:
        assert request(client, "SEND", {"destination": "/control/declare/vhost/dev"}).command == "RECEIPT"
    yield thread
    thread.stop()


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("vhost", VHOSTS)
@pytest.mark.parametrize("user", sorted(USERS))
def test_permission_matrix_with_vhosts(secured: BrokerThread, user: str, vhost: str, action: str) -> None:
    allowed = ALLOWED.get((user, vhost))
    with RawClient(secured.port) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": vhost, "login": user, "passcode": "pw-" + user})
        if allowed is None:
            assert client.expect_error().body.decode() == f"access refused: no permissions on vhost {vhost}"
            return
        assert client.recv().command == "CONNECTED"
        command, headers = ACTIONS[action]
        reply = request(client, command, headers)
        if action in allowed:
            assert reply.command == "RECEIPT", reply
        else:
            resource = "/queue/q"
            assert reply.command == "ERROR", reply
            assert reply.body.decode() == (
                f"access refused: {action} access to {resource} in vhost {vhost} refused to user {user}"
            )
            client.assert_closed()


def test_declaring_a_vhost_needs_the_administrator_tag(secured: BrokerThread) -> None:
    with connect(secured.port, None, login="reader", passcode="pw-reader") as client:
        client.frame("SEND", {"destination": "/control/declare/vhost/mine", "receipt": "r"})
        error = client.expect_error()
        assert error.body.decode() == "access refused: declaring vhost 'mine' needs the administrator tag"
        assert error["receipt-id"] == "r"
