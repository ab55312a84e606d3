"""Transactions: SEND, ACK and NACK frames held per session until COMMIT or ABORT.

COMMIT applies the held frames in one synchronous step, so their store writes
land in one commit group: all of them or none reach the disk.  Everything is
validated before anything is applied; exchange SENDs are routed during that
check, so one that cannot be routed fails the COMMIT before any frame of it is
applied.  ABORT, or the connection's end, drops the frames.

The RECEIPTs of held frames are sent when the transaction ends (after the
COMMIT's writes are durable, or at ABORT), never before: a RECEIPT for a
SEND means the message is on disk.

A transaction holds at most ``max_transaction_frames`` frames, and each login at most
``max_transaction_bytes`` in all its open transactions (``limits.HeldBytes``, shared by every
vhost): what the frames cost is charged as they are held and given back when the transaction
ends, the connection's end included (``release``).
"""

from __future__ import annotations

from ..protocol import Frame
from .acks import Acks
from .config import BrokerConfig
from .destinations import parse_destination
from .errors import ClientError
from .kinds.base import Parts, Planned
from .kinds.registry import kind_of
from .limits import LimitError, frame_cost
from .receipts import HELD, Held
from .send_headers import flag, send_options
from .session import Session


def requeue_wanted(headers: dict[str, str]) -> bool:
    """NACK's ``requeue`` header (default true)."""
    return flag(headers, "requeue", True)


class Transactions:
    def __init__(self, acks: Acks, config: BrokerConfig) -> None:
        self.acks = acks
        self.config = config

    def hold(self, session: Session, frame: Frame) -> Held:
        """Keep a frame for the transaction it names until COMMIT (ClientError if none is open,
        LimitError past a limit)."""
        tx = frame.headers["transaction"]
        frames = session.transactions.get(tx)
        if frames is None:
            raise ClientError(f"no transaction {tx!r} in progress")
        config = self.config
        if len(frames) >= config.max_transaction_frames:
            raise LimitError("max-transaction-frames", f"transaction {tx!r} holds {len(frames)} frames already")
        cost = frame_cost(frame)
        config.held_bytes.charge(session.login, cost, config.max_transaction_bytes)
        session.held_bytes += cost
        frames.append(frame)
        return HELD

    def _ended(self, session: Session, frames: list[Frame]) -> None:
        """Give back what a transaction's frames were charged."""
        cost = sum(map(frame_cost, frames))
        session.held_bytes -= cost
        self.config.held_bytes.release(session.login, cost)

    def release(self, session: Session) -> None:
        """The connection is gone: its open transactions are dropped, their bytes given back."""
        self.config.held_bytes.release(session.login, session.held_bytes)
        session.held_bytes = 0
        session.transactions.clear()

    def begin(self, session: Session, frame: Frame) -> None:
        tx = _tx_id(frame)
        if tx in session.transactions:
            raise ClientError(f"transaction {tx!r} already in progress")
        session.transactions[tx] = []

    def abort(self, session: Session, frame: Frame) -> list[Frame]:
        """Drop the transaction; return its frames (their RECEIPTs are due now)."""
        tx = _tx_id(frame)
        frames = session.transactions.pop(tx, None)
        if frames is None:
            raise ClientError(f"no transaction {tx!r} in progress")
        self._ended(session, frames)
        return frames

    def commit(self, session: Session, frame: Frame, parts: Parts) -> list[Frame]:
        """Apply the transaction's frames in one synchronous step and return them; their SENDs
        are planned by their kinds first (``DestinationKind.plan``), so one that cannot be
        routed fails the COMMIT before anything is applied."""
        tx = _tx_id(frame)
        frames = session.transactions.pop(tx, None)
        if frames is None:
            raise ClientError(f"no transaction {tx!r} in progress")
        self._ended(session, frames)
        acks = self.acks
        planned: dict[int, Planned] = {}
        for i, f in enumerate(frames):
            if f.command != "SEND":
                acks.target(session, f.headers)
            else:
                dest = parse_destination(f.headers["destination"])
                planned[i] = kind_of(dest).plan(parts, session, dest, f)
        now_ms = parts.dispatcher.clock.wall_ms
        for i, f in enumerate(frames):
            headers = f.headers
            if f.command == "SEND":
                planned[i](*send_options(headers, now_ms))
                continue
            try:
                held = acks.target(session, headers)
            except ClientError:
                continue  # settled by an earlier cumulative ACK of this transaction
            if held is None:
                continue  # its ack timeout requeued the message since: too late to settle it
            if f.command == "ACK":
                acks.ack(*held)
            else:
                acks.nack(*held, requeue_wanted(headers))
        return frames


def _tx_id(frame: Frame) -> str:
    tx = frame.headers.get("transaction")
    if tx is None:
        raise ClientError(f"{frame.command} without transaction header")
    return tx
