"""Routing for the consistent-hash exchange: weighted rendezvous hashing.

Why rendezvous hashing
======================
A consistent-hash exchange maps each message's hash input (the *key*) to one
bound queue. Operators expect four things of it:

* **uniform**: equal-weight queues get equal shares of the keys;
* **weight-true**: a queue's share is its weight divided by the total weight;
* **minimally disruptive for any change**: adding a queue moves keys only to
  it; removing or re-weighting a queue moves only keys to or from that queue,
  and never any between two queues that did not change;
* **a function of the set of bindings alone**: the same bindings route the
  same way whatever order they were declared in, in every process, after every
  restart.

RabbitMQ's x-consistent-hash treats weights as bucket counts and runs jump
consistent hash over the buckets. Jump hash can only add or remove the *last*
bucket cheaply, so removing a queue from the middle renumbers the buckets
after it and moves keys between surviving queues. Its bucket numbering also
depends on the order the bindings were made in, so a restart that rebinds in
another order routes differently.

Weighted rendezvous hashing has none of these problems. Every queue ``q`` gets
a score for each key, computed from ``(exchange, q, key)`` and ``q``'s weight
only, and the key goes to the queue with the highest score. A key's winner
can therefore only change if a score *involved in the comparison* changes:

* adding ``q`` adds one competitor; a key moves only if ``q`` now wins;
* removing ``q`` takes one competitor away; only keys ``q`` won must move;
* re-weighting ``q`` changes ``q``'s scores only: raising it can only pull
  keys to ``q``, lowering it can only push keys away from ``q``.

No bucket numbering, no insertion order, no per-process state: just the set
of bindings. With ``score = w / -ln(u)`` and ``u`` uniform on (0, 1),
``-ln(u) / w`` is an exponential variable with rate ``w``, and the smallest of
independent exponentials is the one with rate ``w_q`` with probability
``w_q / sum(w)`` -- which is exactly weight-truth.

The price is O(N) work per message: every queue's score is computed. Two
routers compute the same answer fast (see "Fast path"): the native one in
``_rendezvous.c`` (about 0.2 us per message at ten queues, built at install
time wherever a C compiler is present) and the pure-Python ``_LaneRouter``
below, which is the fallback and runs 10 to 25 times slower (N = 10 to 100).

Algorithm (normative; docs/consistent-hash.md has the same text and examples)
=============================================================================
Integers are unsigned 64-bit; ``*`` and ``^`` are taken modulo 2**64.

1. Key bytes: a ``str`` key is encoded as UTF-8 (strict); ``bytes`` are used
   as they are. A message without a hash input uses the empty key ``b""``
   (``NO_KEY``), so all such messages go to one fixed queue: ``route(b"")``.
2. Key hash: ``h = LE64(BLAKE2b(key bytes, digest length 8, key=KEY_HASH_KEY))``
   where BLAKE2b is RFC 7693 with an 8-byte output (the digest length is part
   of the parameter block: this is *not* a truncated BLAKE2b-512) and LE64
   reads the 8 digest bytes as a little-endian integer.
3. Queue seed, once per binding:
   ``s = LE64(BLAKE2b(BE32(len(E)) || E || Q, digest length 8, key=QUEUE_SEED_KEY))``
   with ``E`` and ``Q`` the UTF-8 exchange and queue names and ``BE32`` a
   4-byte big-endian length (so ("ab", "c") and ("a", "bc") differ).
4. Mix: ``x = splitmix64_finaliser(h ^ s)``::

       z = h ^ s
       z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
       z = (z ^ (z >> 27)) * 0x94D049BB133111EB
       x = z ^ (z >> 31)

5. Uniform variate: ``m = x >> 12`` (the top 52 bits) and
   ``u = (2*m + 1) / 2**53``, the midpoint of the m-th of 2**52 equal cells of
   (0, 1). ``u`` is never 0 or 1, and every step is exact in IEEE-754
   binary64 (``2*m + 1 < 2**53``), so ``u`` is strictly increasing in ``m``.
6. Score: ``score = w / -log(u)`` in binary64, ``log`` the natural logarithm.
7. Winner: the highest score; equal scores go to the queue whose name sorts
   first (code-point order, which equals UTF-8 byte order). No bindings: no
   route (``None``).

Fast path (exact-equivalent)
============================
For a fixed weight the score is strictly increasing in ``m``: consecutive
``m`` give values of ``-log(u)`` at least e * 2**-52 apart in relative terms
(because ``u * ln(1/u) <= 1/e``), more than the rounding of a ``log`` with
error below 0.85 ulp plus one correctly rounded division can close. So among
queues of equal weight the winner is simply the largest ``m``, ties to the
first name, and ``log`` is only needed to compare the winners of different
weights. The native router just loops over the lanes that way; ``_LaneRouter``:

* packs every queue's seed into one Python integer, one 128-bit *lane* per
  queue (64 value bits, 64 zero bits that absorb the 128-bit products), so the
  splitmix64 finaliser runs for all queues in about a dozen big-integer
  operations instead of a dozen per queue (the seed half of its first
  xor-shift, which is linear over XOR, is precomputed per binding);
* orders lanes by (weight, name) and cuts them into *segments* of one weight
  and at most ``SEGMENT_LANES`` lanes; it writes ``SEGMENT_LANES - i``, lane
  ``i``'s position in its segment, into the 12 low bits of ``x`` that step 5
  throws away, so ``max()`` over a segment's lanes yields both the largest
  ``m`` and, on a tie, the first name;
* for a single segment (all weights equal, at most ``SEGMENT_LANES``
  queues), halves the lane count in
  big-integer "tournament" rounds (compare lane pairs with one biased
  subtraction, keep the larger) before unpacking the few survivors;
* for several segments, unpacks all lanes once, takes each segment's maximum
  and compares those winners by the float score of step 6.

Equal weights never touch floating point, so their routing is bit-exact on
every platform. Across different weights, an implementation whose ``log``
differs from this one in the last ulp can only disagree when two scores agree
to about 2**-51 relative, i.e. practically never.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from . import _rendezvous

# Largest accepted binding weight: ratios beyond 10000:1 are configuration mistakes, not balancing.
MAX_WEIGHT = 10_000
# BLAKE2b key for key hashes: domain-separates them from queue seeds; "v1" names this algorithm version.
KEY_HASH_KEY = b"stompmq/chx/key/v1"
# BLAKE2b key for queue seeds (see KEY_HASH_KEY).
QUEUE_SEED_KEY = b"stompmq/chx/queue/v1"
# splitmix64 finaliser multipliers (Steele, Lea & Flood 2014; Stafford's Mix13): a well-studied 64-bit bijection.
MIX_C1 = 0xBF58476D1CE4E5B9
MIX_C2 = 0x94D049BB133111EB
# Hash input of a message that carries none: every such message goes to route(NO_KEY).
NO_KEY = b""
# Lanes per segment: positions are coded in the 12 bits step 5 discards; code 0 marks an empty lane.
SEGMENT_LANES = 4095
# Stop halving at this many lanes: below it one unpack + max() beats another round (measured).
TOURNAMENT_STOP = 16

_MASK64 = (1 << 64) - 1
_LANE_BITS = 128
_LANE_BYTES = _LANE_BITS // 8
_CODE_BITS = 12
_CODE_MASK = (1 << _CODE_BITS) - 1
_KEY_HASHER = hashlib.blake2b(digest_size=8, key=KEY_HASH_KEY)

_NativeRouter: type[_rendezvous.Router] | None
try:
    from ._rendezvous import Router as _NativeRouter
except ImportError:  # installed without a C compiler: the pure-Python router gives the same answers
    _NativeRouter = None
#: Whether the native router was built; rings use it by default when it was.
NATIVE = _NativeRouter is not None


def _lanes(values: Iterable[int]) -> int:
    """Pack 64-bit values into consecutive 128-bit lanes, the first value lowest."""
    return int.from_bytes(b"".join(v.to_bytes(_LANE_BYTES, "little") for v in values), "little")


def _utf8(name: str, what: str) -> bytes:
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} {name!r} is not encodable as UTF-8: {exc.reason}") from None


def _queue_seed(exchange: bytes, queue: str) -> int:
    data = len(exchange).to_bytes(4, "big") + exchange + _utf8(queue, "queue name")
    digest = hashlib.blake2b(data, digest_size=8, key=QUEUE_SEED_KEY).digest()
    return int.from_bytes(digest, "little")


def _check_binding(queue: object, weight: object) -> tuple[str, int]:
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"queue name must be a non-empty str, got {queue!r}")
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ValueError(f"weight of queue {queue!r} must be an int, got {weight!r}")
    if not 1 <= weight <= MAX_WEIGHT:
        raise ValueError(f"weight of queue {queue!r} must be in 1..{MAX_WEIGHT}, got {weight}")
    return queue, weight


class _LaneRouter:
    """The pure-Python fast path ("Fast path" above): lanes in (weight, name) order."""

    __slots__ = ("_names", "_segments", "_rep", "_seeds_mixed", "_low", "_m_mask", "_codes", "_rounds",
                 "_unpack", "_tail_bytes")

    def __init__(self, names: tuple[str, ...], seeds: tuple[int, ...], weights: tuple[int, ...]) -> None:
        self._names = names
        segments: list[list[int]] = []  # [start, stop, weight]
        codes: list[int] = []
        for index, weight in enumerate(weights):
            if not segments or segments[-1][2] != weight or index - segments[-1][0] == SEGMENT_LANES:
                segments.append([index, index, weight])
            segments[-1][1] = index + 1
            codes.append(SEGMENT_LANES - (index - segments[-1][0]))
        self._segments = tuple((start, stop, weight) for start, stop, weight in segments)

        count = len(names)
        self._rep = _lanes([1] * count)
        self._low = self._rep * _MASK64
        packed = _lanes(seeds)
        # The finaliser's first xor-shift is linear over XOR, so (h ^ s) ^ ((h ^ s) >> 30)
        # splits into a per-key half and this per-binding half, computed once.
        self._seeds_mixed = (packed ^ (packed >> 30)) & self._low
        self._m_mask = self._rep * (_MASK64 ^ _CODE_MASK)
        self._codes = _lanes(codes)
        rounds: list[tuple[int, int, int]] = []
        tail = count
        if len(segments) == 1:
            while tail > TOURNAMENT_STOP:
                half = (tail + 1) // 2
                rounds.append((_lanes([_MASK64] * half), _LANE_BITS * half, _lanes([1 << 64] * half)))
                tail = half
        self._rounds = tuple(rounds)
        self._unpack = struct.Struct("<" + "Q8x" * tail).unpack
        self._tail_bytes = _LANE_BYTES * tail

    def route(self, key: bytes | str | None) -> str | None:
        names = self._names
        if len(names) <= 1:
            return names[0] if names else None
        if key is None:
            key = NO_KEY
        elif isinstance(key, str):
            key = key.encode("utf-8")
        hasher = _KEY_HASHER.copy()
        hasher.update(key)
        h = int.from_bytes(hasher.digest(), "little")
        low = self._low
        z = ((h ^ (h >> 30)) * self._rep ^ self._seeds_mixed) * MIX_C1 & low
        z = ((z ^ (z >> 27)) & low) * MIX_C2 & low
        z = (z ^ (z >> 31)) & self._m_mask | self._codes
        for keep, shift, bias in self._rounds:
            left = z & keep
            right = z >> shift
            # Bit 64 of a lane of (left + 2**64 - right) is set iff left >= right;
            # turning it into an all-ones lane mask selects the larger lane.
            left_wins = ((left | bias) - right) & bias
            z = right ^ ((left ^ right) & (left_wins - (left_wins >> 64)))
        lanes = self._unpack(z.to_bytes(self._tail_bytes, "little"))
        if len(self._segments) == 1:
            return names[SEGMENT_LANES - (int(max(lanes)) & _CODE_MASK)]
        best_score = -1.0
        best_name = ""
        for start, stop, weight in self._segments:
            top = max(lanes[start:stop])
            name = names[start + SEGMENT_LANES - (top & _CODE_MASK)]
            score = weight / -math.log((2 * (top >> _CODE_BITS) + 1) / 2**53)
            if score > best_score or (score == best_score and name < best_name):
                best_score, best_name = score, name
        return best_name


class HashRing:
    """The routing table of one consistent-hash exchange; immutable.

    Built from the exchange name and ``(queue, weight)`` pairs in any order.
    Invalid input raises ValueError naming the problem: a non-str exchange, an
    empty or non-str queue name, a name not encodable as UTF-8, a weight that
    is not an int in 1..MAX_WEIGHT, or the same queue bound twice.

    ``ring.route(key)`` is the queue for hash input ``key`` (``str``, ``bytes``,
    or ``None`` for a message without one, which routes as ``NO_KEY``), or None
    when nothing is bound. It is the native router's method when that was built
    (``native=True``, the default if available), else the pure-Python one;
    both give the same answers, and neither goes through a Python-level call
    of this class.
    """

    __slots__ = ("_exchange", "_weights", "_native", "route")

    def __init__(self, exchange: object, bindings: Iterable[tuple[str, int]] = (), *, native: bool = NATIVE) -> None:
        # ``exchange: object`` and the bindings read as objects: whatever they are, a bad one is
        # a ValueError, also in the compiled engine (mypyc checks declared types, with TypeError).
        if not isinstance(exchange, str):
            raise ValueError(f"exchange name must be a str, got {exchange!r}")
        exchange_bytes = _utf8(exchange, "exchange name")
        weights: dict[str, int] = {}
        for binding in cast("Iterable[object]", bindings):
            try:
                pair_queue, pair_weight = cast("Iterable[object]", binding)
            except (TypeError, ValueError):
                raise ValueError(f"a binding must be a (queue, weight) pair, got {binding!r}") from None
            queue, weight = _check_binding(pair_queue, pair_weight)
            if queue in weights:
                raise ValueError(f"queue {queue!r} is bound twice")
            weights[queue] = weight
        self._exchange = exchange
        self._weights = MappingProxyType(dict(sorted(weights.items())))
        self._native = native

        order = sorted(weights.items(), key=lambda item: (item[1], item[0]))
        names = tuple(queue for queue, _ in order)
        seeds = tuple(_queue_seed(exchange_bytes, queue) for queue in names)
        lane_weights = tuple(weight for _, weight in order)
        if native:
            if _NativeRouter is None:
                raise ValueError("the native router (stompmq.broker._rendezvous) is not built")
            self.route: Callable[[bytes | str | None], str | None] = _NativeRouter(
                KEY_HASH_KEY, names, seeds, lane_weights
            ).route
        else:
            self.route = _LaneRouter(names, seeds, lane_weights).route

    @property
    def exchange(self) -> str:
        return self._exchange

    @property
    def bindings(self) -> Mapping[str, int]:
        """Read-only ``queue -> weight``, in queue-name order."""
        return self._weights

    @property
    def queues(self) -> tuple[str, ...]:
        """Bound queue names, sorted."""
        return tuple(self._weights)

    def __len__(self) -> int:
        return len(self._weights)

    def __repr__(self) -> str:
        return f"HashRing({self._exchange!r}, {list(self._weights.items())!r})"

    def with_binding(self, queue: str, weight: int = 1) -> HashRing:
        """A ring with ``queue`` added, or re-weighted if already bound."""
        return HashRing(self._exchange, {**self._weights, queue: weight}.items(), native=self._native)

    def without(self, queue: str) -> HashRing:
        """A ring with ``queue`` unbound; KeyError if it is not bound."""
        if queue not in self._weights:
            raise KeyError(queue)
        return HashRing(
            self._exchange, ((q, w) for q, w in self._weights.items() if q != queue), native=self._native
        )
