"""Waiting for the broker in the end-to-end suites: polling, sessions, bulk SENDs.

One copy of the waiting helpers the end-to-end suites share (the clients are in
rawclient.py and stompclient.py, with ``control`` for /control/ requests; brokers
in broker_thread.py and broker_process.py).  A test never sleeps for a fixed time to let the
broker catch up: it polls for the state it needs with a generous deadline
(``wait_until``, ``wait_sessions``; ``until`` inside trio), or uses receipts, which the broker
releases only once the store has committed everything the connection sent
before them (``send_all``).  What is left of the wall clock has a name here:

* ``wait_past``: a deadline the broker (or the database) keeps on the wall clock itself, a
  TTL or a lease: the condition *is* the clock having passed it;
* ``holds_for``: that something does *not* happen (a duplicate, a redelivery) can only be
  watched for a while; it polls, and fails at the first sign;
* ``pace``: a pause that is part of a workload (a slow consumer, a task's work, a kill
  schedule), never a wait for the broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from .stompclient import Client

if TYPE_CHECKING:
    from stompmq.storage.groupcommit import GroupCommitStore

    from .broker_thread import BrokerThread


#: Seconds between two polls of a condition.
POLL = 0.02


def poll(check: Callable[[], object], timeout: float, *, interval: float = POLL) -> bool:
    """Poll ``check`` until it is true (True) or ``timeout`` seconds have passed (False): the
    one polling loop, for a caller that reports a timeout itself; tests use ``wait_until``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)  # the poll's period: what is polled has no event to wait on
    return True


def wait_until(check: Callable[[], object], what: str, timeout: float = 5.0, *, interval: float = POLL) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    assert poll(check, timeout, interval=interval), f"timed out waiting for {what}"


async def until(check: Callable[[], object], what: str, timeout: float = 60.0, *, interval: float = 0.002) -> None:
    """``wait_until`` inside trio, for what a thread does (the store's database thread).

    Polls ``check`` every ``interval`` seconds of trio's clock, so a virtual clock runs on
    meanwhile (a group commit may wait for a deadline); 0 (a bare checkpoint) keeps an
    autojumping clock still.  Fails after ``timeout`` seconds of *real* time: the thread's
    work takes real time, during which a virtual clock would jump to the next deadline, so a
    virtual deadline would fail whenever a commit is slow.
    """
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await trio.sleep(interval)


async def committed(store: GroupCommitStore, ticket: int, *, interval: float = 0.002) -> None:
    """Until ``store`` has committed ``ticket`` (``until``'s ``interval``)."""
    await until(lambda: store.committed >= ticket, f"ticket {ticket} committed", interval=interval)


def wait_past(epoch_ms: float, what: str) -> None:
    """Until the wall clock (``time.time``, which the broker reads for TTLs and due times) is
    past ``epoch_ms`` epoch milliseconds, plus one poll for the clocks' granularity."""
    wait_until(lambda: time.time() * 1000 > epoch_ms + POLL * 1000, what, timeout=max(5.0, epoch_ms / 1000 - time.time() + 5))


def holds_for(check: Callable[[], object], what: str, seconds: float) -> None:
    """``check`` stays true for ``seconds`` (something that must not happen, watched for a
    while: an absence has no moment to wait for); fails naming ``what`` at the first lapse."""
    assert not poll(lambda: not check(), seconds), f"{what} did not hold"
    assert check(), f"{what} did not hold"


def pace(seconds: float) -> None:
    """A pause that is part of a workload's timing (a slow reader or task, a schedule of
    restarts), not a wait for the broker: the one wall-clock pause such tests share.  Every
    caller says in a comment what the pause stands for."""
    time.sleep(seconds)  # a workload's own timing: there is no condition, the time is the point


def wait_sessions(broker: BrokerThread, n: int) -> None:
    """Wait until the broker has exactly ``n`` sessions (e.g. a closed client's is gone)."""
    wait_until(lambda: broker.call(lambda: len(broker.broker.sessions)) == n, f"{n} sessions")


def send_all(
    port: int,
    destination: str,
    bodies: Iterable[bytes | str],
    headers_for: Callable[[int], dict[str, str]] | None = None,
    *,
    receipt: bool = True,
) -> None:
    """SEND ``bodies`` to ``destination`` from a connection of their own, in order.

    ``headers_for(i)`` gives the extra headers of the i-th body.  Returns once
    the broker has handled every SEND and the store has committed them: with
    ``receipt`` each SEND asks for its own RECEIPT (one round trip each, so the
    broker handles them one at a time); without, they are pipelined and one
    round trip after the last covers them all.
    """
    with Client(port) as producer:
        for i, body in enumerate(bodies):
            headers = headers_for(i) if headers_for else None
            producer.send_to(destination, body, receipt=receipt, headers=headers)
        if not receipt:
            producer.sync()
