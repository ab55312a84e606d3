"""The broker engine: destinations, queues, topics, subscriptions and dispatch (no sockets, no trio)."""

from .config import BrokerConfig
from .engine import Broker
from .errors import ClientError
from .session import Outbox, Session

__all__ = ["Broker", "BrokerConfig", "ClientError", "Outbox", "Session"]
