"""One client's STOMP session as the server sees it: login, vhost, permissions, heart-beats, ERROR.

Theory of operation
-------------------
The engine's side of a session is ``broker.Session``; this is the server's: what CONNECT
negotiated and what it allows.  The connection's reader (``server/connection.py``) hands it
each frame that is not one of a run for the engine (``on_frame``) and each run (``on_run``).

Until CONNECTED a connection may send ``CONNECT_MAX_BYTES`` in all (its reads are cut to what
is left), and it must be CONNECTED within ``--connect-timeout``; the admission it was served
under (``Security.admit``) holds that much of the login budget until then.  When the broker has
users (``Security.users``), CONNECT's password is checked off the event loop
(``Security.check_password``): refused at once while its (address, login) backs off after
failures; frames after CONNECT in the same read wait for it.  A client certificate alone logs
in only with ``--tls-cert-login``.  CONNECT's ``host`` header picks the vhost
(``server/vhosts.py``) and with it the engine the session lives in; an unknown vhost, or one
the user has no permissions on, is an ERROR.  SEND and SUBSCRIBE are then checked against the
user's permissions on that vhost, as the users file says now (a reload applies to open
connections too); a denial is an ERROR ``access refused`` and the close.

Its read gate (``server/flow.py``: the reasons of ``broker/flow.py``, in order) is where the
reader waits for anything but the socket, a resource alarm included.  The heart-beat timer
(``server/heartbeats.py``) visits it (``check``): it enforces the CONNECT deadline, sends
heart-beats and closes a peer that went silent for longer than its heart-beat allows (times
the grace factor), and ends a token session at its token's expiry.

A STOMP error anywhere (``ProtocolError`` from the parser, ``ClientError`` from the broker)
queues an ERROR frame (``error``) and ends the engine's session at once; the connection then
lets the writer flush it and lingers (``server/transport.py``).
"""

from __future__ import annotations

import logging
import math
from typing import NoReturn

import trio

from .. import __version__
from ..broker import ClientError, Hold, LimitError, Session
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
from .flow import ReadGate
from .heartbeats import HeartBeats
from .runtime import Runtime
from .security import Admission, LoginThrottled, Security, certificate_login
from .settings import ServerSettings
from .tokens import EXPIRED_MESSAGE, REFRESH_TOKEN, TOKEN_HEADER, TokenError, TokenLease, looks_like_jwt
from .transport import Transport
from .vhosts import machine_names, vhost_for_host

log = logging.getLogger(__name__)

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


class Close(Exception):
    """End the connection (after an ERROR or a DISCONNECT)."""


