"""The broker engine: destinations, queues, topics, subscriptions and dispatch (no sockets)."""

from .config import BrokerConfig
from .core import Broker
from .errors import ClientError
from .session import Outbox, Session

__all__ = ["Broker", "BrokerConfig", "ClientError", "Outbox", "Session"]
