"""A Taskiq broker on stompmq: ``StompmqBroker(url="stomp://USER:PASS@HOST:PORT")``.

The one asyncio part of stompmq: it runs in the user's Taskiq worker or client, never in the
broker.  It speaks STOMP 1.2 over ``asyncio`` streams with stompmq's own sans-IO parser and
encoder (``_Connection``).  What maps to what (docs/task-queues/taskiq.md has the user's view):

* ``kick`` is a SEND to ``/queue/QUEUE`` (``queue``, default ``taskiq``).  Taskiq's label
  conventions: ``delay`` (seconds, int or float) becomes stompmq's ``delay`` header (ms), so
  the task waits in the broker; ``priority`` (0-9, higher sooner) the SEND's ``priority``.  With
  ``confirm_delivery`` (the default) ``kick`` returns once the broker's RECEIPT says the message
  is stored; many concurrent kicks share the connection, each awaiting its own receipt.
* ``listen`` is a ``client-individual`` SUBSCRIBE with ``prefetch`` (default 100, Taskiq's
  ``--max-async-tasks``) yielding ``AckableMessage``s whose ``ack`` is an ACK, so Taskiq's
  ``--ack-type`` (when received, executed, saved) decides when the broker forgets a task.  A
  task unacked when its worker dies or disconnects goes back to the queue, ``redelivered``.
* Heart-beats (``heart_beat``, 10 s each way by default; the broker may ask for longer): a task
  of each connection (``_beat``) writes one whenever nothing was written for the interval, so an
  idle worker keeps its connection through NATs and a broker that requires beats, and the reader
  counts the broker's silence: past ``BEAT_GRACE`` of its intervals the connection is lost.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncGenerator

from taskiq import AckableMessage, AsyncBroker, BrokerMessage

from ..protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame
from ..protocol.negotiation import heart_beat_intervals, parse_heart_beat
from ..sync_client import BEAT_GRACE, HEART_BEAT, ConnectionLost, StompmqError, StompURL

__all__ = ["StompmqBroker"]

#: Seconds a connect or a receipt may take before the connection counts as lost.
TIMEOUT = 30.0
#: stompmq's message priorities.
PRIORITIES = range(10)
#: Seconds between the idle listener's wake-ups (see ``_wake_up``).
WAKE_UP = 0.5


class StompmqBroker(AsyncBroker):
    """A Taskiq broker that talks STOMP to stompmq.

    Parameters:
      url: ``stomp://USER:PASS@HOST:PORT`` (a path names a vhost: ``.../VHOST``).
      queue: the stompmq queue tasks go through (``/queue/<queue>``).
      prefetch: tasks a worker holds unacked at once.
      confirm_delivery: ``kick`` waits for the broker's RECEIPT (message stored).
      ack_timeout: seconds a worker may hold a task unacked before the broker gives it to
        another (the SUBSCRIBE's ``ack-timeout``); None leaves the broker's ``--ack-timeout``.
      heart_beat: seconds between heart-beats each way that a connection offers (0: none).
    """

    def __init__(self, url: str = "stomp://127.0.0.1:61613", *, queue: str = "taskiq", prefetch: int = 100,
                 confirm_delivery: bool = True, ack_timeout: float | None = None,
                 heart_beat: float = HEART_BEAT) -> None:
        super().__init__()
        self.url = StompURL.parse(url)
        self.heart_beat = heart_beat
        self.queue = queue
        self.prefetch = prefetch
        self.confirm_delivery = confirm_delivery
        self.ack_timeout = ack_timeout
        self._publisher: _Connection | None = None
        self._opening: asyncio.Lock | None = None
        self._consumers: set[_Connection] = set()

    async def _publishing(self) -> _Connection:
        """The connection kicks go through, opened on first use (again after it broke)."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._publisher is None or self._publisher.closed:
                self._publisher = await _Connection.open(self.url, self.heart_beat)
            return self._publisher

    async def kick(self, message: BrokerMessage) -> None:
        headers = {"destination": f"/queue/{self.queue}", "task-id": message.task_id,
                   "task-name": message.task_name}
        delay = message.labels.get("delay")
        if delay is not None and float(delay) > 0:
            headers["delay"] = str(math.ceil(float(delay) * 1000))  # never early
        priority = message.labels.get("priority")
        if priority is not None:
            if int(priority) not in PRIORITIES:
                raise ValueError(f"the priority label must be 0-9 on stompmq, not {priority!r}")
            headers["priority"] = str(int(priority))
        conn = await self._publishing()
        if self.confirm_delivery:
            await conn.request("SEND", headers, message.message)
        else:
            await conn.send("SEND", headers, message.message)

    async def listen(self) -> AsyncGenerator[bytes | AckableMessage, None]:
        conn = await _Connection.open(self.url, self.heart_beat)
        self._consumers.add(conn)
        headers = {"destination": f"/queue/{self.queue}", "id": "0", "ack": "client-individual",
                   "prefetch": str(self.prefetch)}
        if self.ack_timeout is not None:
            headers["ack-timeout"] = str(self.ack_timeout)
        waker = asyncio.get_running_loop().create_task(_wake_up())
        try:
            await conn.request("SUBSCRIBE", headers)
            while True:
                frame = await conn.messages.get()
                if frame is None:
                    raise conn.error or ConnectionLost(f"lost the broker at {self.url}")
                yield AckableMessage(data=frame.body, ack=_Ack(conn, frame.headers["ack"]))
        finally:
            waker.cancel()
            self._consumers.discard(conn)
            await conn.close()

    async def shutdown(self) -> None:
        for conn in [*self._consumers, *([self._publisher] if self._publisher else [])]:
            await conn.close()
        self._publisher = None
        await super().shutdown()


async def _wake_up() -> None:
    """Wake the event loop every ``WAKE_UP`` s while a worker listens.  ``taskiq worker`` stops on
    SIGTERM by setting an ``asyncio.Event`` from a plain signal handler, which wakes no selector:
    a worker idle on a quiet socket would never see it (measured: still running 30 s after
    SIGTERM).  Brokers that poll wake up anyway; a pushed subscription needs this tick."""
    while True:
        await asyncio.sleep(WAKE_UP)


class _Ack:
    """An ``AckableMessage.ack``: the ACK of one delivery (a no-op once its connection is gone:
    the broker has requeued the task already)."""

    __slots__ = ("conn", "ack_id")

    def __init__(self, conn: _Connection, ack_id: str) -> None:
        self.conn = conn
        self.ack_id = ack_id

    async def __call__(self) -> None:
        if not self.conn.closed:
            await self.conn.send("ACK", {"id": self.ack_id})


class _Connection:
    """One STOMP connection on asyncio streams.  A reader task sorts what arrives: RECEIPTs to
    the ``request`` awaiting them, MESSAGEs to ``messages`` (None once the connection ends), and
    an ERROR fails both, the broker having closed the connection after it."""

    def __init__(self, url: StompURL, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.url = url
        self.reader = reader
        self.writer = writer
        self.parser = FrameParser(Limits(max_body=1 << 30))
        self.messages: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.receipts: dict[str, asyncio.Future[dict[str, str]]] = {}
        self.ids = itertools.count()
        self.closed = False
        self.error: StompmqError | None = None
        self.connected: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        #: seconds between the heart-beats this end sends and those it expects (0: none)
        self.send_every = self.expect_every = 0.0
        self.last_send = asyncio.get_running_loop().time()
        self.task = asyncio.get_running_loop().create_task(self._read())
        self.beats: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, url: StompURL, heart_beat: float = HEART_BEAT) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(url.host, url.port), TIMEOUT)
        except (TimeoutError, OSError) as e:
            raise ConnectionLost(f"cannot reach the broker at {url}: {e}") from None
        conn = cls(url, reader, writer)
        beat_ms = round(heart_beat * 1000)
        await conn.send("CONNECT", url.connect_headers(beat_ms))
        try:
            connected = await asyncio.wait_for(conn.connected, TIMEOUT)
            server = parse_heart_beat(connected.headers.get("heart-beat"))
        except ProtocolError as e:
            await conn.close()
            raise ConnectionLost(f"the broker at {url} answered a bad CONNECTED: {e}") from None
        except StompmqError as e:
            raise StompmqError(f"the broker at {url} refused the connection: {e}") from None
        except TimeoutError:
            await conn.close()
            raise ConnectionLost(f"no CONNECTED from {url} within {TIMEOUT} s") from None
        broker_sends, broker_expects = heart_beat_intervals((beat_ms, beat_ms), server)
        conn.send_every, conn.expect_every = broker_expects / 1000, broker_sends / 1000
        if conn.send_every:
            conn.beats = asyncio.get_running_loop().create_task(conn._beat())
        return conn

    async def _beat(self) -> None:
        """Write a heart-beat whenever nothing was written for ``send_every``."""
        loop = asyncio.get_running_loop()
        while not self.closed:
            await asyncio.sleep(max(0.0, self.last_send + self.send_every - loop.time()))
            if not self.closed and loop.time() - self.last_send >= self.send_every:
                self.writer.write(b"\n")  # (no drain: a full buffer would hold back no beat of use)
                self.last_send = loop.time()

    async def _read(self) -> None:
        try:
            while True:
                if self.expect_every:  # (set once CONNECTED came: the broker's silence counts from then)
                    try:
                        data = await asyncio.wait_for(self.reader.read(1 << 20), self.expect_every * BEAT_GRACE)
                    except TimeoutError:
                        raise ConnectionLost(f"no heart-beat from the broker at {self.url} for "
                                             f"{self.expect_every * BEAT_GRACE:.1f} s") from None
                else:
                    data = await self.reader.read(1 << 20)
                if not data:
                    raise ConnectionLost(f"the broker at {self.url} closed the connection")
                for frame in self.parser.feed(data):
                    if frame.command == "MESSAGE":
                        self.messages.put_nowait(frame)
                    elif frame.command == "RECEIPT":
                        waiter = self.receipts.pop(frame.headers.get("receipt-id", ""), None)
                        if waiter is not None and not waiter.done():
                            waiter.set_result(frame.headers)
                    elif frame.command == "CONNECTED":
                        self.connected.set_result(frame)
                    elif frame.command == "ERROR":
                        raise StompmqError(f"stompmq refused a frame: {frame.headers.get('message', '')}")
        except ProtocolError as e:
            self._end(ConnectionLost(f"the broker at {self.url} sent a bad frame: {e}"))
        except OSError as e:
            self._end(ConnectionLost(f"lost the broker at {self.url}: {e}"))
        except StompmqError as e:
            self._end(e)

    def _end(self, error: StompmqError) -> None:
        self.closed = True
        self.error = error
        if not self.connected.done():
            self.connected.set_exception(error)
        for waiter in self.receipts.values():
            if not waiter.done():
                waiter.set_exception(error)
        self.receipts.clear()
        self.messages.put_nowait(None)
        if self.beats is not None:
            self.beats.cancel()
        self.writer.close()

    async def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        if self.closed:
            raise self.error or ConnectionLost(f"the connection to {self.url} is closed")
        self.writer.write(encode_frame(Frame(command, headers, body), "1.2"))
        self.last_send = asyncio.get_running_loop().time()
        try:
            await self.writer.drain()
        except OSError as e:
            raise ConnectionLost(f"lost the broker at {self.url}: {e}") from None

    async def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """Send a frame asking for a receipt; its RECEIPT's headers once it came."""
        receipt = f"r{next(self.ids)}"
        waiter: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()
        self.receipts[receipt] = waiter
        await self.send(command, {**headers, "receipt": receipt}, body)
        try:
            return await asyncio.wait_for(waiter, TIMEOUT)
        except TimeoutError:
            raise ConnectionLost(f"no receipt from {self.url} within {TIMEOUT} s") from None

    async def close(self) -> None:
        """DISCONNECT, wait for its receipt (everything sent before was read), close."""
        if self.closed:
            return
        try:
            await self.request("DISCONNECT", {})
        except (TimeoutError, StompmqError):
            pass
        self.closed = True
        self.task.cancel()
        if self.beats is not None:
            self.beats.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"<stompmq connection to {self.url}{' (closed)' if self.closed else ''}>"