class ClientSession:
    """The server's half of one client's session (the engine's is ``session``, from CONNECT)."""

    # Slots: see ``Connection``; ``__weakref__`` for the heart-beat timer's wheel.
    __slots__ = (
        "__weakref__", "address", "admission", "beat_token", "broker", "errored", "expect_every", "gate",
        "heart_beats", "id", "lease", "login", "parser", "peer", "runtime", "security", "send_every", "session",
        "settings", "transport", "user", "version", "vhost",
    )

    def __init__(
        self,
        transport: Transport,
        runtime: Runtime,
        settings: ServerSettings,
        security: Security | None,
        admission: Admission | None,
        address: str,
        heart_beats: HeartBeats,
    ) -> None:
        self.transport = transport
        self.id, self.peer = transport.id, transport.peer
        self.runtime = runtime
        self.broker = runtime.broker  # the vhost's engine once connected (``enter_vhost``)
        self.settings = settings
        self.security = security
        self.admission = admission
        self.address = address  # the IP address: the key of the per-address limits
        #: The user when the broker has users; None = everything allowed.
        self.user: User | None = None
        self.login: str | None = None
        #: A token login's lease (tokens.py): the session ends at its deadline unless refreshed.
        self.lease: TokenLease | None = None
        self.vhost = DEFAULT_VHOST  # chosen at CONNECT
        self.parser = FrameParser(settings.limits)
        self.session: Session | None = None
        self.version = "1.2"  # for frames we send before negotiation
        self.send_every = 0.0  # seconds between our heart-beats, 0 = none
        self.expect_every = 0.0  # seconds the peer may stay silent, 0 = forever
        #: Where the reader waits when not on the socket (server/flow.py); ``gate.reason`` says why.
        self.gate = ReadGate(runtime, settings, transport.outbox)
        self.errored = False  # an ERROR went out (or is queued): the connection ends
        self.heart_beats = heart_beats
        self.beat_token: int | None = None  # the heart-beat timer's entry (HeartBeats.watch)

    def start(self) -> None:
        """The CONNECT deadline runs from now (the heart-beat timer enforces it: ``check``)."""
        self.heart_beats.watch(self, trio.current_time() + self.settings.connect_timeout)

    @property
    def held(self) -> bool:
        """The reader waits for the store or an alarm (the API's "held")."""
        return self.gate.reason is Hold.STORE or self.gate.reason is Hold.ALARM

    # -- frames -------------------------------------------------------------------
    def on_frame(self, frame: Frame) -> None:
        """A frame the reader does not hand to the engine in a run: CONNECT, DISCONNECT, a vhost
        declaration, one the user's permissions refuse, an unknown command."""
        session = self.session
        command = frame.command
        if session is None:
            if command not in ("CONNECT", "STOMP"):
                self.error(f"expected CONNECT, got {command}", frame.headers.get("receipt"))
            self._connect(frame)
            return
        if command in SESSION_COMMANDS:  # the reader hands the rest to the broker in runs
            if command == "SEND" and frame.headers.get("destination", "").startswith(DECLARE_VHOST):
                self._declare_vhost(session, frame)
            else:
                self._authorise(frame)  # a frame the user's permissions refuse: ERROR
                self.on_run([frame])
        elif command == "DISCONNECT":
            self.runtime.tick()
            self.broker.disconnect(session, frame.headers.get("receipt"))
            raise Close
        elif command in ("CONNECT", "STOMP"):
            self.error("already connected", frame.headers.get("receipt"))
        else:
            self.error(f"unknown command {command!r}", frame.headers.get("receipt"))

    def on_run(self, frames: list[Frame]) -> None:
        """Session frames of one read that the broker takes as they are: one broker call (it
        names the bad frame's receipt when one fails)."""
        if self.errored:  # failed from outside (a slow topic subscriber disconnected)
            raise Close
        assert self.session is not None
        writes = self.runtime.writes
        writes.open = True  # the deliveries go out at its close, not by waking each writer
        try:
            self.broker.handle_frames(self.session, frames)
        except ClientError as e:
            if isinstance(e, LimitError):
                self.broker.config.limit_hits.hit(e, self.session.login)
            self.error(e.message, e.receipt_id)
        except Exception:  # handle_frames turns errors into ClientError; this is the last resort
            log.exception("connection %s: internal error handling %d frames", self.id, len(frames))
            self.error("internal error")
        finally:
            writes.close()

    # -- CONNECT ------------------------------------------------------------------
    def _connect(self, frame: Frame) -> None:
        headers = frame.headers
        version = negotiate_version(headers.get("accept-version"))
        if version is None:
            self.error(
                "no common STOMP version: this server speaks 1.0, 1.1 and 1.2",
                extra={"version": "1.0,1.1,1.2"},
            )
        self.version = version
        settings = self.settings
        try:
            client_beats = parse_heart_beat(headers.get("heart-beat"))
        except ProtocolError as e:
            self.error(e.message)
        send_ms, expect_ms = heart_beat_intervals(client_beats, settings.heart_beat)
        self._enter_vhost(headers)
        relay = self._relay(headers)
        self.send_every = send_ms / 1000
        self.expect_every = expect_ms / 1000
        self.parser.version = version
        transport = self.transport
        outbox = transport.outbox
        self.session = session = self.broker.open_session(
            self.id, version, outbox, self.login or headers.get("login"), headers.get("client-id"), relay
        )
        transport.broker, transport.session = self.broker, session  # what its sends settle
        self.gate.enter(self.broker, session)
        self.heart_beats.watch(self, trio.current_time())  # heart-beats start now
        if self.admission is not None:
            self.admission.logged_in()
        outbox.on_drain = self._resume
        session.fail = self.fail
        connected = {
            "version": version,
            "heart-beat": "{},{}".format(*connected_heart_beat(client_beats, settings.heart_beat)),
            "server": f"stompmq/{__version__}",
            "session": self.id,
        }
        outbox.write(encode_frame(Frame("CONNECTED", connected), version))
        log.info("connection %s from %s: connected, login %r, vhost %s, STOMP %s", self.id, self.peer, session.login,
                 self.vhost, version)

    def _enter_vhost(self, headers: dict[str, str]) -> None:
        """Pick the vhost (and its engine) CONNECT's ``host`` names; ERROR if it is unknown or the
        user has no permissions on it."""
        host = headers.get("host")
        vhost = vhost_for_host(host, self.runtime.engines, machine_names(self.settings.host_names))
        if vhost is None:
            log.warning("connection %s: unknown vhost %r from %s, login %r", self.id, host, self.peer, self.login)
            self.error(f"unknown vhost {host!r}", headers.get("receipt"))
        if self.user is not None and vhost not in self.user.permissions:
            log.warning("connection %s: user %r from %s has no access to vhost %s", self.id, self.login,
                        self.peer, vhost)
            self.error(f"access refused: no permissions on vhost {vhost}", headers.get("receipt"))
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
            self.error(f"{RELAY_HEADER} must be true or false, not {value!r}", headers.get("receipt"))
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
            self.error(f"access refused: declaring vhost {name!r} needs the administrator tag", receipt)
        error = vhost_name_error(name)
        if error is not None:
            self.error(error, receipt)
        self.runtime.tick()
        self.runtime.declare(name)
        if receipt is not None:
            self.broker.receipt(session, receipt)  # after the commit that stores the vhost

    # -- login ----------------------------------------------------------------------
    async def authenticate(self, frame: Frame) -> None:
        """Check CONNECT's credentials (or, with --tls-cert-login, the client certificate's CN)
        against the users.

        Without users, a verified client certificate's CN is still the session's login (a name
        for logs and the management API: without users everybody may do everything anyway).
        """
        security = self.security
        stream = self.transport.stream
        cert_login = certificate_login(stream)
        if security is None or security.users is None:
            self.login = cert_login
            return
        headers = frame.headers
        login, passcode = headers.get("login"), headers.get("passcode")
        token = passcode if looks_like_jwt(passcode) else None if passcode else getattr(stream, "bearer", None)
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
                self.error(e.message, headers.get("receipt"))
        if user is None:
            log.warning("connection %s: failed login %r from %s", self.id, login, self.peer)
            # Never say whether the user or the passcode was wrong.
            self.error("bad login or passcode", headers.get("receipt"))
        if self.admission is not None and not self.admission.count_user(user.name):
            error = LimitError("max-connections-per-user", f"user {user.name!r} has "
                               f"{self.settings.max_connections_per_user} connections open already")
            self.broker.config.limit_hits.hit(error, user.name)
            self.error(error.message, headers.get("receipt"))
        self.login = user.name
        self.user = user

    async def _token_user(self, token: str, receipt: str | None) -> tuple[User, TokenLease]:
        """The user and lease of an access token (tokens.py); ERROR if it logs nobody in."""
        assert self.security is not None
        try:
            return await self.security.check_token(token, self.runtime.engines)
        except TokenError as e:
            log.warning("connection %s: token login from %s refused: %s", self.id, self.peer, e)
            self.error(f"bad access token: {e}", receipt)

    async def refresh_token(self, frame: Frame) -> None:
        """A fresh token for a token session (``REFRESH_TOKEN``, ``Security.refresh_token``)."""
        receipt = frame.headers.get("receipt")
        assert self.session is not None
        if self.security is None:
            self.error(f"{REFRESH_TOKEN} needs a token login", receipt)
        try:
            self.user, self.lease = await self.security.refresh_token(self.lease, frame.headers.get(TOKEN_HEADER),
                                                                      self.runtime.engines)
        except TokenError as e:
            self.error(f"bad access token: {e}", receipt)
        if receipt is not None:
            self.broker.receipt(self.session, receipt)

    # -- permissions ----------------------------------------------------------------
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

    def refused(self, frame: Frame) -> tuple[str, str] | None:
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
        refused = self.refused(frame)
        if refused is not None:
            action, resource = refused
            log.warning("connection %s: access refused: %s to %s in vhost %s for user %r from %s", self.id, action,
                        resource, self.vhost, self.login, self.peer)
            self.error(f"access refused: {action} access to {resource} in vhost {self.vhost} "
                       f"refused to user {self.login}", frame.headers.get("receipt"))

    def _resume(self) -> None:
        """The outbox drained: the engine may deliver to this connection again."""
        if self.session is not None:
            self.runtime.tick()
            self.broker.resume(self.session)

    # -- ending -----------------------------------------------------------------------
    def error(self, message: str, receipt_id: str | None = None, extra: dict[str, str] | None = None) -> NoReturn:
        """Queue an ERROR frame and end the connection (STOMP: ERROR, then close)."""
        headers = {"message": message.replace("\n", " ").replace("\r", " ")}
        if receipt_id is not None:
            headers["receipt-id"] = receipt_id
        if extra:
            headers.update(extra)
        headers["content-type"] = "text/plain"
        self.transport.outbox.write(encode_frame(Frame("ERROR", headers, message.encode()), self.version))
        self.errored = True
        log.info("connection %s from %s: ERROR %s", self.id, self.peer, message)
        # The session ends with the ERROR, not after the linger: requeue what it holds at once
        # and deliver nothing more to a connection that will never ACK it.
        self.close()
        raise Close

    def fail(self, message: str, receipt_id: str | None) -> None:
        """The broker failed this session from outside a frame (e.g. a commit failed)."""
        try:
            self.error(message, receipt_id)
        except Close:
            pass
        self.transport.read_scope.cancel()

    def close(self) -> None:
        """Hand the engine's session back (it requeues its unacked messages), once."""
        session = self.session
        if session is not None and not session.closed:
            try:
                self.runtime.tick()
                self.broker.close_session(session)
            except Exception:  # escaping here would take down every connection
                log.exception("connection %s: closing its session failed", self.id)

    # -- the heart-beat timer's visits --------------------------------------------
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
        transport = self.transport
        after = math.inf
        if self.send_every:
            every = self.send_every * BEAT_EARLY
            if now + late >= transport.last_send + every:
                if transport.outbox.empty:  # else the writer is sending: that is a beat too
                    transport.beat(now)
                after = now + every - late
            else:
                after = transport.last_send + every - late
        if self.expect_every:
            grace = self.expect_every * self.settings.heart_beat_grace
            if not transport.listening:  # its heart-beats wait unread: look again a grace later
                return min(after, now + grace)
            transport.drain_parked(now)  # a lone beat waits in a parked socket (parking.py)
            if now - transport.last_recv >= grace:
                log.info("connection %s: no heart-beat for %.1f s, closing", self.id, now - transport.last_recv)
                self.fail("heart-beat timeout", None)
                return None
            after = min(after, transport.last_recv + grace)
        return None if after == math.inf else after
