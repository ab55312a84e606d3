"""The Taskiq app the worker test runs with the real ``taskiq worker`` command: a StompmqBroker on
``STOMPMQ_URL`` (heart-beats every ``HEART_BEAT`` s) and tasks that append a line per run to
``RECORD_FILE`` (atomic appends)."""

from __future__ import annotations

import os
import time

from stompmq.integrations.taskiq import StompmqBroker

from ..support.waiting import pace

broker = StompmqBroker(os.environ.get("STOMPMQ_URL", "stomp://127.0.0.1:61613"),
                       heart_beat=float(os.environ.get("HEART_BEAT", "10")))


def note(line: str) -> None:
    fd = os.open(os.environ["RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@broker.task(task_name="record")
async def record(key: str) -> None:
    note(f"ran {key} {time.time():.6f}")


@broker.task(task_name="hold")
def hold(key: str, seconds: float) -> None:
    """A blocking task (Taskiq runs it in a thread) that notes its worker's heart-beat intervals."""
    pace(seconds)  # the task's work: its length is what is tested
    note(f"held {key} " + " ".join(f"{c.send_every},{c.expect_every}" for c in broker._consumers))
