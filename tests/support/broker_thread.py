"""A real listening broker in a background thread, for end-to-end tests.

The broker runs its own ``trio.run`` in a thread so the tests themselves can be
plain synchronous code driving real sockets (raw bytes or stomp.py).  ``stop``
cancels the broker the way SIGTERM would, so shutdown paths are exercised too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from stompmq.broker import Broker, BrokerConfig
from stompmq.server import ServerSettings, serve
from stompmq.storage.base import Store

from .stores import make_store_factory


@dataclass
class BrokerThread:
    make_store: Callable[[], Store]
    settings: ServerSettings = field(default_factory=lambda: ServerSettings(port=0))
    config: BrokerConfig = field(default_factory=BrokerConfig)
    #: OpenTelemetry spans (server/otel.py's Tracing); None: as the OTEL_* variables say
    tracing: Any = None
    port: int = 0
    #: Everything serve() listens on: plain TCP first, then TLS and WebSocket (see listener_port).
    listeners: list[Any] = field(default_factory=list)
    broker: Broker | None = None
    _thread: threading.Thread | None = None
    _token: trio.lowlevel.TrioToken | None = None
    _cancel: trio.CancelScope | None = None
    _error: BaseException | None = None

    def start(self) -> BrokerThread:
        ready = threading.Event()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self.broker = Broker(self.make_store(), self.config)
            with trio.CancelScope() as scope:
                self._cancel = scope
                async with trio.open_nursery() as nursery:
                    listeners = await nursery.start(functools.partial(serve, tracing=self.tracing), self.broker, self.settings)
                    self.listeners = listeners
                    self.port = listeners[0].socket.getsockname()[1]
                    ready.set()

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as e:  # reported by stop()/start()
                self._error = e
            finally:
                ready.set()

        self._thread = threading.Thread(target=run, name="broker", daemon=True)
        self._thread.start()
        ready.wait(30)
        if self._error is not None:
            raise RuntimeError("broker failed to start") from self._error
        return self

    def call(self, fn: Callable[[], object]) -> object:
        """Run ``fn`` on the broker's trio thread (to inspect broker state safely)."""
        assert self._token is not None
        return trio.from_thread.run_sync(fn, trio_token=self._token)

    def __enter__(self) -> BrokerThread:
        """``with BrokerThread(...).start() as thread:`` stops it at the end, however it ends."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self._cancel is not None:
            try:
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(30)
        self._thread = None
        if self._error is not None:
            raise RuntimeError("broker failed") from self._error


@contextmanager
def restarting(store_kind: str, tmp_path: Path) -> Iterator[Callable[[], BrokerThread]]:
    """``start()`` starts a broker on the same database each time; the last one is stopped."""
    factory = make_store_factory(store_kind, tmp_path)
    running: list[BrokerThread] = []

    def start() -> BrokerThread:
        if running:
            running.pop().stop()
        running.append(BrokerThread(factory).start())
        return running[-1]

    try:
        yield start
    finally:
        for broker in running:
            broker.stop()
