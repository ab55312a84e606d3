"""The Taskiq app the worker test runs with the real ``taskiq worker`` command: a StompmqBroker on
``STOMPMQ_URL`` and a task that appends a line per run to ``RECORD_FILE`` (atomic appends)."""

from __future__ import annotations

import os
import time

from stompmq.integrations.taskiq import StompmqBroker

broker = StompmqBroker(os.environ.get("STOMPMQ_URL", "stomp://127.0.0.1:61613"))


@broker.task(task_name="record")
async def record(key: str) -> None:
    fd = os.open(os.environ["RECORD_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"ran {key} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)
