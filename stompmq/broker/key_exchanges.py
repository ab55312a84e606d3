"""RabbitMQ's direct, fanout and topic exchanges: a SEND goes to every queue bound with a matching key.

Theory of operation
-------------------
Unlike the consistent-hash exchange (exchanges.py), which picks exactly one
queue, these copy a message to every queue whose binding matches its routing
key, once per queue however many of its bindings match:

* ``direct``: the binding key equals the routing key (a dict lookup);
* ``fanout``: every bound queue, whatever the key;
* ``topic``: AMQP patterns, words split by ``.``, ``*`` is exactly one word,
  ``#`` zero or more.  Patterns live in a trie of words, so routing costs the
  branches the key can take, not the number of bindings.

Each type is its own small class over ``KeyExchange`` (``DirectExchange``, ``FanoutExchange``,
``TopicExchange``, made by ``new_key_exchange``), keeping the index it routes by.
``amq.direct``, ``amq.fanout`` and ``amq.topic`` always exist (``BUILT_IN``).
A message no binding matches is dropped and counted (``unroutable``), as
RabbitMQ drops an unroutable message published without ``mandatory``.
"""

from __future__ import annotations

from collections.abc import Callable

DIRECT = "direct"
FANOUT = "fanout"
TOPIC = "topic"
TYPES = (DIRECT, FANOUT, TOPIC)
#: The exchanges every broker has, by name (RabbitMQ's default exchanges).
BUILT_IN = {"amq.direct": DIRECT, "amq.fanout": FANOUT, "amq.topic": TOPIC}


class _Node:
    __slots__ = ("children", "queues")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.queues: dict[str, None] = {}


class TopicTrie:
    """AMQP topic patterns -> queues."""

    def __init__(self) -> None:
        self._root = _Node()

    def add(self, pattern: str, queue: str) -> None:
        node = self._root
        for word in pattern.split("."):
            node = node.children.setdefault(word, _Node())
        node.queues[queue] = None

    def remove(self, pattern: str, queue: str) -> None:
        path = [self._root]
        for word in pattern.split("."):
            child = path[-1].children.get(word)
            if child is None:
                return
            path.append(child)
        path[-1].queues.pop(queue, None)
        for word, parent, node in zip(reversed(pattern.split(".")), reversed(path[:-1]), reversed(path[1:])):
            if node.queues or node.children:
                break
            del parent.children[word]

    def match(self, key: str) -> dict[str, None]:
        out: dict[str, None] = {}
        _match(self._root, key.split("."), 0, out)
        return out


def _match(node: _Node, words: list[str], i: int, out: dict[str, None]) -> None:
    children = node.children
    hash_node = children.get("#")
    if hash_node is not None:  # '#' takes zero or more words
        for j in range(i, len(words) + 1):
            _match(hash_node, words, j, out)
    if i == len(words):
        out.update(node.queues)
        return
    for word in (words[i], "*"):
        child = children.get(word)
        if child is not None:
            _match(child, words, i + 1, out)


class KeyExchange:
    """What the three types share: the bindings, the subscriptions' private queues, the counters;
    each type keeps the index it routes by (``_add``, ``_remove``, ``_match``).  Plain classes,
    not dataclasses: the compiled engine's dataclasses cannot tell a subclass's type from a field."""

    def __init__(self, name: str, type: str) -> None:
        self.name = name
        self.type = type
        #: (queue, binding key) pairs, stored and private alike
        self.bindings: dict[tuple[str, str], None] = {}
        #: queues bound by a SUBSCRIBE /exchange/NAME/KEY: never stored, gone with the subscription
        self.private: set[str] = set()
        self.routed = 0
        self.unroutable = 0

    def bind(self, queue: str, key: str) -> None:
        if (queue, key) in self.bindings:
            return
        self.bindings[(queue, key)] = None
        self._add(queue, key)

    def unbind(self, queue: str, key: str) -> None:
        if (queue, key) not in self.bindings:
            return
        del self.bindings[(queue, key)]
        self._remove(queue, key)

    def keys_of(self, queue: str) -> list[str]:
        return [key for q, key in self.bindings if q == queue]

    def route(self, key: str) -> list[str]:
        """Every queue the message goes to (counted as unroutable when none)."""
        queues = self._match(key)
        if queues:
            self.routed += 1
        else:
            self.unroutable += 1
        return queues

    def _add(self, queue: str, key: str) -> None:
        raise NotImplementedError

    def _remove(self, queue: str, key: str) -> None:
        """``(queue, key)`` has left ``bindings``: drop it from the index."""
        raise NotImplementedError

    def _match(self, key: str) -> list[str]:
        raise NotImplementedError


class DirectExchange(KeyExchange):
    """The binding key equals the routing key: a dict lookup."""

    def __init__(self, name: str) -> None:
        super().__init__(name, DIRECT)
        self._by_key: dict[str, dict[str, None]] = {}

    def _add(self, queue: str, key: str) -> None:
        self._by_key.setdefault(key, {})[queue] = None

    def _remove(self, queue: str, key: str) -> None:
        queues = self._by_key[key]
        queues.pop(queue, None)
        if not queues:
            del self._by_key[key]

    def _match(self, key: str) -> list[str]:
        return list(self._by_key.get(key, ()))


class FanoutExchange(KeyExchange):
    """Every bound queue, whatever the key (a queue bound with several keys gets one copy)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, FANOUT)
        self._queues: dict[str, None] = {}

    def _add(self, queue: str, key: str) -> None:
        self._queues[queue] = None

    def _remove(self, queue: str, key: str) -> None:
        if not any(q == queue for q, _ in self.bindings):
            self._queues.pop(queue, None)

    def _match(self, key: str) -> list[str]:
        return list(self._queues)


class TopicExchange(KeyExchange):
    """AMQP topic patterns, in a trie of words."""

    def __init__(self, name: str) -> None:
        super().__init__(name, TOPIC)
        self._trie: TopicTrie = TopicTrie()

    def _add(self, queue: str, key: str) -> None:
        self._trie.add(key, queue)

    def _remove(self, queue: str, key: str) -> None:
        self._trie.remove(key, queue)

    def _match(self, key: str) -> list[str]:
        return list(self._trie.match(key)) if self.bindings else []


#: Each type's class, by the name a declaration gives (``type:direct``).
EXCHANGE_TYPES: dict[str, Callable[[str], KeyExchange]] = {
    DIRECT: DirectExchange, FANOUT: FanoutExchange, TOPIC: TopicExchange,
}


def new_key_exchange(name: str, kind: str) -> KeyExchange:
    """A new exchange ``name`` of type ``kind`` (one of ``TYPES``)."""
    return EXCHANGE_TYPES[kind](name)
