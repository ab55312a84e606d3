"""Temporary reply queues (/temp-queue/NAME, reply-to rewriting, /reply-queue/TOKEN) against a real
listening broker on every store: raw frames, and the RPC example of docs/destinations.md run with stomp.py."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig

from ..support.stompclient import Client
from ..support.waiting import wait_sessions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_reply_to_a_temp_queue_is_rewritten_and_the_answer_comes_back(broker):
    requester, worker = Client(broker.port), Client(broker.port)
    requester.subscribe("/temp-queue/answers")
    worker.subscribe("/queue/work", ack="client-individual")
    requester.request("SEND", {"destination": "/queue/work", "reply-to": "/temp-queue/answers"}, b"q")
    request = worker.message()
    reply_to = request["reply-to"]
    assert reply_to.startswith("/reply-queue/" + broker.broker.store.node_id) and reply_to.endswith(".answers")
    worker.request("SEND", {"destination": reply_to}, b"a")
    answer = requester.message()
    assert answer.body == b"a"
    assert answer["destination"] == "/temp-queue/answers"


def test_each_connection_has_its_own_temp_queue_of_one_name(broker):
    a, b = Client(broker.port), Client(broker.port)
    a.subscribe("/temp-queue/x")
    b.subscribe("/temp-queue/x")
    a.request("SEND", {"destination": "/temp-queue/x"}, b"for-a")
    assert a.message().body == b"for-a"
    b.expect_nothing()


def test_replies_sent_before_the_owner_subscribes_wait_for_it(broker):
    owner, other = Client(broker.port), Client(broker.port)
    owner.request("SEND", {"destination": "/queue/w", "reply-to": "/temp-queue/r"}, b"q")
    other.subscribe("/queue/w")
    reply_to = other.message()["reply-to"]
    other.request("SEND", {"destination": reply_to}, b"early")
    owner.subscribe("/temp-queue/r")
    assert owner.message().body == b"early"


def test_a_temp_queue_dies_with_its_connection(broker):
    owner, other = Client(broker.port), Client(broker.port)
    owner.request("SEND", {"destination": "/queue/w", "reply-to": "/temp-queue/r"}, b"q")
    other.subscribe("/queue/w")
    reply_to = other.message()["reply-to"]
    other.request("SEND", {"destination": reply_to}, b"waiting")  # stored, never read
    queue = "amq.gen.reply/" + reply_to[len("/reply-queue/"):]
    assert other.request("SEND", {"destination": "/control/count-msgs/queue/" + queue})["num-messages"] == "1"
    owner.request("DISCONNECT")
    owner.close()
    wait_sessions(broker, 1)
    other.request("SEND", {"destination": reply_to}, b"too late")  # dropped: the queue is gone
    assert other.request("SEND", {"destination": "/control/count-msgs/queue/" + queue})["num-messages"] == "0"
    assert broker.call(lambda: broker.broker.router.temps.owners) == {}
    assert broker.call(lambda: broker.broker.router.temps.dropped) == 1


@pytest.mark.parametrize(
    "command, headers, expected",
    [
        ("SUBSCRIBE", {"destination": "/reply-queue/1.x", "id": "1"}, "cannot SUBSCRIBE"),
        ("SUBSCRIBE", {"destination": "/temp-queue/", "id": "1"}, "empty name"),
        ("SEND", {"destination": "/queue/q", "reply-to": "/temp-queue/"}, "reply-to"),
        ("SEND", {"destination": "/temp-queue/" + "n" * 243}, "too long"),
    ],
)
def test_bad_temp_queue_frames_are_errors(memory_broker, command, headers, expected):
    with Client(memory_broker.port) as c:
        c.frame(command, headers)
        error = c.next()
        assert error.command == "ERROR" and expected in error["message"], error


def test_rpc_example_runs(broker):
    """The README's RPC example (examples/rpc_worker.py, examples/rpc_client.py) with stomp.py."""
    port = str(broker.port)
    worker = subprocess.Popen([sys.executable, str(EXAMPLES / "rpc_worker.py"), port], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        client = subprocess.run([sys.executable, str(EXAMPLES / "rpc_client.py"), port, "alpha", "beta"],
                                capture_output=True, text=True, timeout=30)
        assert client.returncode == 0, client.stderr
        assert client.stdout.splitlines() == ["alpha -> ALPHA", "beta -> BETA"]
    finally:
        worker.terminate()
        worker.communicate(timeout=10)  # reads its stdout to the end, and closes it
    wait_sessions(broker, 0)
    assert broker.call(lambda: broker.broker.router.temps.owners) == {}  # the client's temp queue went with it


def test_a_reply_to_that_is_not_a_temp_queue_is_forwarded_as_is(memory_broker):
    with Client(memory_broker.port) as c:
        c.subscribe("/queue/q")
        c.request("SEND", {"destination": "/queue/q", "reply-to": "/queue/answers"}, b"x")
        assert c.message()["reply-to"] == "/queue/answers"


def reply_queue_of(port: int) -> str:
    """The reply-queue name a new connection's ``reply-to:/temp-queue/answers`` becomes."""
    with Client(port) as c:
        c.subscribe("/queue/tokens")
        c.request("SEND", {"destination": "/queue/tokens", "reply-to": "/temp-queue/answers"})
        return c.message()["reply-to"]


def test_reply_queue_names_carry_128_random_bits(broker):
    """Consecutive connections once got /reply-queue/486051.answers, 486053.answers: anyone could
    guess another client's replies' name.  Now the part before the name is 128 random bits."""
    names = [reply_queue_of(broker.port) for _ in range(8)]
    randoms = [name.removesuffix(".answers").rsplit(".", 1)[-1] for name in names]
    assert len(set(randoms)) == len(randoms)
    for random in randoms:
        assert len(base64.urlsafe_b64decode(random + "==")) >= 16, names


def test_the_engine_takes_its_reply_token_from_its_config(make_memory_broker):
    """The engine reads no randomness itself: the source is BrokerConfig.reply_token."""
    broker = make_memory_broker(config=BrokerConfig(reply_token=lambda: "chosen"))
    assert reply_queue_of(broker.port) == "/reply-queue/chosen.answers"


def test_control_list_queues_leaves_out_reply_queues(memory_broker):
    with Client(memory_broker.port) as owner, Client(memory_broker.port) as other:
        owner.subscribe("/temp-queue/answers")
        other.send_to("/queue/listed")
        listing = other.request("SEND", {"destination": "/control/list-queues"})
        assert [listing[f"queue-{i}-name"] for i in range(int(listing["num-queues"]))] == ["listed"]


@pytest.mark.parametrize("alias", ["/queue/amq.gen.reply/", "/amq/queue/amq.gen.reply/"])
def test_only_its_owner_consumes_a_temp_queue(memory_broker, alias):
    """The reply-queue name lets anyone told it write to the queue, never read it."""
    with Client(memory_broker.port) as owner, Client(memory_broker.port) as other:
        owner.subscribe("/temp-queue/answers")
        owner.request("SEND", {"destination": "/queue/w", "reply-to": "/temp-queue/answers"})
        other.subscribe("/queue/w")
        token = other.message()["reply-to"][len("/reply-queue/"):]
        other.frame("SUBSCRIBE", {"destination": alias + token, "id": "steal"})
        assert "private queue" in other.expect_error()["message"]
        with Client(memory_broker.port) as replier:
            replier.send_to(alias + token, "reply by another name")
        assert owner.message().body == b"reply by another name"
