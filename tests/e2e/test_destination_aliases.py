"""Every name of a resource meets the same permission: each alias of a queue, topic, exchange
or stream, for each verb (SEND, SUBSCRIBE, the /control reads and changes), for a user the
resource is refused to and one it is granted to, through a real listening broker with a users
file.  The ERROR names the resource the destination resolved to, whatever the client wrote."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission
from stompmq.storage.memory import MemoryStore

from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient, RawFrame
from ..support.users import write_users

#: carol may do anything but touch the secret resources; dave may touch only those (and the
#: built-in exchanges, to bind them, and his durable subscriptions' queues).
SECRET = "^/(queue|topic|exchange|stream)/secret"
DAVE = SECRET + r"|^/exchange/amq\.|^/queue/amq\.subscription\.dave/"
PERMISSIONS = {
    "admin": Permission(),
    "carol": Permission(f"^(?!{SECRET[1:]})", f"^(?!{SECRET[1:]})", f"^(?!{SECRET[1:]})"),
    "dave": Permission(DAVE, DAVE, DAVE),
}
_receipts = itertools.count(1)


class Case(NamedTuple):
    action: str  # the permission the frame needs
    command: str
    headers: dict[str, str]  # "{n}" stands for the case's own secret name
    resource: str  # what the destination resolves to: the ERROR names it
    setup: tuple[tuple[str, dict[str, str]], ...] = ()  # what the admin does first


QUEUE = (("SEND", {"destination": "/queue/{n}"}),)  # so that /amq/queue/{n} exists
EXCHANGE = (("SEND", {"destination": "/control/declare/exchange/{n}", "type": "direct"}),)
BOUND = (("SEND", {"destination": "/control/bind/exchange/amq.direct", "queue": "/queue/{n}", "routing-key": "k"}),)
CASES = {
    # SEND: write
    "send /queue": Case("write", "SEND", {"destination": "/queue/{n}"}, "/queue/{n}"),
    "send /amq/queue": Case("write", "SEND", {"destination": "/amq/queue/{n}"}, "/queue/{n}", QUEUE),
    "send /topic": Case("write", "SEND", {"destination": "/topic/{n}"}, "/topic/{n}"),
    "send /exchange/amq.topic/KEY": Case("write", "SEND", {"destination": "/exchange/amq.topic/{n}"}, "/topic/{n}"),
    "send /exchange/amq.topic routing-key": Case(
        "write", "SEND", {"destination": "/exchange/amq.topic", "routing-key": "{n}"}, "/topic/{n}"),
    "send /exchange/NAME/KEY": Case("write", "SEND", {"destination": "/exchange/{n}/k"}, "/exchange/{n}", EXCHANGE),
    "send /stream": Case("write", "SEND", {"destination": "/stream/{n}"}, "/stream/{n}"),
    # SUBSCRIBE: read
    "subscribe /queue": Case("read", "SUBSCRIBE", {"destination": "/queue/{n}", "id": "s"}, "/queue/{n}"),
    "subscribe /amq/queue": Case("read", "SUBSCRIBE", {"destination": "/amq/queue/{n}", "id": "s"}, "/queue/{n}",
                                 QUEUE),
    "subscribe /topic": Case("read", "SUBSCRIBE", {"destination": "/topic/{n}", "id": "s"}, "/topic/{n}"),
    "subscribe /topic durable": Case(
        "read", "SUBSCRIBE", {"destination": "/topic/{n}", "id": "s", "durable": "true"}, "/topic/{n}"),
    "subscribe /exchange/amq.topic/PATTERN": Case(
        "read", "SUBSCRIBE", {"destination": "/exchange/amq.topic/{n}.#", "id": "s"}, "/topic/{n}.#"),
    "subscribe /exchange/NAME/KEY": Case(
        "read", "SUBSCRIBE", {"destination": "/exchange/{n}/k", "id": "s"}, "/exchange/{n}", EXCHANGE),
    "subscribe /stream": Case("read", "SUBSCRIBE", {"destination": "/stream/{n}", "id": "s"}, "/stream/{n}"),
    # /control reads: read on the target
    "count-msgs queue": Case("read", "SEND", {"destination": "/control/count-msgs/queue/{n}"}, "/queue/{n}"),
    "count-subscribers queue": Case(
        "read", "SEND", {"destination": "/control/count-subscribers/queue/{n}"}, "/queue/{n}"),
    "count-subscribers topic": Case(
        "read", "SEND", {"destination": "/control/count-subscribers/topic/{n}"}, "/topic/{n}"),
    "stats topic": Case("read", "SEND", {"destination": "/control/stats/topic/{n}"}, "/topic/{n}"),
    "list-bindings exchange": Case(
        "read", "SEND", {"destination": "/control/list-bindings/exchange/{n}"}, "/exchange/{n}", EXCHANGE),
    "stats exchange": Case("read", "SEND", {"destination": "/control/stats/exchange/{n}"}, "/exchange/{n}", EXCHANGE),
    "stream-offsets stream": Case(
        "read", "SEND", {"destination": "/control/stream-offsets/stream/{n}"}, "/stream/{n}"),
    # /control changes: configure on the target (and on the queue a binding names)
    "purge queue": Case("configure", "SEND", {"destination": "/control/purge/queue/{n}"}, "/queue/{n}"),
    "declare queue": Case("configure", "SEND", {"destination": "/control/declare/queue/{n}"}, "/queue/{n}"),
    "delete queue": Case("configure", "SEND", {"destination": "/control/delete/queue/{n}"}, "/queue/{n}"),
    "declare exchange": Case(
        "configure", "SEND", {"destination": "/control/declare/exchange/{n}", "type": "direct"}, "/exchange/{n}"),
    "delete exchange": Case(
        "configure", "SEND", {"destination": "/control/delete/exchange/{n}"}, "/exchange/{n}", EXCHANGE),
    "bind: the queue": Case("configure", "SEND", {"destination": "/control/bind/exchange/amq.direct",
                                                  "queue": "/queue/{n}", "routing-key": "k"}, "/queue/{n}"),
    "unbind: the queue": Case("configure", "SEND", {"destination": "/control/unbind/exchange/amq.direct",
                                                    "queue": "/queue/{n}", "routing-key": "k"}, "/queue/{n}", BOUND),
    "declare stream": Case("configure", "SEND", {"destination": "/control/declare/stream/{n}"}, "/stream/{n}"),
    "purge stream": Case("configure", "SEND", {"destination": "/control/purge/stream/{n}"}, "/stream/{n}"),
    "delete stream": Case("configure", "SEND", {"destination": "/control/delete/stream/{n}"}, "/stream/{n}"),
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    users = write_users(tmp_path_factory.mktemp("users") / "users.toml", PERMISSIONS)
    with BrokerThread(MemoryStore, settings=ServerSettings(port=0, users_file=users)).start() as thread:
        yield thread


def request(client: RawClient, command: str, headers: dict[str, str]) -> RawFrame:
    """The RECEIPT or ERROR answering ``command`` (MESSAGEs before it are skipped)."""
    receipt = f"r{next(_receipts)}"
    client.frame(command, {**headers, "receipt": receipt})
    while True:
        reply = client.recv()
        if reply.command == "ERROR" or reply.headers.get("receipt-id") == receipt:
            return reply


def session(broker: BrokerThread, name: str) -> RawClient:
    client = RawClient(broker.port)
    client.connect(login=name, passcode="pw-" + name)
    return client


def fill(headers: dict[str, str], name: str) -> dict[str, str]:
    return {key: value.replace("{n}", name) for key, value in headers.items()}


@pytest.mark.parametrize("user", ["carol", "dave"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_alias_meets_the_permission_of_its_resource(secured: BrokerThread, case: str, user: str) -> None:
    action, command, headers, resource, setup = CASES[case]
    name = f"secret.{user}.{case.replace(' ', '-').replace('/', '')}"
    with session(secured, "admin") as admin:
        for setup_command, setup_headers in setup:
            assert request(admin, setup_command, fill(setup_headers, name)).command == "RECEIPT"
    with session(secured, user) as client:
        reply = request(client, command, fill(headers, name))
        if user == "dave":
            assert reply.command == "RECEIPT", reply
        else:
            assert reply.command == "ERROR", reply
            target = resource.replace("{n}", name)
            assert reply.body.decode() == f"access refused: {action} access to {target} in vhost / refused to user carol"
            client.assert_closed()


def reply_token(owner: RawClient) -> str:
    """The token of a temporary queue of ``owner`` (it lives while ``owner`` is connected)."""
    queue = f"/queue/tokens.{next(_receipts)}"
    owner.frame("SUBSCRIBE", {"destination": "/temp-queue/answers", "id": "answers"})
    owner.frame("SUBSCRIBE", {"destination": queue, "id": queue})
    owner.frame("SEND", {"destination": queue, "reply-to": "/temp-queue/answers"})
    message = owner.recv()
    assert message.command == "MESSAGE", message
    return message["reply-to"][len("/reply-queue/"):]


#: The temporary queues' names, as (action, command, headers with "{t}" for the token, resource).
TEMPORARY = {
    "send /reply-queue": ("write", "SEND", {"destination": "/reply-queue/{t}"}, "/reply-queue/{t}"),
    "send /queue/amq.gen.reply": ("write", "SEND", {"destination": "/queue/amq.gen.reply/{t}"}, "/reply-queue/{t}"),
    "send /amq/queue/amq.gen.reply": (
        "write", "SEND", {"destination": "/amq/queue/amq.gen.reply/{t}"}, "/reply-queue/{t}"),
    "count-msgs reply queue": (
        "read", "SEND", {"destination": "/control/count-msgs/queue/amq.gen.reply/{t}"}, "/reply-queue/{t}"),
    "purge reply queue": (
        "configure", "SEND", {"destination": "/control/purge/queue/amq.gen.reply/{t}"}, "/reply-queue/{t}"),
    "send /temp-queue": ("write", "SEND", {"destination": "/temp-queue/{t}"}, "/temp-queue/{t}"),
    "subscribe /temp-queue": ("read", "SUBSCRIBE", {"destination": "/temp-queue/{t}", "id": "s"}, "/temp-queue/{t}"),
}


@pytest.mark.parametrize("case", sorted(TEMPORARY))
def test_temporary_queues_meet_the_permission_of_their_resource(secured: BrokerThread, case: str) -> None:
    """dave's patterns admit neither /reply-queue/ nor /temp-queue/, carol's both: the queue
    behind a reply-queue name is ``/reply-queue/TOKEN`` by any of its names."""
    action, command, headers, resource = TEMPORARY[case]
    with session(secured, "admin") as owner:
        token = reply_token(owner)
        filled = {key: value.replace("{t}", token) for key, value in headers.items()}
        with session(secured, "carol") as carol:
            assert request(carol, command, filled).command == "RECEIPT"
        with session(secured, "dave") as dave:
            reply = request(dave, command, filled)
            assert reply.command == "ERROR", reply
            target = resource.replace("{t}", token)
            assert reply.body.decode() == f"access refused: {action} access to {target} in vhost / refused to user dave"
