"""A broker and its clients over in-memory streams, in the style of trio's own tests.

``broker_pair()`` runs the real runtime and real ``Connection`` objects, but the
sockets are ``trio.testing.memory_stream_pair`` halves, so tests run inside the
test's own trio loop and, with the ``autojump_clock`` fixture, in virtual time:
a 30-second ack timeout takes milliseconds and nothing sleeps for real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from stompmq.broker import Broker, BrokerConfig
from stompmq.protocol import Frame, FrameParser, encode_frame
from stompmq.server.alarms import ResourceAlarms
from stompmq.server.connection import Connection
from stompmq.server.heartbeats import HeartBeats
from stompmq.server.runtime import Runtime
from stompmq.server.security import Security
from stompmq.server.settings import ServerSettings
from stompmq.storage.base import Store
from stompmq.storage.memory import MemoryStore

#: Seconds (virtual under autojump) a receive may wait: a frame that never comes fails the test
#: instead of hanging it.
RECEIVE_LIMIT = 600.0


class PeerClient:
    """The client end of one in-memory connection: frames in, frames out."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, version: str = "1.2") -> None:
        self.stream = stream
        self.parser = FrameParser()
        self.parser.version = version
        self.version = version
        self.frames: list[Frame] = []
        self.beat_times: list[float] = []  # trio.current_time() of each heart-beat's arrival

    @property
    def heart_beats(self) -> int:
        return len(self.beat_times)

    async def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        await self.stream.send_all(encode_frame(Frame(command, headers or {}, body), self.version))

    async def connect(self, heart_beat: str = "0,0", **headers: str) -> Frame:
        await self.send("CONNECT", {"accept-version": self.version, "host": "/", "heart-beat": heart_beat, **headers})
        return await self.receive()

    async def receive(self) -> Frame:
        """The next frame (heart-beats are counted, not returned); EOFError at the end."""
        while not self.frames:
            with trio.fail_after(RECEIVE_LIMIT):
                data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            if data.strip(b"\n") == b"":
                self.beat_times += [trio.current_time()] * data.count(b"\n")
            self.frames.extend(self.parser.feed(data))
        return self.frames.pop(0)

    async def nothing_within(self, seconds: float) -> bool:
        """True if no frame arrives within ``seconds`` (virtual seconds under autojump)."""
        with trio.move_on_after(seconds):
            frame = await self.receive()
            self.frames.insert(0, frame)
            return False
        return True


class BrokerPair:
    def __init__(
        self, runtime: Runtime, nursery: trio.Nursery, settings: ServerSettings, heart_beats: HeartBeats,
        security: Security | None = None,
    ) -> None:
        self.security = security
        self.runtime = runtime
        self.broker = runtime.broker
        self.nursery = nursery
        self.settings = settings
        self.heart_beats = heart_beats

    def open(self, version: str = "1.2", lockstep: bool = False) -> PeerClient:
        """A new client connection; its server side runs in the pair's nursery.  ``lockstep``:
        the server's ``send_all`` waits until the client has read the bytes, as with a socket
        whose buffers are full, so what the server counts as sent is what the client read."""
        make = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        client_stream, server_stream = make()
        connection = Connection(server_stream, self.runtime, self.settings, self.security,
                                heart_beats=self.heart_beats)
        self.nursery.start_soon(connection.run)
        return PeerClient(client_stream, version)

    async def connected(self, version: str = "1.2", heart_beat: str = "0,0", lockstep: bool = False) -> PeerClient:
        client = self.open(version, lockstep)
        reply = await client.connect(heart_beat)
        assert reply.command == "CONNECTED", reply
        return client


@asynccontextmanager
async def broker_pair(
    store: Store | None = None, config: BrokerConfig | None = None, settings: ServerSettings | None = None,
    alarms: ResourceAlarms | None = None, security: Security | None = None,
) -> AsyncIterator[BrokerPair]:
    runtime = Runtime(Broker(store or MemoryStore(), config or BrokerConfig()), alarms)
    await runtime.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            heart_beats = HeartBeats()
            await nursery.start(heart_beats.run)
            yield BrokerPair(runtime, nursery, settings or ServerSettings(port=0), heart_beats, security)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await runtime.close()
