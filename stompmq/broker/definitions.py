"""A definitions file (TOML or JSON): what a broker declares, as ``--definitions`` reads it at
start, ``stompmq admin import`` (``POST /api/definitions``) applies and ``stompmq admin export``
(``GET /api/definitions``) writes.

The format mirrors the /control verbs, so anything a file declares could also be declared over
STOMP; the top-level lists are the default vhost's::

    [[exchanges]]
    name = "orders"
    type = "consistent-hash"          # or direct, fanout, topic
    hash-header = "customer-id"       # consistent-hash only; or hash-property = "message-id"

    [[queues]]
    name = "q1"                       # queues are created on first use; a declared one is stored
    message-ttl = 60000               # the settings of /control/declare/queue (queue_settings.py)
    dead-letter = true

    [[streams]]
    name = "events"
    max-age = 604800                  # seconds; max-bytes too

    [[bindings]]
    exchange = "orders"
    queue = "/queue/q1"               # or /stream/NAME (consistent-hash exchanges)
    weight = 1                        # consistent-hash; a direct or topic exchange's: routing-key

    [[policies]]                      # and [[operator-policies]] (policy_match.py)
    name = "ttl"
    pattern = "^q"
    apply-to = "queues"
    priority = 0
    definition = {message-ttl = 60000}

Other vhosts get their own lists in a ``[[vhosts]]`` entry (the vhost is declared if it is new)::

    [[vhosts]]
    name = "staging"
    [[vhosts.exchanges]]
    name = "orders"

Shovels (``name``, ``from``, ``to``, ``prefetch``: the fields of ``PUT /api/shovels/{name}``)
and users (``name``, ``tags``, ``permissions`` by vhost, ``password-hash`` if exported with
secrets: they go into the broker's users file) are top-level entries.  Applying a file is
idempotent and strict: an unknown key is an error naming the nearest known one, and a file
with any invalid entry changes nothing (server/definitions_apply.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import ClientError
from .policy_match import unknown_key

#: The lists of a vhost's part of the file.
VHOST_LISTS = ("exchanges", "queues", "streams", "bindings", "policies", "operator-policies")
#: The keys of a ``[[vhosts]]`` entry, and of the file itself.
VHOST_KEYS = ("name", *VHOST_LISTS)
TOP_LEVEL = (*VHOST_LISTS, "vhosts", "shovels", "users")
#: A user's password hash in a definitions file (exported only when asked for).
PASSWORD_HASH = "password-hash"


class DefinitionsError(ValueError):
    """The definitions file is unreadable or declares something invalid."""


def known_keys(entry: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    """A misspelt key would otherwise be ignored silently (a binding of weight 1, say): an error
    naming it and the nearest known key."""
    try:
        unknown_key(entry, allowed, "a key here")
    except ClientError as e:
        raise DefinitionsError(f"{where}: {e.message}") from None
