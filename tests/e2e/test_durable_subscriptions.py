"""Durable topic subscriptions belong to the user (and client-id) that made them: through a
real listening broker with a users file, another user naming the same subscription id gets a
subscription of its own (or an ERROR when its permissions do not admit it), never the owner's
messages or binding.  Plus what UNSUBSCRIBE does to one, and what becomes of the queues of
durable subscriptions stored under the older naming."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.auth import Permission
from stompmq.storage.memory import MemoryStore

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.users import NOTHING, write_users

PERMISSIONS = {
    "admin": Permission(),
    "alice": Permission(),
    # bob may read the public topics and his own durable subscriptions' queues
    "bob": Permission(NOTHING, NOTHING, r"^/topic/public|^/queue/amq\.subscription\.bob[,/]"),
    # mallory may read the public topics only: a durable subscription of hers is refused
    "mallory": Permission(NOTHING, NOTHING, "^/topic/public"),
}
#: The ways to name a durable subscription: RabbitMQ's two headers and ActiveMQ's
FORMS = ["activemq", "durable", "persistent"]


def durable(form: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(CONNECT headers, SUBSCRIBE/UNSUBSCRIBE headers) of the durable subscription ``name``."""
    if form == "activemq":
        return {"client_id": "app-1"}, {"id": name, "activemq.subscriptionName": name}
    return {}, {"id": name, form: "true"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    users = write_users(tmp_path_factory.mktemp("users") / "users.toml", PERMISSIONS)
    with BrokerThread(MemoryStore, settings=ServerSettings(port=0, users_file=users)).start() as thread:
        yield thread


def user(broker: BrokerThread, name: str, **connect: str) -> Client:
    return Client(broker.port, login=name, passcode="pw-" + name, **connect)


def publish(broker: BrokerThread, topic: str, body: str) -> None:
    with user(broker, "admin") as admin:
        admin.send_to(topic, body)


def resubscribe(broker: BrokerThread, form: str, name: str, topic: str) -> Client:
    """alice's durable subscription ``name`` to ``topic``, made or taken up again."""
    connect, headers = durable(form, name)
    client = user(broker, "alice", **connect)
    client.subscribe(topic, ack="client-individual", **headers)
    return client


def away(broker: BrokerThread, form: str, name: str, topic: str) -> None:
    """alice makes a durable subscription to ``topic`` and disconnects."""
    resubscribe(broker, form, name, topic).disconnect()


@pytest.mark.parametrize("form", FORMS)
def test_another_user_naming_the_same_subscription_is_refused_without_read_on_its_own_queue(
    secured: BrokerThread, form: str
) -> None:
    topic, name = f"/topic/dur9.{form}", f"dsub9-{form}"
    away(secured, form, name, topic)
    publish(secured, topic, "for alice")
    connect, headers = durable(form, name)
    with user(secured, "mallory", **connect) as mallory:
        mallory.frame("SUBSCRIBE", {"destination": "/topic/public.x", "receipt": "r", **headers})
        error = mallory.expect_error()
        assert error.body.startswith(b"access refused: read access to /queue/amq.subscription.mallory"), error
    with resubscribe(secured, form, name, topic) as alice:
        assert alice.message().body == b"for alice"


@pytest.mark.parametrize("form", FORMS)
def test_the_same_subscription_id_from_another_user_is_another_subscription(secured: BrokerThread, form: str) -> None:
    topic, public, name = f"/topic/dur10.{form}", f"/topic/public.{form}", f"dsub10-{form}"
    away(secured, form, name, topic)
    publish(secured, topic, "for alice")
    connect, headers = durable(form, name)
    with user(secured, "bob", **connect) as bob:
        bob.subscribe(public, ack="client-individual", **headers)
        bob.expect_nothing()  # alice's message stays hers
        publish(secured, public, "public")
        assert bob.message().body == b"public"
        bob.request("UNSUBSCRIBE", headers)  # deletes bob's, not alice's
    publish(secured, topic, "also for alice")
    with resubscribe(secured, form, name, topic) as alice:  # still bound to her topic, not bob's
        assert [m.body for m in alice.messages(2)] == [b"for alice", b"also for alice"]
        alice.expect_nothing()


@pytest.mark.parametrize("form", FORMS)
def test_unsubscribe_with_the_durable_header_deletes_a_plain_one_detaches(secured: BrokerThread, form: str) -> None:
    topic, name = f"/topic/dur11.{form}", f"dsub11-{form}"
    headers = durable(form, name)[1]
    with resubscribe(secured, form, name, topic) as alice:
        alice.request("UNSUBSCRIBE", {"id": headers["id"]})  # plain: detaches, keeps collecting
        publish(secured, topic, "meanwhile")
        alice.subscribe(topic, ack="client-individual", **headers)
        msg = alice.message()
        assert msg.body == b"meanwhile"
        alice.ack(msg)
        alice.request("UNSUBSCRIBE", headers)  # with the durable header: deleted
        publish(secured, topic, "after the delete")
        alice.subscribe(topic, ack="client-individual", **headers)
        alice.expect_nothing()


def test_durable_subscriptions_of_the_ownerless_naming_are_unbound_at_start_and_keep_their_messages(
    tmp_path: Path,
) -> None:
    """A queue ``amq.durable.ID`` bound to amq.topic is what a durable subscription was before it
    had an owner; nobody can resume it now, so a restart unbinds it (it would collect copies
    forever) and keeps its messages for an operator."""
    make = make_store_factory("sqlite", tmp_path)
    with BrokerThread(make).start() as broker, Client(broker.port) as c:
        c.request("SEND", {"destination": "/control/bind/exchange/amq.topic", "queue": "/queue/amq.durable.dsub9",
                           "routing-key": "dur9"})
        c.send_to("/topic/dur9", "stored before the upgrade")
    with BrokerThread(make).start() as broker, Client(broker.port) as c:
        assert c.request("SEND", {"destination": "/control/list-bindings/exchange/amq.topic"})["num-bindings"] == "0"
        c.send_to("/topic/dur9", "not collected any more")
        c.subscribe("/topic/dur9", "dsub9", durable="true")  # a new subscription of its own
        c.expect_nothing()
        assert c.request("SEND", {"destination": "/control/count-msgs/queue/amq.durable.dsub9"})["num-messages"] == "1"
    with BrokerThread(make).start() as broker, Client(broker.port) as c:  # the new one is kept
        bindings = c.request("SEND", {"destination": "/control/list-bindings/exchange/amq.topic"})
        assert (bindings["num-bindings"], bindings["binding-0-queue"]) == ("1", "/queue/amq.subscription./dsub9")
