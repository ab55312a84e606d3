"""One client connection: bytes from the socket to the broker and back.

Theory of operation
-------------------
Each connection runs its reader, and a writer when needed, in its own nursery, and is watched
by the server's heart-beat timer (``server/heartbeats.py``, one task for every connection):

* the reader receives whatever the socket has (up to ``RECEIVE_BYTES``),
  parses the whole buffer into frames at once and hands them to the broker
  synchronously, consecutive session frames in one call (``Broker.handle_frames``:
  a producer sends hundreds of SENDs per read, a client-ack consumer as many ACKs);
  CONNECT, DISCONNECT, a vhost declaration and a frame the user's permissions
  refuse are the server's own and end such a run; it waits for nothing but the socket except
  at its read gate (``server/flow.py``: the reasons of ``broker/flow.py``, in order);
  on plain TCP, after a read of heart-beats only, it parks (``server/parking.py``): one task
  reads every idle socket's beats (``heard``) and hands it the first other bytes as its read;
* on plain TCP what the outbox holds goes out with one ``write(2)`` when a batch flushes it
  (``WriteBatch``, ``_flush``): at the end of a reader's engine call for what that call
  delivered, at the batch task's next turn for anything else; a writer task runs only while
  the socket does not take everything (or for large bodies: one ``sendmsg``, each body by
  reference, not copied into a frame) and ends once the outbox is empty, so an idle connection
  is one task.  Through TLS or WebSocket a writer runs for the connection's life and sends
  everything with one ``send_all``;
* the timer's visits (``check``) enforce the CONNECT deadline, send heart-beats
  and close a peer that went silent for longer than its heart-beat allows (times
  the grace factor).

A STOMP error anywhere (``ProtocolError`` from the parser, ``ClientError``
from the broker) queues an ERROR frame, lets the writer flush it, half-closes
the socket and lingers briefly so the peer reads the ERROR before the close.
Until CONNECTED a connection may send ``CONNECT_MAX_BYTES`` in all (its reads are
cut to what is left), and it must be CONNECTED within ``--connect-timeout``; the
admission it was served under (``Security.admit``) holds that much of the login
budget until then.  When the broker has users (``Security.users``), CONNECT's
password is checked off the event loop (``Security.check_password``): refused at
once while its (address, login) backs off after failures; frames after CONNECT in
the same read wait for it.  A client certificate alone logs in only with
``--tls-cert-login``.
CONNECT's ``host`` header picks the vhost (``server/vhosts.py``) and with it the
engine the session lives in; an unknown vhost, or one the user has no
permissions on, is an ERROR.  SEND and SUBSCRIBE are then checked against the
user's permissions on that vhost, as the users file says now (a reload applies
to open connections too); a denial is an ERROR ``access refused`` and the close.
Whatever happens, ``finally`` hands the session back to the broker, which
requeues its unacked messages; no failure here reaches another connection.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import math
import os
import select
import ssl
import termios
import time
from typing import NoReturn

import trio

from .. import __version__
from ..broker import ClientError, Session
from ..broker.limits import LimitError
from ..broker.flow import Hold
from ..client import RELAY_HEADER
from ..protocol import (
    Frame,
    FrameParser,
    ProtocolError,
    connected_heart_beat,
    encode_frame,
    heart_beat_intervals,
    negotiate_version,
    parse_heart_beat,
)
from ..vhost_names import DEFAULT_VHOST, vhost_name_error
from .auth import IMPERSONATOR, Permission, User, required_permissions
from .flow import AT_DISCONNECT, AT_SEND, BETWEEN_READS, ReadGate
from .heartbeats import HeartBeats
from .outbox import SOFT_LIMIT, ConnectionOutbox
from .parking import Parking
from .logins import CONNECT_MAX_BYTES
from .runtime import Runtime
from .security import Admission, LoginThrottled, Security, certificate_login, peer_address
from .settings import ServerSettings
from .tokens import EXPIRED_MESSAGE, REFRESH_TOKEN, TOKEN_HEADER, TokenError, TokenLease, looks_like_jwt
from .vhosts import machine_names, vhost_for_host

log = logging.getLogger(__name__)

#: Bytes asked of the socket per receive: large enough to parse hundreds of frames per call.
RECEIVE_BYTES = 256 * 1024
#: Seconds an ERROR'd connection waits for the peer to close before closing itself.
LINGER_SECONDS = 1.0
#: Seconds a DISCONNECT waits for its RECEIPT's commit before closing anyway.
DISCONNECT_WAIT_SECONDS = 30.0
#: Heart-beats go out at this fraction of the negotiated interval: the timer's and the writer's
#: latency must not stretch a gap past the interval ("at least every n ms"; stomp.py checks).
BEAT_EARLY = 0.9
#: Destinations of management verbs: a resource alarm holds no SEND to them (server/alarms.py).
CONTROL = "/control/"
#: The /control verb that declares a vhost: the server's, not an engine's (engines live in vhosts).
DECLARE_VHOST = "/control/declare/vhost/"
#: Commands the broker handles after CONNECT (anything else is an unknown command).
SESSION_COMMANDS = frozenset({"SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT"})
#: Commands checked against the user's permissions on the vhost.
GUARDED = frozenset({"SEND", "SUBSCRIBE"})

_ids = itertools.count(1)


async def linger(stream: trio.abc.Stream) -> None:
    """Half-close and read until the peer closes (at most ``LINGER_SECONDS``): closing with
    unread input would reset the connection and could discard the ERROR just sent."""
    with trio.move_on_after(LINGER_SECONDS):
        try:
            if isinstance(stream, trio.abc.HalfCloseableStream):  # TLS 1.2 cannot half-close
                await stream.send_eof()
            while await stream.receive_some(RECEIVE_BYTES):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def refuse(stream: trio.abc.Stream, message: str) -> None:
    """Answer a connection the server will not serve with an ERROR frame, then close it."""
    try:
        with trio.move_on_after(LINGER_SECONDS):
            error = Frame("ERROR", {"message": message, "content-type": "text/plain"}, message.encode())
            await stream.send_all(encode_frame(error, "1.0"))
        await linger(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


#: Seconds between two looks, while the reader is held (pacing, the store, an alarm), at
#: whether the peer went away: it is not reading its socket, so it would not see the EOF.
PEER_CHECK_SECONDS = 1.0
#: A socket the peer reset or errored (whatever is unread is lost anyway) ...
_BROKEN_EVENTS = select.POLLHUP | select.POLLERR
#: ... or closed for writing (Linux's POLLRDHUP), which counts only when nothing is left unread:
#: a producer that sent its frames and closed still has them stored once the hold ends.
_CLOSED_EVENTS = getattr(select, "POLLRDHUP", 0)


def _peer_gone(fd: int) -> bool:
    """Has the peer of the TCP socket ``fd`` reset it, or closed it with nothing left unread?"""
    poller = select.poll()
    poller.register(fd, _BROKEN_EVENTS | _CLOSED_EVENTS)
    events = poller.poll(0)
    if not events:
        return False
    mask = events[0][1]
    if mask & (_BROKEN_EVENTS | select.POLLNVAL):
        return True
    unread = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, unread)
    return int.from_bytes(unread, "little") == 0


class _Close(Exception):
    """End the connection (after an ERROR or a DISCONNECT)."""


class Connection:
    # Slots: an idle connection's attributes in a dict were 1.6 KiB of its ~17 (more than 30
    # attributes, so no key-sharing dict); ``__weakref__`` for the heart-beat timer's wheel.
    __slots__ = (
        "__weakref__", "_broken", "_errored", "_fd", "_heart_beats", "_nursery", "_parking", "_read_scope", "_writing",
        "address", "admission",
        "beat_token", "broker", "bytes_in", "bytes_out", "expect_every", "frames_in", "gate", "id",
        "last_recv", "last_send", "lease", "listening", "login", "outbox", "parser", "peer", "runtime", "security",
        "send_every", "session", "settings", "since", "stream", "user", "version", "vhost",
    )

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
        self.stream = stream
        self.security = security
        self.admission = admission
        self.address = peer_address(stream)  # the IP address: the key of the per-address limits
        #: The user when the broker has users; None = everything allowed.
        self.user: User | None = None
        self.login: str | None = None
        #: A token login's lease (tokens.py): the session ends at its deadline unless refreshed.
        self.lease: TokenLease | None = None
        self.vhost = DEFAULT_VHOST  # chosen at CONNECT
        self.runtime = runtime
        self.broker = runtime.broker
        self.settings = settings
        self.id = str(next(_ids))
        #: Plain TCP: reads wait for the socket and then read (``_read``); bytes the socket takes
        #: at once go out with one write(2) from the batch that flushes the outbox (outbox.py:
        #: ``WriteBatch``), and a writer task runs only while the socket does not take them all;
        #: -1: TLS or WebSocket, always through the stream, by a writer task for the connection's life.
        self._fd = stream.socket.fileno() if type(stream) is trio.SocketStream else -1
        self.outbox = ConnectionOutbox(batch=runtime.writes if self._fd >= 0 else None)
        if self._fd >= 0:
            self.outbox.flush = self._flush
        self._nursery: trio.Nursery | None = None  # where a writer starts, while the connection runs
        self._writing = False  # a writer task runs
        self.parser = FrameParser(settings.limits)
        self.session: Session | None = None
        self.version = "1.2"  # for frames we send before negotiation
        self.last_recv = trio.current_time()
        self.last_send = self.last_recv
        self.send_every = 0.0  # seconds between our heart-beats, 0 = none
        self.expect_every = 0.0  # seconds the peer may stay silent, 0 = forever
        #: Where the reader waits when not on the socket (server/flow.py); ``gate.reason`` says why.
        self.gate = ReadGate(runtime, settings, self.outbox)
        #: The reader waits on the socket: only then can the peer's silence be measured.  Anywhere
        #: else (at its ``gate``: held by the store, an alarm, pacing, its outbox, the engine) its
        #: heart-beats wait unread, and that time is not silence.
        self.listening = False
        self._errored = False
        self._broken = False  # the socket failed: nothing more can be sent
        self._read_scope = trio.CancelScope()
        self._heart_beats = heart_beats
        self.beat_token: int | None = None  # the heart-beat timer's entry (HeartBeats.watch)
        #: Where the reader parks between heart-beats (plain TCP only; server/parking.py).
        self._parking = parking if self._fd >= 0 else None
        # What an operator sees (the management API, the connect/disconnect log lines).
        self.peer = _peer(stream)
        self.since = time.time()
        self.bytes_in = self.bytes_out = self.frames_in = 0

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._fd < 0:
                    self._start_writer()
                self._heart_beats.watch(self, trio.current_time() + self.settings.connect_timeout)
                with self._read_scope:
                    try:
                        await self._reader()
                    except _Close:
                        pass
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
                        self._broken = True
                        if self.bytes_in == 0 and isinstance(e.__cause__, ssl.SSLError):
                            log.info("connection %s from %s: TLS handshake failed: %s", self.id, self.peer,
                                     e.__cause__.reason or e.__cause__)
                if not self._broken:
                    await self._finish()
                nursery.cancel_scope.cancel()
        except Exception:
            log.exception("connection %s failed", self.id)
        finally:
            self.beat_token = None  # the timer forgets this connection
            self.outbox.close()
            if self.session is not None:
                try:
                    self.runtime.tick()
                    self.broker.close_session(self.session)
                except Exception:  # escaping here would take down every connection
                    log.exception("connection %s: closing its session failed", self.id)
                log.info(
                    "connection %s from %s: disconnected after %.1f s, login %r, %d frames, %d bytes in, %d out",
                    self.id, self.peer, time.time() - self.since, self.session.login, self.frames_in,
                    self.bytes_in, self.bytes_out,
                )
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    # -- reading ----------------------------------------------------------------
    async def _reader(self) -> None:
        stream, parser, gate, runtime, fd, parking = (
            self.stream, self.parser, self.gate, self.runtime, self._fd, self._parking)
        sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        idle = False  # the last read was heart-beats only: park (parking.py)
        frame: Frame | None = None
        run: list[Frame] = []  # session frames for the broker, in one call
        while True:
            if gate.shut():  # the last read's reasons (topic, pacing, the engine), then its outbox, the store
                await self._wait(BETWEEN_READS)
            if self.session is None:  # not logged in: a CONNECT frame's worth, no more
                room = CONNECT_MAX_BYTES - self.bytes_in
                if room <= 0:
                    self._error(f"CONNECT frame exceeds {CONNECT_MAX_BYTES} bytes")
                room = min(room, RECEIVE_BYTES)
            else:
                room = RECEIVE_BYTES
            self.last_recv = trio.current_time()  # silence is measured from here (``listening``)
            self.listening = True
            if fd < 0:
                data = await stream.receive_some(room)
            elif idle and parking is not None and sock is not None:
                frame, run = None, []  # an idle connection keeps no frame alive (the CONNECT, say)
                data = await parking.park(sock, self)
            else:
                data = await _read(fd, room)
            self.listening = False
            if not data:
                return
            self.bytes_in += len(data)
            try:
                frames = parser.feed(data)
            except ProtocolError as e:
                self._error(e.message, e.receipt_id)
            if not frames:  # heart-beats (or part of a frame): nothing for the engines
                idle = self.session is not None and parser.between_frames
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
                if command == "SEND" and runtime.alarms.active and self.session is not None and not \
                        frame.headers.get("destination", "").startswith(CONTROL):  # a purge frees space
                    if run:
                        self._on_run(run)
                        run = []
                    await self._wait(AT_SEND)  # until every resource alarm has cleared
                if command == "SEND" and self.session is not None and \
                        frame.headers.get("destination") == REFRESH_TOKEN:
                    if run:
                        self._on_run(run)
                        run = []
                    await self._refresh_token(frame)
                    continue
                if command in SESSION_COMMANDS and self.session is not None:
                    # Those the server answers itself, or refuses, end the run (_on_frame).
                    if not (command == "SEND" and frame.headers.get("destination", "").startswith(DECLARE_VHOST)
                            or self.user is not None and command in GUARDED and self._refused(frame) is not None):
                        run.append(frame)
                        continue
                if run:
                    self._on_run(run)
                    run = []
                if self._errored:  # failed from outside (a slow topic subscriber disconnected)
                    raise _Close
                if self.session is None and command in ("CONNECT", "STOMP"):
                    await self._authenticate(frame)
                if command == "DISCONNECT" and self.session is not None:
                    await self._wait(AT_DISCONNECT)  # its RECEIPT follows every frame's
                self._on_frame(frame)
            if run:
                self._on_run(run)

    async def _wait(self, reasons: tuple[Hold, ...]) -> None:
        """Read nothing from the peer while any of ``reasons`` holds (``ReadGate.wait``); end the
        connection if it failed meanwhile, or if its peer went away (looked at every
        ``PEER_CHECK_SECONDS`` on a plain TCP socket): its session then closes, releasing its
        transactions and unacked messages, instead of waiting for a hold that may never end."""
        fd = self._fd
        if fd < 0 or reasons is AT_DISCONNECT:  # (a peer may half-close after its DISCONNECT)
            waited = await self.gate.wait(reasons)
        else:
            gone = False
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    nonlocal gone
                    while not gone:
                        await trio.sleep(PEER_CHECK_SECONDS)
                        gone = _peer_gone(fd)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                waited = await self.gate.wait(reasons)
                nursery.cancel_scope.cancel()
            if gone:
                log.info("connection %s from %s: the peer went away while its reader was held", self.id, self.peer)
                self._broken = True  # nobody to send an ERROR to
                raise _Close
        if waited and self._errored:
            raise _Close

    @property
    def held(self) -> bool:
        """The reader waits for the store or an alarm (the API's "held")."""
        return self.gate.reason is Hold.STORE or self.gate.reason is Hold.ALARM

    def _on_frame(self, frame: Frame) -> None:
        session = self.session
        command = frame.command
        if session is None:
            if command not in ("CONNECT", "STOMP"):
                self._error(f"expected CONNECT, got {command}", frame.headers.get("receipt"))
            self._connect(frame)
            return
        if command in SESSION_COMMANDS:  # the reader hands the rest to the broker in runs
            if command == "SEND" and frame.headers.get("destination", "").startswith(DECLARE_VHOST):
                self._declare_vhost(session, frame)
            else:
                self._authorise(frame)  # a frame the user's permissions refuse: ERROR
                self._on_run([frame])
        elif command == "DISCONNECT":
            receipt = frame.headers.get("receipt")
            if receipt is not None:
                self.broker.receipt(session, receipt)
            raise _Close
        elif command in ("CONNECT", "STOMP"):
            self._error("already connected", frame.headers.get("receipt"))
        else:
            self._error(f"unknown command {command!r}", frame.headers.get("receipt"))

    def _on_run(self, frames: list[Frame]) -> None:
        """Session frames of one read that the broker takes as they are: one broker call (it
        names the bad frame's receipt when one fails)."""
        if self._errored:  # failed from outside (a slow topic subscriber disconnected)
            raise _Close
        assert self.session is not None
        writes = self.runtime.writes
        writes.open = True  # the deliveries go out at its close, not by waking each writer
        try:
            self.broker.handle_frames(self.session, frames)
        except ClientError as e:
            if isinstance(e, LimitError):
                self.broker.config.limit_hits.hit(e, self.session.login)
            self._error(e.message, e.receipt_id)
        except Exception:  # handle_frames turns errors into ClientError; this is the last resort
            log.exception("connection %s: internal error handling %d frames", self.id, len(frames))
            self._error("internal error")
        finally:
            writes.close()

    def _connect(self, frame: Frame) -> None:
        headers = frame.headers
        version = negotiate_version(headers.get("accept-version"))
        if version is None:
            self._error(
                "no common STOMP version: this server speaks 1.0, 1.1 and 1.2",
                extra={"version": "1.0,1.1,1.2"},
            )
        self.version = version
        settings = self.settings
        try:
            client_beats = parse_heart_beat(headers.get("heart-beat"))
        except ProtocolError as e:
            self._error(e.message)
        send_ms, expect_ms = heart_beat_intervals(client_beats, settings.heart_beat)
        self._enter_vhost(headers)
        relay = self._relay(headers)
        self.send_every = send_ms / 1000
        self.expect_every = expect_ms / 1000
        self.parser.version = version
        self.session = session = self.broker.open_session(
            self.id, version, self.outbox, self.login or headers.get("login"), headers.get("client-id"), relay
        )
        self.gate.enter(self.broker, session)
        self._heart_beats.watch(self, trio.current_time())  # heart-beats start now
        if self.admission is not None:
            self.admission.logged_in()
        self.outbox.on_drain = self._resume
        session.fail = self.fail
        connected = {
            "version": version,
            "heart-beat": "%d,%d" % connected_heart_beat(client_beats, settings.heart_beat),
            "server": f"stompmq/{__version__}",
            "session": self.id,
        }
        self.outbox.write(encode_frame(Frame("CONNECTED", connected), version))
        log.info("connection %s from %s: connected, login %r, vhost %s, STOMP %s", self.id, self.peer, session.login,
                 self.vhost, version)

    def _enter_vhost(self, headers: dict[str, str]) -> None:
        """Pick the vhost (and its engine) CONNECT's ``host`` names; ERROR if it is unknown or the
        user has no permissions on it."""
        host = headers.get("host")
        vhost = vhost_for_host(host, self.runtime.engines, machine_names(self.settings.host_names))
        if vhost is None:
            log.warning("connection %s: unknown vhost %r from %s, login %r", self.id, host, self.peer, self.login)
            self._error(f"unknown vhost {host!r}", headers.get("receipt"))
        if self.user is not None and vhost not in self.user.permissions:
            log.warning("connection %s: user %r from %s has no access to vhost %s", self.id, self.login,
                        self.peer, vhost)
            self._error(f"access refused: no permissions on vhost {vhost}", headers.get("receipt"))
        self.vhost = vhost
        self.broker = self.runtime.engines[vhost]

    def _relay(self, headers: dict[str, str]) -> bool:
        """CONNECT's ``relay:true``: this client forwards what another broker said (a shovel), so
        its SENDs keep the broker's headers and others' user-id (``broker/send_headers.py``).
        With users only a user tagged ``impersonator`` is a relay; anyone without users (who may
        do everything anyway).  Another user saying so is an ordinary client, with one WARNING:
        a shovel into this broker keeps moving messages, without the headers it relays."""
        value = headers.get(RELAY_HEADER)
        if value is None or value.lower() == "false":
            return False
        if value.lower() != "true":
            self._error(f"{RELAY_HEADER} must be true or false, not {value!r}", headers.get("receipt"))
        if self.user is not None and IMPERSONATOR not in self.user.tags:
            log.warning("connection %s: user %r from %s is no relay (no %s tag): its SENDs lose the broker's "
                        "headers and may name only its own user-id", self.id, self.login, self.peer, IMPERSONATOR)
            return False
        return True

    def _declare_vhost(self, session: Session, frame: Frame) -> None:
        """``/control/declare/vhost/NAME``: administrators only (anyone without users)."""
        name = frame.headers["destination"][len(DECLARE_VHOST):]
        receipt = frame.headers.get("receipt")
        user = self._current_user()
        if self.user is not None and (user is None or "administrator" not in user.tags):
            log.warning("connection %s: access refused: declare vhost %r for user %r from %s", self.id, name,
                        self.login, self.peer)
            self._error(f"access refused: declaring vhost {name!r} needs the administrator tag", receipt)
        error = vhost_name_error(name)
        if error is not None:
            self._error(error, receipt)
        self.runtime.tick()
        self.runtime.declare(name)
        if receipt is not None:
            self.broker.receipt(session, receipt)  # after the commit that stores the vhost

    async def _authenticate(self, frame: Frame) -> None:
        """Check CONNECT's credentials (or, with --tls-cert-login, the client certificate's CN)
        against the users.

        Without users, a verified client certificate's CN is still the session's login (a name
        for logs and the management API: without users everybody may do everything anyway).
        """
        security = self.security
        cert_login = certificate_login(self.stream)
        if security is None or security.users is None:
            self.login = cert_login
            return
        headers = frame.headers
        login, passcode = headers.get("login"), headers.get("passcode")
        token = passcode if looks_like_jwt(passcode) else None if passcode else getattr(self.stream, "bearer", None)
        user: User | None
        if security.tokens is not None and token is not None:
            user, self.lease = await self._token_user(token, headers.get("receipt"))
        elif (self.settings.tls_cert_login and cert_login is not None and login in (None, cert_login)
                and passcode is None):
            user = security.users.users.get(cert_login)  # the certificate authenticated it
        else:
            try:
                user = await security.check_password(self.address, login, passcode)
            except LoginThrottled as e:
                log.warning("connection %s: login %r from %s refused: %s", self.id, login, self.peer, e.message)
                self._error(e.message, headers.get("receipt"))
        if user is None:
            log.warning("connection %s: failed login %r from %s", self.id, login, self.peer)
            # Never say whether the user or the passcode was wrong.
            self._error("bad login or passcode", headers.get("receipt"))
        if self.admission is not None and not self.admission.count_user(user.name):
            error = LimitError("max-connections-per-user", f"user {user.name!r} has "
                               f"{self.settings.max_connections_per_user} connections open already")
            self.broker.config.limit_hits.hit(error, user.name)
            self._error(error.message, headers.get("receipt"))
        self.login = user.name
        self.user = user

    async def _token_user(self, token: str, receipt: str | None) -> tuple[User, TokenLease]:
        """The user and lease of an access token (tokens.py); ERROR if it logs nobody in."""
        assert self.security is not None
        try:
            return await self.security.check_token(token, self.runtime.engines)
        except TokenError as e:
            log.warning("connection %s: token login from %s refused: %s", self.id, self.peer, e)
            self._error(f"bad access token: {e}", receipt)

    async def _refresh_token(self, frame: Frame) -> None:
        """A fresh token for a token session (``REFRESH_TOKEN``, ``Security.refresh_token``)."""
        receipt = frame.headers.get("receipt")
        assert self.session is not None
        if self.security is None:
            self._error(f"{REFRESH_TOKEN} needs a token login", receipt)
        try:
            self.user, self.lease = await self.security.refresh_token(self.lease, frame.headers.get(TOKEN_HEADER),
                                                                      self.runtime.engines)
        except TokenError as e:
            self._error(f"bad access token: {e}", receipt)
        if receipt is not None:
            self.broker.receipt(self.session, receipt)

    def _current_user(self) -> User | None:
        """The logged-in user as the users file (or a token login's token) says now (None if it
        was deleted, or no users)."""
        if self.lease is not None:
            return self.user
        users = self.security.users if self.security is not None else None
        return users.users.get(self.login or "") if users is not None else self.user

    def _permission(self) -> Permission | None:
        """The user's permissions on this vhost as the users file says now (None: none left)."""
        user = self._current_user()
        return user.permissions.get(self.vhost) if user is not None else None

    def _refused(self, frame: Frame) -> tuple[str, str] | None:
        """What the user may not do in ``frame``, if anything: (action, resource)."""
        permission = self._permission()
        session = self.session
        assert session is not None  # checked after CONNECT only
        for action, resource in required_permissions(frame.command, frame.headers, session.login, session.client_id):
            if permission is None or not permission.allows(action, resource):
                return action, resource
        return None

    def _authorise(self, frame: Frame) -> None:
        """ERROR and close unless the user may do ``frame`` to its destination."""
        refused = self._refused(frame)
        if refused is not None:
            action, resource = refused
            log.warning("connection %s: access refused: %s to %s in vhost %s for user %r from %s", self.id, action,
                        resource, self.vhost, self.login, self.peer)
            self._error(f"access refused: {action} access to {resource} in vhost {self.vhost} "
                        f"refused to user {self.login}", frame.headers.get("receipt"))

    def _resume(self) -> None:
        """The outbox drained: the engine may deliver to this connection again."""
        if self.session is not None:
            self.runtime.tick()
            self.broker.resume(self.session)

    def _error(
        self, message: str, receipt_id: str | None = None, extra: dict[str, str] | None = None
    ) -> NoReturn:
        """Queue an ERROR frame and end the connection (STOMP: ERROR, then close)."""
        headers = {"message": message.replace("\n", " ").replace("\r", " ")}
        if receipt_id is not None:
            headers["receipt-id"] = receipt_id
        if extra:
            headers.update(extra)
        headers["content-type"] = "text/plain"
        self.outbox.write(encode_frame(Frame("ERROR", headers, message.encode()), self.version))
        self._errored = True
        log.info("connection %s from %s: ERROR %s", self.id, self.peer, message)
        # The session ends with the ERROR, not after the linger: requeue what it holds at once
        # and deliver nothing more to a connection that will never ACK it.
        if self.session is not None and not self.session.closed:
            try:
                self.runtime.tick()
                self.broker.close_session(self.session)
            except Exception:
                log.exception("connection %s: closing its session failed", self.id)
        raise _Close

    def fail(self, message: str, receipt_id: str | None) -> None:
        """The broker failed this session from outside a frame (e.g. a commit failed)."""
        try:
            self._error(message, receipt_id)
        except _Close:
            pass
        self._read_scope.cancel()

    # -- closing ------------------------------------------------------------------
    async def _finish(self) -> None:
        """Flush what is queued (receipts included), then close, lingering after an ERROR."""
        with trio.move_on_after(DISCONNECT_WAIT_SECONDS):
            session = self.session
            if self._broken:
                return
            # Each released RECEIPT is written to the outbox, so wait for writes, not for time.
            while session is not None and session.pending_receipts and not self._errored:
                await self.outbox.wait_written()
            await self.outbox.wait_drained()
        if self._errored:
            await linger(self.stream)

    # -- writing ------------------------------------------------------------------
    def _flush(self) -> None:
        """Plain TCP: the outbox has output, flushed by a batch (outbox.py: ``WriteBatch``).  Send
        what the socket takes now; a writer sends the rest (or all, while one runs)."""
        outbox = self.outbox
        if self._writing or self._broken or outbox.closed:  # (closed: so is the fd)
            outbox.wake()
            return
        if outbox.holds_bodies:  # large bodies go by the writer's sendmsg
            self._start_writer()
            return
        data = outbox.take_now()
        outbox.sending_since = now = trio.current_time()
        try:
            done = _write_now(self._fd, data)
        except OSError:  # the writer's send meets it too, and ends the connection
            done = 0
        if done < len(data):
            outbox.put_back(data[done:])
            self._start_writer()
        if not done:
            outbox.sending_since = None
            return
        try:
            self._sent(done, now)
        except Exception:  # in another connection's reader: this connection's failure only
            log.exception("connection %s: settling what it sent failed", self.id)
            self.fail("internal error", None)

    def _beat(self, now: float) -> None:
        """Send a heart-beat: on plain TCP with one write(2) here (the outbox is empty and no
        writer runs: nothing can go before it), else through the outbox."""
        if self._fd >= 0 and not self._writing and not self._broken and not self.outbox.closed:
            try:
                done = _write_now(self._fd, b"\n")
            except OSError:  # the reader meets it too, and ends the connection
                done = 0
            if done:
                self.outbox.beat_sent()
                self.last_send = now
                self.bytes_out += 1
                return
        self.outbox.write(b"\n")

    def _sent(self, nbytes: int, now: float) -> None:
        """``nbytes`` reached the socket: the outbox's, the API's and the engine's bookkeeping."""
        self.last_send = now
        self.outbox.sent(nbytes, now)
        self.bytes_out += nbytes
        session = self.session
        if session is not None and session.unsent:  # auto-ack deliveries reached the socket
            self.runtime.tick()
            self.broker.written(session, self.outbox.sent_total)

    def _start_writer(self) -> None:
        """Start a writer task: for the connection's life (TLS, WebSocket), or on plain TCP until
        the outbox is empty (the socket did not take everything at once).  Not per message: at
        normal rates the socket takes every flush whole."""
        assert self._nursery is not None
        self._writing = True
        self._nursery.start_soon(self._writer)

    async def _writer(self) -> None:
        try:
            await self._write()
        finally:
            self._writing = False

    async def _write(self) -> None:
        outbox, stream, fd = self.outbox, self.stream, self._fd
        # Large bodies go by reference with sendmsg (scatter/gather), which needs the socket
        # itself: TLS and WebSocket streams get everything joined into one buffer.
        sock = stream.socket if fd >= 0 and isinstance(stream, trio.SocketStream) else None
        # After large bodies it waits for the next batch (they come in runs: a task per batch cost
        # 64 KiB messages about a tenth of their rate); after anything else it ends once nothing is left.
        bodies = False
        while fd < 0 or bodies or outbox.has_output:
            if sock is None:
                data = await outbox.take()
            else:
                buffers = await outbox.take_buffers()
                bodies = len(buffers) > 1
                if bodies:
                    if not await self._send_buffers(sock, buffers):
                        return
                    continue
                data = buffers[0]
            size = len(data)
            # a batch far above the soft limit (topic traffic backing up) goes in pieces: the
            # outbox learns of progress (room for waiting publishers, its drain rate) every
            # SEND_PIECE bytes, not only at the end.  Queue deliveries stop at the soft limit and
            # go whole: telling the engine of progress mid-batch (on_drain) doubled their cost.
            view = memoryview(data) if size > PIECES_ABOVE else None
            start = 0
            waited = False  # send_all checkpointed
            while start < size:
                piece = data if view is None else view[start : start + SEND_PIECE]
                outbox.sending_since = trio.current_time()
                try:
                    done = _write_now(fd, piece) if fd >= 0 else 0
                    if done < len(piece):
                        waited = True
                        await stream.send_all(memoryview(piece)[done:] if done else piece)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._broken = True
                    self._read_scope.cancel()
                    return
                self._sent(len(piece), trio.current_time())
                start += len(piece)
            if outbox.size and not waited:  # more was written meanwhile: let the others run first
                await trio.lowlevel.checkpoint()

    async def _send_buffers(self, sock: trio.socket.SocketType, buffers: list[bytes]) -> bool:
        """Send ``buffers`` with ``sendmsg``, telling the outbox of progress as for one buffer
        (at the end, or every SEND_PIECE bytes of a batch above PIECES_ABOVE); False: the socket
        broke."""
        outbox = self.outbox
        size = sum(map(len, buffers))
        report_every = SEND_PIECE if size > PIECES_ABOVE else size
        pending: list[bytes | memoryview] = list(buffers)
        first = unreported = 0  # pending[first] goes next
        outbox.sending_since = trio.current_time()
        while first < len(pending):
            try:
                sent = await sock.sendmsg(pending[first : first + MAX_BUFFERS])
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                self._broken = True
                self._read_scope.cancel()
                return False
            unreported += sent
            while sent:  # drop what went, cut the buffer it went into
                length = len(pending[first])
                if sent < length:
                    pending[first] = memoryview(pending[first])[sent:]
                    break
                sent -= length
                first += 1
            if unreported >= report_every or first == len(pending):
                now = trio.current_time()
                self._sent(unreported, now)
                unreported = 0
                if first < len(pending):
                    outbox.sending_since = now
        return True

    def close(self, reason: str) -> None:
        """Close this connection with an ERROR saying ``reason`` (an administrator asked)."""
        self.fail(reason, None)

    def heard(self, nbytes: int, now: float) -> None:
        """Parked: heart-beats arrived (``Parking.run`` read them)."""
        self.bytes_in += nbytes
        self.last_recv = now

    def check(self, now: float, late: float) -> float | None:
        """The heart-beat timer's visit (``_check_beats``), and a token session's end at its
        token's expiry (``lease``)."""
        lease = self.lease
        if lease is None or self.session is None:
            return self._check_beats(now, late)
        if lease.expired(now):
            log.info("connection %s: the access token of %r expired, closing", self.id, self.login)
            self.fail(EXPIRED_MESSAGE, None)
            return None
        when = self._check_beats(now, late)
        return lease.deadline if when is None else min(when, lease.deadline)

    def _check_beats(self, now: float, late: float) -> float | None:
        """The heart-beat timer's visit: fail a client without CONNECT by its deadline, beat when
        due, close a peer silent past its grace; when to look again (None: never).  A visit comes
        up to ``late`` seconds after the time asked for: a beat is asked for that much early.  A
        parked peer's lone beat is read here (``Parking.drain``), so its silence counts from the
        visit that found its last beat: it is closed up to a visit (a beat of ours) late."""
        if self.session is None:  # the CONNECT deadline came (CONNECT moves the entry to now)
            self.fail("no CONNECT frame in time", None)
            return None
        after = math.inf
        if self.send_every:
            every = self.send_every * BEAT_EARLY
            if now + late >= self.last_send + every:
                if self.outbox.empty:  # else the writer is sending: that is a beat too
                    self._beat(now)
                after = now + every - late
            else:
                after = self.last_send + every - late
        if self.expect_every:
            grace = self.expect_every * self.settings.heart_beat_grace
            if not self.listening:  # its heart-beats wait unread: look again a grace later
                return min(after, now + grace)
            if self._parking is not None:  # a lone beat waits in a parked socket (parking.py)
                self._parking.drain(self._fd, now)
            if now - self.last_recv >= grace:
                log.info("connection %s: no heart-beat for %.1f s, closing", self.id, now - self.last_recv)
                self.fail("heart-beat timeout", None)
                return None
            after = min(after, self.last_recv + grace)
        return None if after == math.inf else after


#: The writer hands at most this many bytes to one ``send_all``.
SEND_PIECE = 256 * 1024
#: Batches larger than this go to ``send_all`` in SEND_PIECE pieces (twice the soft limit).
PIECES_ABOVE = 2 * SOFT_LIMIT
#: Buffers in one ``sendmsg`` (the kernel takes at most IOV_MAX, 1024 on Linux).
MAX_BUFFERS = 512


async def _read(fd: int, size: int) -> bytes:
    """Receive from the plain TCP socket ``fd`` as ``SocketStream.receive_some`` would, waiting
    for it first: that tries a read and, when there is nothing (between messages at low rates,
    every time), pays for a failed recv and its exception before it waits anyway."""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, size)
        except BlockingIOError:
            continue
        except OSError as e:
            raise trio.BrokenResourceError from e


def _write_now(fd: int, data: bytes | memoryview) -> int:
    """Write what the socket ``fd`` takes now without blocking; how many bytes that was."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def _peer(stream: trio.abc.Stream) -> str:
    """``host:port`` of the client, through TLS and WebSocket wrappers ("" for a stream
    without a socket, as in tests)."""
    layer: trio.abc.Stream | None = stream
    while layer is not None and getattr(layer, "socket", None) is None:
        layer = getattr(layer, "transport_stream", None)
    sock = getattr(layer, "socket", None)
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("", "")
    except OSError:
        return ""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}" if host else ""
