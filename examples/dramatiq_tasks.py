"""Dramatiq on stompmq: actors, a delayed message, a priority, and a rejected message in the
dead-letter queue (docs/task-queues/dramatiq.md).

    stompmq --store sqlite:///stompmq.db                  # the broker, on port 61613
    dramatiq examples.dramatiq_tasks --processes 1        # the worker
    python -m examples.dramatiq_tasks                     # enqueue a few messages

``STOMPMQ_URL`` (default ``stomp://127.0.0.1:61613``) names the broker, for both commands.
"""

import os

import dramatiq

from stompmq.integrations.dramatiq import StompmqBroker

broker = StompmqBroker(url=os.environ.get("STOMPMQ_URL", "stomp://127.0.0.1:61613"), confirm_delivery=True)
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=3, min_backoff=500)
def add(x: int, y: int) -> None:
    print(f"add: {x} + {y} = {x + y}", flush=True)


@dramatiq.actor(max_retries=0)
def refuse(reason: str) -> None:
    raise ValueError(reason)  # rejected at once: the message moves to /queue/default.XQ


if __name__ == "__main__":
    add.send(2, 3)
    add.send_with_options(args=(4, 5), delay=2000)  # waits in the broker for 2 s, not in a worker
    add.send_with_options(args=(1, 1), broker_priority=9)  # ahead of priority-4 messages still queued
    refuse.send("not today")
    print("enqueued 4 messages", flush=True)
    broker.close()
