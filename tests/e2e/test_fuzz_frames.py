"""Random and mutated frames against a live broker process, with other clients working beside it.

Each case opens a connection and throws frames built from a seeded generator at it: known and
unknown commands, headers with extreme numbers (past 64 bits, thousands of digits, NaN, signs,
non-ASCII digits), broken escapes, huge values, and valid frames with bytes flipped, dropped or
cut.  Between cases a producer and a consumer on their own long-lived connections send and
receive a receipted message.  The promises: the broker process never exits, the others keep
their receipts (each within RECEIPT_WAIT), every ERROR says what was wrong (a ``message``
header that is never "internal error"), a connection the broker closes got an ERROR first,
and the log holds no traceback.

Quick in CI (``CASES``); ``FUZZ_CASES=5000`` runs a longer one, ``FUZZ_SEED``
another seed (a failure names its seed and case, and the frames it sent); not STOMPMQ_*
names, which the broker process would take for settings and refuse.  Soaked: seeds 1, 2 and 3 at
5,000 cases each passed (about 40 s each); at 1,000 cases seeds 1 and 2 caught the faults the range
checks fixed (a 5,000-digit content-length closed without ERROR, a delay of 40 nines stalled the store).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from ..support.broker_process import BrokerProcess
from ..support.rawclient import RawClient
from ..support.stompclient import Client

SEED = int(os.environ.get("FUZZ_SEED", "39"))
CASES = int(os.environ.get("FUZZ_CASES", "600"))
#: Seconds a bystander's receipt may take (a case's frames are small: it takes milliseconds).
RECEIPT_WAIT = 5.0
#: Seconds a case waits for the broker's answers after its last byte.
ANSWER_WAIT = 0.3

#: Client commands, SEND and SUBSCRIBE most often (they carry the numbers), with the header each
#: needs to get as far as its numbers (left out one time in ten).
COMMANDS = {"SEND": 10, "SUBSCRIBE": 5, "UNSUBSCRIBE": 1, "ACK": 1, "NACK": 1, "BEGIN": 1, "COMMIT": 1, "ABORT": 1}
NEEDS = {"SUBSCRIBE": "id", "UNSUBSCRIBE": "id", "ACK": "id", "NACK": "id", "BEGIN": "transaction",
         "COMMIT": "transaction", "ABORT": "transaction"}
#: Commands no client may send (one frame in ten): each is an ERROR.
BAD_COMMANDS = ["STOMP", "CONNECT", "FOO", "send", "SEND ", "", "MESSAGE", "RECEIPT", "ERROR", "\u00e9"]
DESTINATIONS = ["/queue/fuzz", "/topic/fuzz", "/stream/fuzz", "/exchange/fuzzx", "/temp-queue/t", "/amq/queue/fz",
                "/control/declare/queue/fuzzq", "/control/declare/stream/fuzzs", "/control/declare/exchange/fuzzx",
                "/control/bind/exchange/fuzzx", "/control/count-msgs/queue/fuzz", "/control/list-queues",
                "/control/stream-group/stream/fuzzs", "/control/stream-offsets/stream/fuzzs", "/control/nope",
                "/queue/", "queue/x", "/queue/" + "q" * 300, "/topic/a*", "/exchange/amq.topic/a.#", ""]
NUMERIC = ["priority", "ttl", "delay", "expires", "deliver-at", "AMQ_SCHEDULED_DELAY", "ack-timeout", "prefetch",
           "activemq.prefetchSize", "prefetch-count", "message-ttl", "max-length", "max-length-bytes", "max-age",
           "max-bytes", "weight", "x-stream-offset", "x-stream-end", "x-producer-seq", "limit",
           "offset", "timestamp", "heart-beat"]
OTHER = ["id", "receipt", "transaction", "ack", "subscription", "message-id", "x-stream-group", "x-producer-id",
         "overflow", "dead-letter", "browser", "persistent", "reply-to", "type", "queue", "activemq.exclusive",
         "x-single-active-consumer", "JMSXGroupID", "JMSXGroupSeq", "durable-subscription-name", "selector"]


def extreme_number(rng: random.Random) -> str:
    return rng.choice([
        "0", "1", "9", "10", "-1", "-0", "+5", " 5", "5 ", "5_0", "\u00b2", "\u0661", "0x10", "1e308", "1e-308", "nan",
        "inf", "-inf", "1.5", "9" * 19, "9" * 20, "9" * 40, "9" * rng.choice([400, 4300, 5000, 20000]),
        str(2**31), str(2**53 + 1), str(2**63 - 1), str(2**63), str(2**64), "timestamp=1e306", "timestamp=-1",
        "timestamp=nan", "first", "last", "next", "1,1", "0," + "9" * 5000, "", "00000000000000000000001",
    ])


def text_value(rng: random.Random) -> str:
    if rng.random() < 0.05:  # a broken escape (an ERROR for the whole frame)
        return rng.choice(["broken\\x", "trailing\\", "\\t"])
    return rng.choice([
        "x", "", "true", "false", "TRUE", "client", "client-individual", "auto", "drop-head", "reject-publish",
        "a\\nb", "a\\cb", "a\\\\b", "\u00e9\u00e8", "v" * rng.choice([100, 10_000, 70_000]),
        "/queue/fuzz", "/stream/fuzz", "g1", "-1", "1", "first", "timestamp=0",
    ])


def random_frame(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        command = rng.choice(BAD_COMMANDS)
    else:
        command = rng.choices(list(COMMANDS), weights=list(COMMANDS.values()))[0]
    headers: list[tuple[str, str]] = []
    if command in NEEDS and rng.random() < 0.9:
        headers.append((NEEDS[command], rng.choice(["1", "2", "t"])))
    if rng.random() < 0.9:
        headers.append(("destination", rng.choice(DESTINATIONS)))
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.6:
            headers.append((rng.choice(NUMERIC), extreme_number(rng)))
        else:
            headers.append((rng.choice(OTHER), text_value(rng)))
    if rng.random() < 0.05:  # (a wrong one leaves the parser out of step: its ERROR ends the case)
        headers.append(("content-length", extreme_number(rng)))
    if rng.random() < 0.05:
        headers.append((rng.choice(["bad\\xname", "a:b", "", "h" * 2000]), "v"))
    body = rng.choice([b"", b"body", b"\x01\x02", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))])
    if b"\x00" in body and not any(name == "content-length" for name, _ in headers):
        body = body.replace(b"\x00", b"")
    data = (command + "\n" + "".join(f"{name}:{value}\n" for name, value in headers) + "\n").encode() + body + b"\x00"
    return mutate(rng, data) if rng.random() < 0.05 else data


def mutate(rng: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not raw:
            break
        i = rng.randrange(len(raw))
        op = rng.random()
        if op < 0.4:
            raw[i] = rng.getrandbits(8)
        elif op < 0.6:
            del raw[i]
        elif op < 0.8:
            raw[i:i] = rng.choice([b"\n", b":", b"\\", b"\x00", b"\r", b"\xff"])
        else:
            del raw[i:]
    return bytes(raw)


def run_case(port: int, rng: random.Random) -> tuple[list[bytes], list[tuple[str, dict[str, str]]], bool]:
    """One connection's frames; what came back, and whether the broker closed it."""
    sent: list[bytes] = []
    if rng.random() < 0.1:
        sent.append(random_frame(rng))  # before (or instead of) CONNECT
    else:
        version = rng.choice(["1.2", "1.2", "1.2", "1.1", "1.0", "1.2,1.1", "2.0"])
        headers = {"accept-version": version, "host": "localhost" if rng.random() < 0.95 else "nope"}
        if rng.random() < 0.3:
            headers["heart-beat"] = extreme_number(rng) + "," + extreme_number(rng)
        sent.append(("CONNECT\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n\x00").encode())
    sent.extend(random_frame(rng) for _ in range(rng.randint(1, 12)))
    received: list[tuple[str, dict[str, str]]] = []
    closed = False
    with RawClient(port) as c:
        try:
            for data in sent:
                c.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + ANSWER_WAIT
        while time.monotonic() < deadline:
            try:
                frame = c.recv(max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
            except (EOFError, ConnectionResetError):
                closed = True
                break
            received.append((frame.command, dict(frame.headers)))
            if frame.command == "ERROR":
                c.assert_closed(2.0)
                closed = True
                break
    return sent, received, closed


def test_fuzzed_frames_never_hurt_the_broker_nor_the_others(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    with BrokerProcess(tmp_path / "fuzz.db").start() as broker, \
            Client(broker.port) as producer, Client(broker.port) as consumer:
        consumer.subscribe("/queue/bystander", "b", ack="client-individual")
        for case in range(CASES):
            sent, received, closed = run_case(broker.port, rng)
            where = f"seed {SEED} case {case}: sent {[s[:300] for s in sent]!r}, got {received!r}"
            assert broker.running, f"the broker exited: {where}\n{broker.stderr[-3000:]}"
            for command, headers in received:
                if command == "ERROR":
                    message = headers.get("message", "")
                    assert message and "internal error" not in message, where
            if closed and not any(s.startswith(b"DISCONNECT") for s in sent):
                assert received and received[-1][0] == "ERROR", f"closed without an ERROR: {where}"
            if case % 5 == 0:
                started = time.monotonic()
                producer.send_to("/queue/bystander", f"m{case}")
                assert time.monotonic() - started < RECEIPT_WAIT, where
                got = consumer.message(RECEIPT_WAIT)
                assert got.body == f"m{case}".encode(), where
                consumer.ack(got)
        assert broker.running
        log = broker.stderr
    assert "Traceback" not in log and "internal error" not in log, log[-5000:]


def test_the_generator_is_seeded() -> None:
    assert [random_frame(random.Random(7)) for _ in range(3)] == [random_frame(random.Random(7)) for _ in range(3)]
