"""Taskiq on stompmq: a task, a delayed kick and a priority (docs/task-queues/taskiq.md).

    stompmq --store sqlite:///stompmq.db                    # the broker, on port 61613
    taskiq worker examples.taskiq_tasks:broker --workers 1  # the worker
    python -m examples.taskiq_tasks                         # kick a few tasks

``STOMPMQ_URL`` (default ``stomp://127.0.0.1:61613``) names the broker, for both commands.
"""

import asyncio
import os

from stompmq.integrations.taskiq import StompmqBroker

broker = StompmqBroker(os.environ.get("STOMPMQ_URL", "stomp://127.0.0.1:61613"))


@broker.task(task_name="add")  # not "__main__:add" when this file runs as a script
async def add(x: int, y: int) -> int:
    print(f"add: {x} + {y} = {x + y}", flush=True)
    return x + y


async def main() -> None:
    await broker.startup()
    await add.kiq(2, 3)
    await add.kicker().with_labels(delay=2).kiq(4, 5)  # waits in the broker for 2 s
    await add.kicker().with_labels(priority=9).kiq(1, 1)  # ahead of priority-4 tasks still queued
    print("kicked 3 tasks", flush=True)
    await broker.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
