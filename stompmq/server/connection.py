"""One client connection: the frame path from the socket to the broker and back.

Theory of operation
-------------------
A connection is its transport (``server/transport.py``: bytes in, the outbox and its writer,
parking, the linger) and its STOMP session (``server/session.py``: login, vhost, permissions,
read gate, heart-beats, ERROR); this module is the reader that joins them, so a frame's path
reads as one loop.  Each connection runs its reader, and a writer when needed, in its own
nursery, and is watched by the server's heart-beat timer (``server/heartbeats.py``, one task for
every connection, which visits the session):

* the reader receives whatever the socket has (up to ``RECEIVE_BYTES``),
  parses the whole buffer into frames at once and hands them to the broker
  synchronously, consecutive session frames in one call (``Broker.handle_frames``:
  a producer sends hundreds of SENDs per read, a client-ack consumer as many ACKs);
  CONNECT, DISCONNECT, a vhost declaration and a frame the user's permissions
  refuse are the session's own and end such a run; it waits for nothing but the socket except
  at its read gate (``server/flow.py``: the reasons of ``broker/flow.py``, in order);
  on plain TCP, after a read of heart-beats only, it parks (``server/parking.py``);
* what the engine delivers goes out through the transport's outbox (``server/outbox.py``).

The loop keeps the transport, the session and the parser in locals: the split into two
objects costs the per-frame path no attribute look-up (docs/architecture.md, "server/").
After an ERROR or a DISCONNECT the connection lets the writer flush what is queued (RECEIPTs
included), half-closes the socket and, after an ERROR, lingers briefly so the peer reads it
before the close.  Whatever happens, ``finally`` hands the session back to the broker, which
requeues its unacked messages; no failure here reaches another connection.
"""

from __future__ import annotations

import itertools
import logging
import ssl
import time

import trio

from ..broker import Hold, Session
from ..protocol import Frame, ProtocolError
from .flow import AT_DISCONNECT, AT_SEND, BETWEEN_READS, ReadGate
from .heartbeats import HeartBeats
from .logins import CONNECT_MAX_BYTES
from .parking import Parking
from .runtime import Runtime
from .security import Admission, Security, peer_address
from .session import CONTROL, DECLARE_VHOST, GUARDED, SESSION_COMMANDS, ClientSession, Close
from .settings import ServerSettings
from .tokens import REFRESH_TOKEN
from .transport import RECEIVE_BYTES, Transport, linger, read

log = logging.getLogger(__name__)

#: Seconds a DISCONNECT waits for its RECEIPT's commit before closing anyway.
DISCONNECT_WAIT_SECONDS = 30.0

_ids = itertools.count(1)


