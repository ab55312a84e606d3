"""The broker engine: destinations, queues, topics, subscriptions and dispatch (no sockets, no trio)."""

from .config import BrokerConfig
from .engine import Broker
from .errors import ClientError
from .flow import Hold
from .limits import LimitError, LimitHits
from .session import Outbox, Session, Subscription

__all__ = ["Broker", "BrokerConfig", "ClientError", "Hold", "LimitError", "LimitHits", "Outbox", "Session", "Subscription"]
