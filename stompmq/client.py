"""A small STOMP 1.2 client on trio and the sans-IO ``protocol/`` layer, for stompmq's own tools.

``stompmq shovel`` and ``stompmq admin import-rabbitmq`` talk to brokers with it
(any STOMP broker, stompmq or not).  It owns a socket, a ``FrameParser`` and the
encoder; it never spawns tasks, so a caller that reads and writes from two
tasks (the shovel) decides who reads.  Addresses are URLs::

    stomp://user:password@host:61613/queue/name?vhost=staging

The path is a destination (optional), ``vhost`` selects the virtual host: it
goes into CONNECT's ``host`` header; without it ``/`` goes there, the default
vhost of stompmq and RabbitMQ (RabbitMQ refuses a host name it has no vhost
of, so the URL's host name would not do; ActiveMQ ignores the header).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from .logs import masked
from .protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame
from .stomp_url import BadURL, split_url

#: Seconds to open a connection and get CONNECTED before the host counts as unreachable.
CONNECT_TIMEOUT = 10.0
#: Largest body accepted from a broker (a shovel must carry whatever the source holds).
MAX_BODY = 512 * 1024 * 1024
READ_SIZE = 256 * 1024
T = TypeVar("T")


class ClientError(Exception):
    """A one-line reason the tool cannot go on: a bad URL or an unreachable host (exit code 2)."""

    exit_code = 2


class Refused(ClientError):
    """A broker answered with an ERROR frame (exit code 1, as ``stompmq admin`` does)."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class StompUrl:
    host: str
    port: int
    login: str | None
    passcode: str | None
    destination: str  # "" when the URL has no path
    vhost: str | None

    @classmethod
    def parse(cls, text: str) -> StompUrl:
        """``stomp://user:password@host:port/destination?vhost=NAME``: the path is a destination
        here (stomp_url.py says why the blocking clients read it as a vhost instead)."""
        try:
            parts = split_url(text, "stomp://[user:password@]host[:port][/destination]")
        except BadURL as e:
            raise ClientError(str(e)) from None
        query = urllib.parse.parse_qs(parts.query)
        unknown = set(query) - {"vhost"}
        if unknown:
            raise ClientError(f"bad URL {masked(text)!r}: unknown parameter {sorted(unknown)[0]!r} (only vhost)")
        return cls(parts.host, parts.port, parts.login, parts.passcode, parts.path,
                   query["vhost"][-1] if "vhost" in query else None)

    def where(self) -> str:
        return f"{self.host}:{self.port}"


#: The CONNECT header of a relay (``relay:true``): a client forwarding another broker's messages
#: (a shovel), whose SENDs keep the headers only a broker sets (broker/send_headers.py).
RELAY_HEADER = "relay"


class StompConnection:
    """One CONNECTed session: ``send`` frames, ``next_frame`` reads them."""

    def __init__(self, stream: trio.SocketStream, url: StompUrl) -> None:
        self.stream = stream
        self.url = url
        self.parser = FrameParser(Limits(max_body=MAX_BODY, max_headers=10_000))
        self.pending: list[Frame] = []
        self.version = "1.2"
        self.server = ""  # the CONNECTED frame's ``server`` header (``RabbitMQ/3.13.7``, say)
        self._receipts = 0

    @classmethod
    async def open(cls, url: StompUrl, vhost: str | None = None, *, relay: bool = False) -> StompConnection:
        """Connect and log in; ``vhost`` overrides the URL's; ``relay``: as a relay of another
        broker's messages (a shovel's target: CONNECT ``relay:true``, send_headers.py).
        ClientError on any failure."""
        headers = {"accept-version": "1.2", "host": vhost or url.vhost or "/", "heart-beat": "0,0"}
        if relay:
            headers[RELAY_HEADER] = "true"
        if url.login is not None:
            headers["login"] = url.login
            headers["passcode"] = url.passcode or ""
        with trio.move_on_after(CONNECT_TIMEOUT) as scope:
            try:
                stream = await trio.open_tcp_stream(url.host, url.port)
            except OSError as e:
                raise ClientError(f"cannot connect to {url.where()}: {e.strerror or e}") from None
            connection = cls(stream, url)
            try:
                await connection.send(Frame("CONNECT", headers))
                reply = await connection.next_frame()
            except BaseException:
                await stream.aclose()
                raise
        if scope.cancelled_caught:
            raise ClientError(f"cannot connect to {url.where()}: no CONNECTED within {CONNECT_TIMEOUT:g} s")
        if reply.command != "CONNECTED":
            await stream.aclose()
            raise Refused(f"{url.where()} refused the connection: {reason(reply)}")
        connection.version = reply.headers.get("version", "1.0")
        connection.server = reply.headers.get("server", "")
        connection.parser.version = connection.version
        return connection

    async def send(self, frame: Frame) -> None:
        await self.send_bytes(encode_frame(frame, self.version))

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise ClientError(f"{self.url.where()}: connection lost: {e}") from None

    async def next_frame(self) -> Frame:
        """The next frame; ClientError when the connection ends or breaks STOMP."""
        while not self.pending:
            self.pending = await self.frames()
        return self.pending.pop(0)

    async def frames(self) -> list[Frame]:
        """Every frame one socket read completes (at least one), so callers can answer in batches."""
        if self.pending:
            frames, self.pending = self.pending, []
            return frames
        frames = []
        while not frames:
            try:
                data = await self.stream.receive_some(READ_SIZE)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
                raise ClientError(f"{self.url.where()}: connection lost: {e}") from None
            if not data:
                raise ClientError(f"{self.url.where()}: the broker closed the connection")
            try:
                frames = self.parser.feed(data)
            except ProtocolError as e:
                raise ClientError(f"{self.url.where()}: not STOMP: {e}") from None
        return frames

    async def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> Frame:
        """Send a frame with a receipt and return the RECEIPT; ClientError with an ERROR's message.

        For a connection nothing else reads (no subscriptions): other frames are skipped.
        """
        self._receipts += 1
        receipt = f"r{self._receipts}"
        await self.send(Frame(command, {**headers, "receipt": receipt}, body))
        while True:
            frame = await self.next_frame()
            if frame.command == "ERROR":
                raise Refused(f"{self.url.where()}: {reason(frame)}")
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                return frame

    async def close(self) -> None:
        """DISCONNECT politely when possible, then close the socket."""
        with trio.move_on_after(5):
            try:
                await self.request("DISCONNECT", {})
            except ClientError:
                pass
        await self.stream.aclose()


def reason(frame: Frame) -> str:
    """An ERROR frame's message and the first line of its body, on one line."""
    message = frame.headers.get("message", frame.command)
    detail = frame.body.decode(errors="replace").strip().splitlines()
    return f"{message}: {detail[0]}" if detail and detail[0] != message else message


def run_client(main: Callable[..., Awaitable[T]], *args: object) -> T:
    """``trio.run``, with a ClientError raised inside a nursery raised as itself (one line, not a group)."""
    try:
        return trio.run(main, *args)
    except BaseExceptionGroup as group:
        error = client_error(group)
        if error is not None:
            raise error from None
        raise


def client_error(error: BaseException) -> ClientError | None:
    """The ClientError that ``error`` is or (from a nursery) holds, if any."""
    while isinstance(error, BaseExceptionGroup):
        errors = error.exceptions
        error = next((e for e in errors if isinstance(e, (ClientError, BaseExceptionGroup))), errors[0])
    return error if isinstance(error, ClientError) else None
