"""Waiting for the broker in the end-to-end suites: polling, sessions, bulk SENDs.

One copy of the waiting helpers the end-to-end suites share (the clients are in
rawclient.py and stompclient.py, with ``control`` for /control/ requests; brokers
in broker_thread.py and broker_process.py).  A test never sleeps for a fixed time to let the
broker catch up: it polls for the state it needs with a generous deadline
(``wait_until``, ``wait_sessions``), or uses receipts, which the broker
releases only once the store has committed everything the connection sent
before them (``send_all``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from .broker_thread import BrokerThread
from .stompclient import Client


def wait_until(check: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


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
