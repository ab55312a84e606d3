"""The worker side of benchmarks/dramatiq_bench.py: a no-op actor on the broker that
``BENCH_BROKER`` names (``stomp://...`` for stompmq, ``amqp://...`` for RabbitMQ), and a
middleware that keeps each message's enqueue-to-start time (its start minus the
``message_timestamp`` Dramatiq stamps at enqueue: one clock, the worker and the client run on
this machine) and, once ``BENCH_N`` messages were processed, writes the time and then those
latencies to ``BENCH_DONE`` (one worker process, so one count)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

url = os.environ["BENCH_BROKER"]
if url.startswith("stomp://"):
    from stompmq.integrations.dramatiq import StompmqBroker

    broker: dramatiq.Broker = StompmqBroker(url=url)
else:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    broker = RabbitmqBroker(url=url)


class Done(Middleware):
    def __init__(self, n: int, path: str) -> None:
        self.n, self.path, self.count, self.lock = n, path, 0, threading.Lock()
        self.latencies: list[float] = []  # ms, in the order the messages started

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self.latencies.append(time.time() * 1000 - message.message_timestamp)  # (list.append: atomic)

    def after_process_message(self, broker: dramatiq.Broker, message: Any, *, result: Any = None,
                              exception: BaseException | None = None) -> None:
        with self.lock:
            self.count += 1
            if self.count == self.n:
                with open(self.path + ".tmp", "w") as f:
                    f.write(f"{time.time():.6f}\n")
                    f.writelines(f"{ms:.3f}\n" for ms in self.latencies)
                os.replace(self.path + ".tmp", self.path)  # the bench sees the whole file or none


broker.add_middleware(Done(int(os.environ["BENCH_N"]), os.environ["BENCH_DONE"]))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop(i: int) -> None:
    pass
