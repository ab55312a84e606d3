"""The restart contract's workload: one broker on SQLite, every kind of message, consumers that
come and go, and a seeded schedule of SIGTERM and ``kill -9`` with restarts.

``run(seed, restarts, workdir)`` starts the broker, a producer per kind of message and its
consumers (threads, each with a random generator seeded from the run's seed and its name), stops
and restarts the broker as the schedule says, then drains: consumers stay and ACK at once until
every receipted message is consumed and the queues are empty.  The ``History`` it returns is judged
by tests/support/restart_history.py.  The schedule is replayable from the seed; the interleaving of
the threads is not, which is why the checks reason from each event's time.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .broker_process import BrokerProcess, Peer
from .rawclient import RawFrame
from .restart_history import CLIENT_MODES, Event, Facts, History, Violation, violations
from .waiting import pace, poll

#: Errors a client sees when the broker goes away under it.
GONE = (OSError, EOFError, AssertionError)
#: Seconds a client waits for a frame before it looks at what else to do.
TICK = 0.2
#: Seconds a dropping client waits for its socket to have more, once its buffer is empty
#: (``Subscription.take_arrived``): what the broker wrote is there already, on loopback.
ARRIVED = 0.001
#: Seconds the drain may take once the schedule is over (delays of a few seconds, redeliveries).
DRAIN = 60.0
#: Mean seconds between a producer's SENDs.
GAP = 0.08
#: The bounded queue's ``max-length`` (``overflow: reject-publish``).
MAX_LENGTH = 5


@dataclass(frozen=True)
class Kind:
    """One kind of message: where it is sent, how many consumers take it and how."""

    label: str
    dest: str
    consumers: int
    modes: tuple[str, ...]
    prefetch: int | None = None  # None: a random 1..10 per subscription
    sub_headers: dict[str, str] = field(default_factory=dict)
    sub_id: str | None = None  # a fixed subscription id (a durable subscription's name)
    window: int = 4  # receipted SENDs a producer keeps outstanding
    ack_lag: float = 1.0  # the longest a client-ack consumer waits before it ACKs


KINDS = (
    Kind("plain", "/queue/rc.plain", 2, ("auto", "client", "client-individual")),
    Kind("prio", "/queue/rc.prio", 1, ("client-individual", "client"), prefetch=1),
    Kind("ttl", "/queue/rc.ttl", 1, ("auto", "client-individual"), prefetch=1),
    Kind("delayed", "/queue/rc.delayed", 2, ("auto", "client-individual")),
    Kind("tx", "/queue/rc.tx", 1, ("client-individual",)),
    Kind("group", "/queue/rc.group", 3, ("auto", "client-individual")),
    Kind("durable", "/topic/rc.durable", 1, ("client-individual", "auto"), sub_headers={"durable": "true"},
         sub_id="rc-durable"),
    Kind("stream", "/stream/rc.log", 1, ("auto",)),
    Kind("bounded", "/queue/rc.bounded", 1, ("client-individual",), window=1, ack_lag=2.0),
    Kind("exclusive", "/queue/rc.excl", 2, ("auto", "client-individual"), sub_headers={"activemq.exclusive": "true"}),
)


def message(kind: Kind, rng: random.Random) -> tuple[dict[str, str], dict[str, object], bool]:
    """(SEND headers, what the history notes of it, whether it asks for a receipt) of one message."""
    if kind.label == "plain":
        headers = {"persistent": "true"} if rng.random() < 0.5 else {}
        return headers, {}, rng.random() < 0.8
    if kind.label == "prio":
        priority = rng.randrange(10)
        return {"priority": str(priority)}, {"priority": priority}, True
    if kind.label == "ttl":
        ttl = rng.choice([150, 400, 1000, 2500])
        return {"ttl": str(ttl)}, {"ttl": ttl}, True
    if kind.label == "delayed":
        delay = rng.randrange(100, 4000)
        return {"delay": str(delay)}, {"delay": delay}, True
    if kind.label == "group":
        group = f"g{rng.randrange(4)}"
        return {"JMSXGroupID": group}, {"group": group}, True
    if kind.label == "bounded":
        return {}, {"max_length": MAX_LENGTH}, True
    return {}, {}, True


@dataclass(frozen=True)
class Step:
    """One stop and restart: wait, stop (SIGTERM, kill -9, or kill -9 then again while it starts),
    stay down, start."""

    wait: float
    how: str
    down: float
    early: float = 0.0  # for "kill-starting": seconds after the spawn the second kill comes


def schedule(seed: int, restarts: int) -> list[Step]:
    rng = random.Random(seed)
    steps = []
    for _ in range(restarts):
        how = rng.choice(["term", "kill", "kill", "kill-starting"])
        steps.append(Step(round(rng.uniform(1.0, 5.0), 2), how, round(rng.uniform(0.0, 1.5), 2),
                          round(rng.uniform(0.05, 1.0), 2) if how == "kill-starting" else 0.0))
    return steps


#: A SEND no client made (a body the workload does not know): no info.
STILL = Event(-1, 0.0, "send")


@dataclass
class Outcome:
    seed: int
    steps: list[Step]
    history: History
    violations: list[Violation]
    seconds: float

    @property
    def restarts(self) -> int:
        return sum(1 for e in self.history.events if e.kind == "ready") - 1

    def counts(self) -> dict[str, int]:
        """How much of each thing happened: so a quiet run is seen to be quiet."""
        kinds = ("send", "receipted", "refused", "delivered", "acked", "stop", "tx-aborted", "tx-dropped", "commit-sent")
        counts = {k: sum(1 for e in self.history.events if e.kind == k) for k in kinds}
        facts = Facts(list(self.history.events))
        redelivered = [b for b, ds in facts.deliveries.items() if len(ds) > 1]
        counts["redelivered"] = len(redelivered)
        counts["expired"] = sum(1 for b in facts.receipted if "ttl" in facts.sends[b].info and not facts.deliveries.get(b))
        counts["delayed-delivered"] = sum(1 for b in facts.deliveries if "delay" in facts.sends.get(b, STILL).info)
        return counts

    def report(self) -> str:
        """What broke and the history of the messages concerned (every stop and start included)."""
        lines = [f"seed {self.seed}: {self.restarts} restarts in {self.seconds:.0f} s, {self.counts()}",
                 f"schedule {self.steps}"]
        lines += [f"VIOLATION {v.check}: {v.what} (e.g. {sorted(v.bodies)[:6]} {sorted(v.subs)[:4]})"
                  for v in self.violations]
        if self.violations:
            lines += ["history of the messages concerned:", self.history.excerpt(self.violations)]
        return "\n".join(lines)


class Run:
    """One seed's run: the broker process, the clients' threads and what they saw."""

    def __init__(self, seed: int, workdir: Path) -> None:
        self.seed = seed
        self.broker = BrokerProcess(workdir / f"restart-{seed}.db", "--http-port", "0")
        self.history = History()
        self.stop_producing = threading.Event()
        self.draining = threading.Event()
        self.stop_consuming = threading.Event()
        self.ids = itertools.count(1)

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}/{name}")

    def connect(self, stop: threading.Event) -> Peer | None:
        """A connection once the broker answers; None if ``stop`` came first."""
        while not stop.is_set():
            try:
                return Peer(self.broker.port)
            except GONE:
                stop.wait(0.1)
        return None

    def guarded(self, target: Callable[[], None]) -> Callable[[], None]:
        """``target``, with anything unexpected it raises recorded as a violation of the harness."""
        def body() -> None:
            try:
                target()
            except Exception:
                self.history.add("client-crash", error=traceback.format_exc(limit=4))
        return body

    # -- producers -----------------------------------------------------------------------------
    def produce(self, kind: Kind) -> None:
        """SENDs of ``kind`` (receipted ones up to ``kind.window`` outstanding; transactions for
        "tx") until ``stop_producing``; then the answers still due (a lost connection's stay unknown)."""
        rng = self.rng(f"{kind.label}-producer")
        n = 0
        while not self.stop_producing.is_set():
            peer = self.connect(self.stop_producing)
            if peer is None:
                return
            outstanding: dict[str, list[str]] = {}  # receipt id -> the bodies it answers for
            until = float("inf")
            next_at = time.monotonic()
            try:
                while outstanding or not self.stop_producing.is_set():
                    now = time.monotonic()
                    if self.stop_producing.is_set():
                        until = min(until, now + 10)
                        if now > until:
                            break
                    elif len(outstanding) < kind.window and now >= next_at:
                        n = self.send_next(kind, rng, peer, n, outstanding)
                        if n < 0:
                            break  # left a transaction open by dropping the connection
                        next_at = now + rng.uniform(0.0, 2 * GAP)
                    try:
                        frame = peer.recv(max(0.001, min(TICK, next_at - now)))
                    except TimeoutError:
                        continue
                    rid = frame.headers.get("receipt-id", "")
                    if frame.command == "RECEIPT":
                        for body in outstanding.pop(rid, []):
                            self.history.add("receipted", kind.label, body)
                        continue
                    for body in outstanding.pop(rid, []) or [rid]:
                        self.history.add("refused", kind.label, body, message=frame.headers.get("message", ""))
                    if kind.label != "bounded":
                        self.history.add("producer-error", kind.label, rid, message=frame.headers.get("message", ""))
                    self.stop_producing.wait(rng.uniform(0.1, 0.5))  # the queue is full: let it drain
                    break  # the broker closes the connection after an ERROR
            except GONE:
                pass
            finally:
                peer.close()
            n = abs(n)

    def send_next(self, kind: Kind, rng: random.Random, peer: Peer, n: int, outstanding: dict[str, list[str]]) -> int:
        """Send the next message (a transaction of 1-4 for "tx"); the next number, negated when the
        connection was dropped on purpose."""
        if kind.label != "tx":
            headers, info, receipt = message(kind, rng)
            body = f"{kind.label}-{n}"
            self.history.add("send", kind.label, body, label=kind.label, dest=kind.dest, receipt=receipt, **info)
            if receipt:
                headers["receipt"] = body
                outstanding[body] = [body]
            peer.frame("SEND", {"destination": kind.dest, **headers}, body.encode())
            return n + 1
        tx = f"tx-{n}"
        peer.frame("BEGIN", {"transaction": tx})
        bodies = [f"tx-{n}.{i}" for i in range(rng.randint(1, 4))]
        for body in bodies:
            self.history.add("send", kind.label, body, label=kind.label, dest=kind.dest, receipt=False, tx=tx)
            peer.frame("SEND", {"destination": kind.dest, "transaction": tx}, body.encode())
        end = rng.random()
        if end < 0.05:
            self.history.add("tx-dropped", kind.label, tx)
            peer.abort_connection()
            return -(n + 1)
        if end < 0.2:
            self.history.add("tx-aborted", kind.label, tx)
            outstanding["abort-" + tx] = []
            peer.frame("ABORT", {"transaction": tx, "receipt": "abort-" + tx})
        else:
            outstanding["commit-" + tx] = bodies
            peer.frame("COMMIT", {"transaction": tx, "receipt": "commit-" + tx})
        return n + 1

    # -- consumers -----------------------------------------------------------------------------
    def consume(self, kind: Kind, index: int) -> None:
        """Subscriptions to ``kind.dest`` one after the other, each with a random ack mode and
        prefetch, living 1-6 s and leaving by DISCONNECT, UNSUBSCRIBE or a dropped connection;
        while draining, one that stays and ACKs everything at once."""
        rng = self.rng(f"{kind.label}-consumer-{index}")
        offset: int | None = None  # a stream reader's next offset
        while not self.stop_consuming.is_set():
            peer = self.connect(self.stop_consuming)
            if peer is None:
                return
            sub = f"{kind.label}.{index}.{next(self.ids)}"
            mode = rng.choice(kind.modes)
            prefetch = kind.prefetch or rng.randint(1, 10)
            headers = {"destination": kind.dest, "id": kind.sub_id or sub, "ack": mode, "prefetch": str(prefetch),
                       "receipt": "sub", **kind.sub_headers}
            if kind.label == "stream":
                headers["x-stream-offset"] = "first" if offset is None else str(offset)
            self.history.add("subscribe", sub, dest=kind.dest, ack=mode, prefetch=prefetch,
                             exclusive="activemq.exclusive" in kind.sub_headers)
            subscription = Subscription(self, kind, sub, mode, peer, rng, offset)
            try:
                peer.frame("SUBSCRIBE", headers)
                subscription.serve()
            except GONE:
                subscription.close("lost")
            finally:
                peer.close()
            offset = subscription.offset
            if not self.draining.is_set():
                self.stop_consuming.wait(rng.uniform(0.0, 1.5))

    # -- the run ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """What must exist before the first SEND: the bounded queue's policy, the durable subscription."""
        peer = Peer(self.broker.port)
        try:
            peer.request("SEND", {"destination": "/control/declare/queue/rc.bounded", "max-length": str(MAX_LENGTH),
                                  "overflow": "reject-publish"})
            durable = next(k for k in KINDS if k.label == "durable")
            assert durable.sub_id is not None
            peer.request("SUBSCRIBE", {"destination": durable.dest, "id": durable.sub_id, "ack": "client-individual",
                                       **durable.sub_headers})
            peer.disconnect()
        finally:
            peer.close()

    def unleash(self, step: Step) -> None:
        """One step of the schedule: stop the broker as it says, and start it again."""
        pace(step.wait)  # the seeded schedule: the load runs this long before the stop
        self.history.add("stop", how=step.how)
        rc = self.broker.terminate() if step.how == "term" else self.broker.kill9()
        self.history.add("stopped", how=step.how, rc=rc)
        pace(step.down)  # the schedule's downtime: how long it is *is* the step
        if step.how == "kill-starting":
            self.broker.spawn()
            pace(step.early)  # the moment into start-up at which the schedule kills it
            self.history.add("stop", how="kill-starting")
            self.history.add("stopped", how="kill-starting", rc=self.broker.kill9())
        self.broker.start()
        self.history.add("ready")

    def left(self) -> dict[str, object]:
        """What the drain still waits for: receipted messages not consumed, messages in each queue
        (empty once drained)."""
        facts = Facts(list(self.history.events))
        waiting: dict[str, object] = {}
        unsettled = sorted(b for b in facts.receipted if not facts.settled(b) and "ttl" not in facts.sends[b].info)
        if unsettled:
            waiting["unconsumed"] = unsettled[:10]
        try:
            peer = Peer(self.broker.port)
        except GONE as e:
            return {**waiting, "broker": repr(e)}
        try:
            for k in KINDS:
                if k.dest.startswith("/queue/") and (n := peer.count(k.dest.removeprefix("/queue/"))):
                    waiting[k.dest] = n
        except GONE as e:
            waiting["broker"] = repr(e)
        finally:
            peer.close()
        return waiting

    def run(self, steps: list[Step]) -> None:
        self.broker.start()
        self.history.add("ready")
        self.setup()
        threads = [threading.Thread(target=self.guarded(functools.partial(self.produce, k))) for k in KINDS]
        threads += [threading.Thread(target=self.guarded(functools.partial(self.consume, k, i)))
                    for k in KINDS for i in range(k.consumers)]
        try:
            for t in threads:
                t.start()
            for step in steps:
                self.unleash(step)
            pace(2.0)  # the load runs on a while after the last restart, as after the others
            self.stop_producing.set()
            self.draining.set()
            left: dict[str, object] = {}

            def drained() -> bool:
                nonlocal left
                left = self.left()
                return not left

            if not poll(drained, DRAIN, interval=0.5):  # the history says what was left
                self.history.add("drain-timeout", what=f"not drained within {DRAIN} s", left=left)
            if not self.broker.running:
                self.history.add("broker-gone", rc=self.broker.returncode, stderr=self.broker.stderr[-2000:])
        except (RuntimeError, AssertionError) as e:  # the broker did not start again
            self.history.add("broker-gone", error=str(e)[-2000:])
        finally:
            self.stop_producing.set()
            self.draining.set()
            self.stop_consuming.set()
            for t in threads:
                t.join(30)
            if self.broker.running:
                self.history.add("stop", how="term")
                self.history.add("stopped", how="term", rc=self.broker.terminate())
            self.broker.close()


class Subscription:
    """One subscription's life on one connection: record what arrives, ACK (alone, cumulatively or
    in a transaction) after a random lag, leave at the end of its life unless draining."""

    def __init__(self, run: Run, kind: Kind, sub: str, mode: str, peer: Peer, rng: random.Random,
                 offset: int | None) -> None:
        self.run, self.kind, self.sub, self.mode, self.peer, self.rng = run, kind, sub, mode, peer, rng
        self.history = run.history
        self.offset = offset
        self.pending: list[tuple[float, str, str]] = []  # (when to ACK, ack id, body), in delivery order
        self.receipts: dict[str, list[str]] = {}  # ACK/COMMIT receipt id -> bodies
        self.closed = False
        self.ids = itertools.count(1)

    def serve(self) -> None:
        """Until the subscription leaves, the run ends or the connection is lost (raised)."""
        end = time.monotonic() + self.rng.uniform(1.0, 6.0)
        while not self.run.stop_consuming.is_set():
            if self.closed:
                break
            if not self.run.draining.is_set() and time.monotonic() > end:
                self.leave()
                continue
            try:
                frame: RawFrame | None = self.peer.recv(self.wait())
            except TimeoutError:
                frame = None
            if frame is not None:
                self.handle(frame)
            self.ack_due()
        if not self.closed:
            self.close("end of the run")

    def wait(self) -> float:
        if not self.pending:
            return TICK
        return max(0.0, min(TICK, self.pending[0][0] - time.monotonic())) or 0.001

    def handle(self, frame: RawFrame) -> None:
        if frame.command == "MESSAGE":
            body = frame.body.decode()
            info: dict[str, object] = {"redelivered": frame.headers.get("redelivered", "false")}
            if "x-stream-offset" in frame.headers:
                info["offset"] = int(frame["x-stream-offset"])
                self.offset = int(frame["x-stream-offset"]) + 1
            self.history.add("delivered", self.sub, body, **info)
            if self.mode in CLIENT_MODES and not self.closed:
                lag = 0.0 if self.run.draining.is_set() or self.rng.random() < 0.5 else self.rng.uniform(0, self.kind.ack_lag)
                self.pending.append((time.monotonic() + lag, frame["ack"], body))
        elif frame.command == "RECEIPT":
            rid = frame["receipt-id"]
            if rid == "sub":
                self.history.add("subscribed", self.sub)
            elif rid in ("bye", "unsub"):
                self.history.add("gone", self.sub)
            for body in self.receipts.pop(rid, []):
                self.history.add("acked", self.sub, body)
        else:
            self.history.add("consumer-error", self.sub, message=frame.headers.get("message", ""))
            self.close("error")

    def ack_due(self) -> None:
        """ACK what is due (everything while draining)."""
        if self.closed or not self.pending:
            return
        now = time.monotonic()
        draining = self.run.draining.is_set()
        due = [p for p in self.pending if draining or p[0] <= now]
        if not due:
            return
        if self.mode == "client":  # cumulative: the last due one settles every earlier delivery
            last = self.pending.index(due[-1])
            batch, self.pending = self.pending[: last + 1], self.pending[last + 1 :]
            self.ack([batch[-1]], [b for _, _, b in batch])
            return
        self.pending = [p for p in self.pending if p not in due]
        if self.kind.label == "tx" and len(due) >= 2 and self.rng.random() < 0.3:
            tx, rid = f"atx-{self.sub}-{next(self.ids)}", f"commit-{next(self.ids)}"
            self.peer.frame("BEGIN", {"transaction": tx})
            for _, ack_id, body in due:
                self.history.add("ack-sent", self.sub, body, tx=tx)
                self.peer.frame("ACK", {"id": ack_id, "transaction": tx})
            self.receipts[rid] = [b for _, _, b in due]
            self.history.add("commit-sent", self.sub, tx=tx, bodies=[b for _, _, b in due])
            self.peer.frame("COMMIT", {"transaction": tx, "receipt": rid})
            return
        for item in due:
            self.ack([item], [item[2]])

    def ack(self, items: list[tuple[float, str, str]], bodies: list[str]) -> None:
        rid = f"ack-{next(self.ids)}"
        self.receipts[rid] = bodies
        for body in bodies:
            self.history.add("ack-sent", self.sub, body)
        self.peer.frame("ACK", {"id": items[-1][1], "receipt": rid})

    def leave(self) -> None:
        """DISCONNECT (waiting for its RECEIPT), UNSUBSCRIBE first, or drop the connection."""
        how = self.rng.choices(["disconnect", "unsubscribe", "drop"], [5, 3, 2])[0]
        if how == "drop":
            self.take_arrived()
            self.close(how)
            self.peer.abort_connection()
            return
        self.close(how)
        if how == "unsubscribe":
            self.peer.frame("UNSUBSCRIBE", {"id": self.kind.sub_id or self.sub, "receipt": "unsub"})
        self.peer.frame("DISCONNECT", {"receipt": "bye"})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # what still arrives was dispatched before the DISCONNECT
            try:
                frame = self.peer.recv(max(0.01, deadline - time.monotonic()))
            except (TimeoutError, EOFError):
                return
            self.handle(frame)
            if frame.command == "RECEIPT" and frame["receipt-id"] == "bye":
                return

    def take_arrived(self) -> None:
        """Record every frame that has reached this client: those its reader has buffered (it
        parses one frame per ``recv``) and those in its socket.  The broker counts an auto-ack
        delivery as done once the socket took it, so a drop must not throw away what the
        client already has (seen: two MESSAGEs read with the one before them, then dropped)."""
        while True:
            try:
                frame = self.peer.recv(ARRIVED)
            except (TimeoutError, EOFError):
                return
            self.handle(frame)

    def close(self, why: str) -> None:
        if not self.closed:
            self.closed = True
            self.history.add("closed", self.sub, why=why)


def run(seed: int, restarts: int, workdir: Path) -> Outcome:
    """One seed's schedule of ``restarts`` stops and starts under the workload; judged."""
    steps = schedule(seed, restarts)
    began = time.monotonic()
    one = Run(seed, workdir)
    one.run(steps)
    return Outcome(seed, steps, one.history, violations(list(one.history.events)), time.monotonic() - began)
