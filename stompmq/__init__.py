"""stompmq: a STOMP 1.0-1.2 message broker on trio with durable SQL-backed queues."""

__version__ = "0.1.0"
