"""The Dramatiq app the worker tests run with the real ``dramatiq`` command: a StompmqBroker on
``STOMPMQ_URL`` and actors that append what they do to ``RECORD_FILE``, one line per event
(appends of one short line are atomic, so the worker's threads and processes never mix lines).
``SLOW_SECONDS`` is how long ``slow`` and ``hold`` work (the kill -9 test starts a worker with 60,
its replacement with 0); ``HEART_BEAT`` the broker's ``heart_beat``."""

from __future__ import annotations

import os
import time

import dramatiq

from stompmq.integrations.dramatiq import StompmqBroker

from ..support.waiting import pace

broker = StompmqBroker(url=os.environ["STOMPMQ_URL"], heart_beat=float(os.environ.get("HEART_BEAT", "10")))
dramatiq.set_broker(broker)


def note(line: str) -> None:
    fd = os.open(os.environ["RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@dramatiq.actor
def record(key: str) -> None:
    note(f"ran {key} {time.time():.6f}")


@dramatiq.actor(time_limit=120_000)
def slow(key: str) -> None:
    note(f"start {key}")
    pace(float(os.environ.get("SLOW_SECONDS", "0")))  # the task's work: its length is what is tested
    note(f"done {key}")


@dramatiq.actor(max_retries=0)
def fail(key: str) -> None:
    note(f"fail {key}")
    raise ValueError(f"{key} always fails")


@dramatiq.actor(time_limit=120_000)
def hold(key: str) -> None:
    """Keep this worker thread's publishing connection idle for ``SLOW_SECONDS``, then publish on
    it: whether it is the same connection says if its heart-beats kept it open meanwhile."""
    conn = broker.connection
    note(f"beats {key} {conn.send_every} {conn.expect_every}")
    pace(float(os.environ.get("SLOW_SECONDS", "0")))  # the task's work: its length is what is tested
    record.send(key)
    note(f"kept {key} {broker.connection is conn}")