class Connection:
    """One client: its transport, its STOMP session and the reader between them."""

    # Slots: an idle connection's attributes in a dict were 1.6 KiB of its ~17 (more than 30
    # attributes, so no key-sharing dict); so its transport and session have slots too.
    __slots__ = ("client", "frames_in", "id", "transport")

    def __init__(
        self,
        stream: trio.abc.Stream,
        runtime: Runtime,
        settings: ServerSettings,
        security: Security | None = None,
        admission: Admission | None = None,
        *,
        heart_beats: HeartBeats,
        parking: Parking | None = None,
    ) -> None:
        self.id = str(next(_ids))
        self.transport = transport = Transport(stream, runtime, self.id, parking)
        self.client = ClientSession(transport, runtime, settings, security, admission, peer_address(stream),
                                    heart_beats)
        self.frames_in = 0

    # -- what an operator sees (the management API, logs.CONNECTION) --------------------
    @property
    def peer(self) -> str:
        return self.transport.peer

    @property
    def since(self) -> float:
        return self.transport.since

    @property
    def bytes_in(self) -> int:
        return self.transport.bytes_in

    @property
    def bytes_out(self) -> int:
        return self.transport.bytes_out

    @property
    def session(self) -> Session | None:
        """The engine's session (None until CONNECTED)."""
        return self.client.session

    @property
    def login(self) -> str | None:
        return self.client.login

    @property
    def vhost(self) -> str:
        return self.client.vhost

    @property
    def gate(self) -> ReadGate:
        return self.client.gate

    @property
    def held(self) -> bool:
        return self.client.held

    def close(self, reason: str) -> None:
        """Close this connection with an ERROR saying ``reason`` (an administrator asked)."""
        self.client.fail(reason, None)

    # -- running --------------------------------------------------------------------------
    async def run(self) -> None:
        transport, client = self.transport, self.client
        try:
            async with trio.open_nursery() as nursery:
                transport.nursery = nursery
                if transport.fd < 0:
                    transport.start_writer()
                client.start()
                with transport.read_scope:
                    try:
                        await self._reader()
                    except Close:
                        pass
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
                        transport.broken = True
                        if transport.bytes_in == 0 and isinstance(e.__cause__, ssl.SSLError):
                            log.info("connection %s from %s: TLS handshake failed: %s", self.id, transport.peer,
                                     e.__cause__.reason or e.__cause__)
                if not transport.broken:
                    await self._finish()
                nursery.cancel_scope.cancel()
        except Exception:
            log.exception("connection %s failed", self.id)
        finally:
            client.beat_token = None  # the timer forgets this connection
            transport.outbox.close()
            session = client.session
            if session is not None:
                client.close()
                log.info(
                    "connection %s from %s: disconnected after %.1f s, login %r, %d frames, %d bytes in, %d out",
                    self.id, transport.peer, time.time() - transport.since, session.login, self.frames_in,
                    transport.bytes_in, transport.bytes_out,
                )
            await transport.aclose()

    async def _reader(self) -> None:
        transport, client = self.transport, self.client
        stream, parser, gate, runtime, fd, parking = (
            transport.stream, client.parser, client.gate, client.runtime, transport.fd, transport.parking)
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        idle = False  # the last read was heart-beats only: park (parking.py)
        frame: Frame | None = None
        run: list[Frame] = []  # session frames for the broker, in one call
        while True:
            if gate.shut():  # the last read's reasons (topic, pacing, the engine), then its outbox, the store
                await self._wait(BETWEEN_READS)
            if client.session is None:  # not logged in: a CONNECT frame's worth, no more
                room = CONNECT_MAX_BYTES - transport.bytes_in
                if room <= 0:
                    client.error(f"CONNECT frame exceeds {CONNECT_MAX_BYTES} bytes")
                room = min(room, RECEIVE_BYTES)
            else:
                room = RECEIVE_BYTES
            transport.last_recv = trio.current_time()  # silence is measured from here (``listening``)
            transport.listening = True
            if fd < 0:  # (what a held reader's peer watch read first: ``Transport._read_rest``)
                data = transport.take_unread() or await stream.receive_some(room)
            elif idle and parking is not None and sock is not None:
                frame, run = None, []  # an idle connection keeps no frame alive (the CONNECT, say)
                data = await parking.park(sock, transport)
            else:
                data = await read(fd, room)
            transport.listening = False
            if not data:
                return
            transport.bytes_in += len(data)
            try:
                frames = parser.feed(data)
            except ProtocolError as e:
                client.error(e.message, e.receipt_id)
            if not frames:  # heart-beats (or part of a frame): nothing for the engines
                idle = client.session is not None and parser.between_frames
                continue
            idle = False
            runtime.tick()
            self.frames_in += len(frames)
            if log.isEnabledFor(logging.DEBUG):  # once per read, not per frame
                for frame in frames:
                    headers = frame.headers
                    if "passcode" in headers:  # a CONNECT's: never in a log
                        headers = {**headers, "passcode": "***"}
                    log.debug("connection %s: %s %s", self.id, frame.command, headers)
            run = []
            for frame in frames:
                command = frame.command
                if command == "SEND" and runtime.alarms.active and client.session is not None and not \
                        frame.headers.get("destination", "").startswith(CONTROL):  # a purge frees space
                    if run:
                        client.on_run(run)
                        run = []
                    await self._wait(AT_SEND)  # until every resource alarm has cleared
                if command == "SEND" and client.session is not None and \
                        frame.headers.get("destination") == REFRESH_TOKEN:
                    if run:
                        client.on_run(run)
                        run = []
                    await client.refresh_token(frame)
                    continue
                if command in SESSION_COMMANDS and client.session is not None:
                    # Those the session answers itself, or refuses, end the run (on_frame).
                    if not (command == "SEND" and frame.headers.get("destination", "").startswith(DECLARE_VHOST)
                            or client.user is not None and command in GUARDED and client.refused(frame) is not None):
                        run.append(frame)
                        continue
                if run:
                    client.on_run(run)
                    run = []
                if client.errored:  # failed from outside (a slow topic subscriber disconnected)
                    raise Close
                if client.session is None and command in ("CONNECT", "STOMP"):
                    await client.authenticate(frame)
                if command == "DISCONNECT" and client.session is not None:
                    await self._wait(AT_DISCONNECT)  # its RECEIPT follows every frame's
                client.on_frame(frame)
            if run:
                client.on_run(run)

    async def _wait(self, reasons: tuple[Hold, ...]) -> None:
        """Read nothing from the peer while any of ``reasons`` holds (``ReadGate.wait``); end the
        connection if it failed meanwhile, or if its peer went away (looked at every
        ``PEER_CHECK_SECONDS``, through TLS and WebSocket too: ``Transport.watching_peer``): its
        session then closes, releasing its transactions and unacked messages, instead of waiting
        for a hold that may never end."""
        transport, client = self.transport, self.client
        if transport.socket_fd < 0 or reasons is AT_DISCONNECT:  # (a peer may half-close after its DISCONNECT)
            waited: bool | None = await client.gate.wait(reasons)
        else:
            waited = await transport.watching_peer(lambda: client.gate.wait(reasons))
            if waited is None:
                log.info("connection %s from %s: the peer went away while its reader was held", self.id,
                         transport.peer)
                transport.broken = True  # nobody to send an ERROR to
                raise Close
        if waited and client.errored:
            raise Close

    async def _finish(self) -> None:
        """Flush what is queued (receipts included), then close, lingering after an ERROR."""
        transport, client = self.transport, self.client
        with trio.move_on_after(DISCONNECT_WAIT_SECONDS):
            session = client.session
            if transport.broken:
                return
            # Each released RECEIPT is written to the outbox, so wait for writes, not for time.
            while session is not None and session.pending_receipts and not client.errored and not transport.broken:
                await transport.outbox.wait_written()
            await transport.outbox.wait_drained()
        if client.errored:
            await linger(transport.stream)
