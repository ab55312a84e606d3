"""Celery on stompmq: a result over ``rpc://``, a countdown that waits in the broker, a priority,
and an ``acks_late`` task longer than its ack timeout (docs/task-queues/celery.md).

    stompmq --store sqlite:///stompmq.db                                   # the broker, on port 61613
    celery -A examples.celery_tasks worker --pool threads -c 4 -l INFO     # the worker
    python -m examples.celery_tasks                                        # send a few tasks

``STOMPMQ_URL`` (default ``stompmq://guest:guest@127.0.0.1:61613//``) names the broker, for both.
"""

import os
import time

from celery import Celery

import stompmq.integrations.celery  # noqa: F401  (registers the stompmq:// scheme with kombu)

app = Celery("tasks", broker=os.environ.get("STOMPMQ_URL", "stompmq://guest:guest@127.0.0.1:61613//"),
             backend="rpc://")
# Deliveries have a 10 s ack deadline, which the transport extends while a task holds one.
app.conf.broker_transport_options = {"ack_timeout": 10}


@app.task(name="add")
def add(x: int, y: int) -> int:
    print(f"add: {x} + {y} = {x + y}", flush=True)
    return x + y


@app.task(name="crunch", acks_late=True)
def crunch(seconds: float) -> str:
    time.sleep(seconds)  # longer than the 10 s deadline: extended, never redelivered
    print(f"crunch: {seconds} s done", flush=True)
    return "done"


if __name__ == "__main__":
    print("2 + 3 =", add.delay(2, 3).get(timeout=30))
    later = add.apply_async((4, 5), countdown=2)  # waits in the broker for 2 s, not in a worker
    add.apply_async((1, 1), priority=9)  # ahead of lower priorities still queued
    long = crunch.delay(15)
    print("4 + 5 =", later.get(timeout=30), "(2 s later)")
    print("crunch:", long.get(timeout=60))
