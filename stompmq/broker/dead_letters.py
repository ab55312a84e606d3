"""Dead letters: a message that cannot be delivered moves to ``/queue/<prefix><name>``.

Past ``--max-redeliveries``, or NACKed with ``requeue:false`` when the broker
is configured to keep rejected messages, a message of ``/queue/X`` is
republished to ``/queue/DLQ.X`` (``--dlq-prefix``) with ``dead-letter-reason``
and ``original-destination`` headers.  A message of a dead-letter queue itself,
or any message when the prefix is empty, is dropped and logged.
"""

from __future__ import annotations

import logging

from ..storage.base import StoredMessage
from .dispatch import Dispatcher

log = logging.getLogger(__name__)


def dead_letter(dispatcher: Dispatcher, msg: StoredMessage, reason: str) -> None:
    """Move ``msg`` (already settled) to its queue's dead-letter queue, or drop it."""
    dispatcher.store.delete(msg)
    dispatcher.queue_stats(msg.queue).dead_lettered += 1
    prefix = dispatcher.config.dlq_prefix
    if not prefix or msg.queue.startswith(prefix):
        log.warning("dropping message %d of queue %s: %s", msg.seq, msg.queue, reason)
        return
    headers = dict(msg.headers)
    headers["dead-letter-reason"] = reason
    headers["original-destination"] = "/queue/" + msg.queue
    dispatcher.publish(prefix + msg.queue, headers, msg.body, msg.priority)
