"""The Celery app the worker tests run with the real ``celery worker`` command: broker
``STOMPMQ_URL`` (``stompmq://``), results through ``rpc://``, and tasks that append what they do
to ``RECORD_FILE``, one line per event (appends of one short line are atomic, so the pool's
threads never mix lines).  ``ACK_TIMEOUT`` is the transport's ``ack_timeout`` option;
``SLOW_SECONDS`` is how long ``slow`` works (the kill -9 test starts a worker with 60, its
replacement with 0).  ``make_app`` is the same app for the test's own side (a fresh one per
broker, since a test's broker has a port of its own)."""

from __future__ import annotations

import os
import time

from celery import Celery

import stompmq.integrations.celery  # noqa: F401  (registers stompmq://)

from ..support.waiting import pace


def make_app(url: str, ack_timeout: float = 60.0) -> Celery:
    app = Celery("celery_app", broker=url, backend="rpc://")
    app.conf.update(
        broker_transport_options={"ack_timeout": ack_timeout},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_create_missing_queues=True,
    )
    return app


app = make_app(os.environ.get("STOMPMQ_URL", "stompmq://127.0.0.1:61613//"), float(os.environ.get("ACK_TIMEOUT", "60")))


def note(line: str) -> None:
    fd = os.open(os.environ["RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@app.task(name="record", ignore_result=True)
def record(key: str) -> None:
    note(f"ran {key} {time.time():.6f}")


@app.task(name="slow", acks_late=True, ignore_result=True)
def slow(key: str) -> None:
    note(f"start {key} {time.time():.6f}")
    pace(float(os.environ.get("SLOW_SECONDS", "0")))  # the task's work: its length is what is tested
    note(f"done {key} {time.time():.6f}")


@app.task(name="add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="flaky", bind=True, max_retries=2, ignore_result=True)
def flaky(self, key: str) -> None:  # type: ignore[no-untyped-def]
    note(f"try {key} {self.request.retries} {time.time():.6f}")
    if self.request.retries < 2:
        raise self.retry(countdown=0.2)
