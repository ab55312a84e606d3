"""Tests for stompmq.broker.hashring (weighted rendezvous hashing).

The properties come from the consistent-hash exchange issue:

* uniform: for N = 2..20, 100 and 1000 weight-1 queues, the chi-squared
  statistic of per-queue counts over the keys "0".."99999" stays below the
  p = 0.01 critical value for N - 1 degrees of freedom;
* weight-true: weights 1, 1, 2, 2 give shares within 2 % *relative* of
  1/6, 1/6, 1/3, 1/3 (|share - expected| <= 0.02 * expected, which is
  stricter than 0.02 absolute);
* minimally disruptive: adding a queue moves keys only to it (about
  w / (W + w) of them), removing or re-weighting a queue moves only keys to or
  from it; zero keys move between queues that did not change;
* a function of the set of bindings: binding order, process and hash seed do
  not matter, and checked-in golden vectors pin the exact routing.

``reference_route`` below is an independent, deliberately naive transcription
of the algorithm in docs/consistent-hash.md (one queue at a time, float score
for every queue). Both fast routers -- the native one (``_rendezvous.c``) and
the pure-Python fallback -- must agree with it exactly; the tests that pin
answers run against each (``native`` parameter), the statistical ones against
the default.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.broker.hashring import KEY_HASH_KEY, MAX_WEIGHT, NATIVE, NO_KEY, HashRing, _LaneRouter

#: Run a test against the native router and the pure-Python one.
both_routers = pytest.mark.parametrize("native", [True, False], ids=["native", "python"])

KEYS = [str(i) for i in range(100_000)]
REPO_ROOT = Path(__file__).resolve().parents[2]

# --- the algorithm, transcribed from docs/consistent-hash.md -----------------

_M64 = (1 << 64) - 1


def ref_key_hash(key: bytes | str | None) -> int:
    data = b"" if key is None else key.encode("utf-8") if isinstance(key, str) else key
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=b"stompmq/chx/key/v1").digest(), "little")


def ref_queue_seed(exchange: str, queue: str) -> int:
    e = exchange.encode("utf-8")
    data = len(e).to_bytes(4, "big") + e + queue.encode("utf-8")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, key=b"stompmq/chx/queue/v1").digest(), "little")


def ref_mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def ref_u(x: int) -> float:
    return (2 * (x >> 12) + 1) / 2**53


def ref_score(weight: int, x: int) -> float:
    return weight / -math.log(ref_u(x))


def reference_route(exchange: str, bindings: list[tuple[str, int]], key: bytes | str | None) -> str | None:
    h = ref_key_hash(key)
    best: tuple[float, str] | None = None
    for queue, weight in bindings:
        score = ref_score(weight, ref_mix(h ^ ref_queue_seed(exchange, queue)))
        if best is None or score > best[0] or (score == best[0] and queue < best[1]):
            best = (score, queue)
    return None if best is None else best[1]


# --- chi-squared critical values, computed here -------------------------------


def _chi2_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-squared(df): the regularized upper incomplete gamma
    Q(df/2, x/2), by its power series below a + 1 and a continued fraction above."""
    a, t = df / 2, x / 2
    if t <= 0:
        return 1.0
    prefactor = math.exp(-t + a * math.log(t) - math.lgamma(a))
    if t < a + 1:
        term = total = 1 / a
        n = a
        while term > total * 1e-17:
            n += 1
            term *= t / n
            total += term
        return 1 - total * prefactor
    tiny = 1e-300
    b = t + 1 - a
    c, d = 1 / tiny, 1 / b
    result = d
    i = 0
    while True:
        i += 1
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        result *= d * c
        if abs(d * c - 1) < 1e-16:
            return result * prefactor


def chi2_critical(df: int, p: float = 0.01) -> float:
    """The x with P(chi-squared(df) > x) = p, by bisection."""
    lo, hi = 0.0, df + 10 * math.sqrt(2 * df) + 50
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf(mid, df) > p else (lo, mid)
    return (lo + hi) / 2


# Upper-tail p = 0.01 critical values published in the NIST/SEMATECH
# e-Handbook of Statistical Methods, section 1.3.6.7.4 (table to df = 100).
NIST_CHI2_P01 = {1: 6.635, 2: 9.210, 5: 15.086, 10: 23.209, 19: 36.191, 99: 134.642, 100: 135.807}


@pytest.mark.parametrize("df", sorted(NIST_CHI2_P01))
def test_chi2_critical_matches_published_table(df: int) -> None:
    assert round(chi2_critical(df), 3) == NIST_CHI2_P01[df]


# --- helpers -----------------------------------------------------------------


@cache
def routes(exchange: str, bindings: tuple[tuple[str, int], ...]) -> tuple[str | None, ...]:
    ring = HashRing(exchange, bindings)
    return tuple(ring.route(key) for key in KEYS)


def equal_queues(n: int, weight: int = 1) -> tuple[tuple[str, int], ...]:
    return tuple((f"q{i}", weight) for i in range(n))


def moved(before: tuple[str | None, ...], after: tuple[str | None, ...]) -> Counter[tuple[str | None, str | None]]:
    return Counter((b, a) for b, a in zip(before, after) if b != a)


# --- uniformity and weights --------------------------------------------------


@pytest.mark.parametrize("n", [*range(2, 21), 100, 1000])
def test_uniform(n: int) -> None:
    # N = 1000 is 10**8 queue scores: about 5 s of CPU, the bulk of this file's runtime.
    ring = HashRing("uniform", equal_queues(n))
    counts = Counter(ring.route(key) for key in KEYS)
    expected = len(KEYS) / n
    chi2 = sum((counts[f"q{i}"] - expected) ** 2 / expected for i in range(n))
    assert sum(counts.values()) == len(KEYS) and len(counts) == n
    assert chi2 < chi2_critical(n - 1), f"chi2 = {chi2:.2f} for N = {n}"


def test_weights_are_respected() -> None:
    bindings = (("a", 1), ("b", 1), ("c", 2), ("d", 2))
    counts = Counter(routes("weights", bindings))
    for queue, weight in bindings:
        expected = weight / 6
        share = counts[queue] / len(KEYS)
        assert abs(share - expected) <= 0.02 * expected, (queue, share, expected)


# --- movement ----------------------------------------------------------------


@pytest.mark.parametrize(("n", "weight"), [(5, 1), (10, 3)])
def test_add_moves_keys_only_to_new_queue(n: int, weight: int) -> None:
    before = routes("movement", equal_queues(n))
    after = routes("movement", (*equal_queues(n), ("new", weight)))
    moves = moved(before, after)
    assert {to for _, to in moves} == {"new"}
    expected = weight / (n + weight)
    assert abs(sum(moves.values()) / len(KEYS) - expected) <= 0.05 * expected


@pytest.mark.parametrize("n", [5, 10])
@pytest.mark.parametrize("position", ["first", "middle", "last"])
def test_remove_moves_only_removed_queues_keys(n: int, position: str) -> None:
    bindings = equal_queues(n)
    gone = bindings[{"first": 0, "middle": n // 2, "last": n - 1}[position]][0]
    before = routes("movement", bindings)
    after = routes("movement", tuple(b for b in bindings if b[0] != gone))
    moves = moved(before, after)
    assert {source for source, _ in moves} == {gone}
    assert sum(moves.values()) == before.count(gone)  # exactly its share, nothing else


@pytest.mark.parametrize(
    ("new_weight", "expected_moved"), [(4, 4 / 12 - 2 / 10), (1, 2 / 10 - 1 / 9)], ids=["up", "down"]
)
def test_reweight_moves_keys_only_to_or_from_that_queue(new_weight: int, expected_moved: float) -> None:
    bindings = equal_queues(5, weight=2)
    changed = "q2"
    before = routes("movement", bindings)
    after = routes("movement", tuple((q, new_weight if q == changed else w) for q, w in bindings))
    moves = moved(before, after)
    if new_weight > 2:
        assert {to for _, to in moves} == {changed}
    else:
        assert {source for source, _ in moves} == {changed}
    assert abs(sum(moves.values()) / len(KEYS) - expected_moved) <= 0.05 * expected_moved


names = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
weights = st.one_of(st.sampled_from([1, 2, 3, MAX_WEIGHT]), st.integers(1, MAX_WEIGHT))
binding_sets = st.dictionaries(names, weights, min_size=1, max_size=24)
PROPERTY_KEYS = [f"k{i}" for i in range(300)]


@settings(max_examples=150, deadline=None)
@given(exchange=names, bindings=binding_sets, data=st.data())
def test_no_key_moves_between_unchanged_queues(exchange: str, bindings: dict[str, int], data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["add", "remove", "reweight"]))
    if kind == "add":
        queue = data.draw(names.filter(lambda name: name not in bindings))
        changed = {**bindings, queue: data.draw(weights)}
    elif kind == "remove":
        queue = data.draw(st.sampled_from(sorted(bindings)))
        changed = {q: w for q, w in bindings.items() if q != queue}
    else:
        queue = data.draw(st.sampled_from(sorted(bindings)))
        changed = {**bindings, queue: data.draw(weights.filter(lambda w: w != bindings[queue]))}
    before_ring = HashRing(exchange, bindings.items())
    after_ring = HashRing(exchange, changed.items())
    for key in PROPERTY_KEYS:
        before, after = before_ring.route(key), after_ring.route(key)
        if before == after:
            continue
        assert queue in (before, after), (key, before, after)
        if kind == "add" or (kind == "reweight" and changed[queue] > bindings[queue]):
            assert after == queue
        else:
            assert before == queue


# --- exactness, determinism --------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    exchange=st.text(max_size=8),
    bindings=st.dictionaries(st.text(min_size=1, max_size=6), weights, max_size=40),
    keys=st.lists(st.one_of(st.binary(max_size=12), st.text(max_size=12), st.none()), min_size=1, max_size=10),
)
@both_routers
def test_matches_reference_implementation(
    native: bool, exchange: str, bindings: dict[str, int], keys: list[bytes | str | None]
) -> None:
    ring = HashRing(exchange, bindings.items(), native=native)
    for key in keys:
        assert ring.route(key) == reference_route(exchange, list(bindings.items()), key)


@both_routers
@pytest.mark.parametrize("weights_used", [(1,), (1, 7)], ids=["one-weight", "two-weights"])
def test_segments_larger_than_code_space_match_reference(native: bool, weights_used: tuple[int, ...]) -> None:
    # More than SEGMENT_LANES (4095) queues of one weight split into several segments.
    bindings = [(f"q{i:05d}", weights_used[i % len(weights_used)]) for i in range(9000)]
    ring = HashRing("wide", bindings, native=native)
    for key in ["0", "1", "2", "3", "4", "5"]:
        assert ring.route(key) == reference_route("wide", bindings, key)


def test_order_independent() -> None:
    bindings = [(f"queue-{i}", 1 + i % 4) for i in range(30)]
    expected = HashRing("order", bindings)
    rng = random.Random(20240611)
    for _ in range(5):
        shuffled = bindings[:]
        rng.shuffle(shuffled)
        ring = HashRing("order", shuffled)
        assert ring.bindings == expected.bindings
        assert all(ring.route(key) == expected.route(key) for key in KEYS[:3000])


def test_same_routing_in_other_processes() -> None:
    bindings = [(f"queue-{i}", 1 + i % 3) for i in range(12)]
    keys = KEYS[:500]
    program = (
        "import json, sys\n"
        "from stompmq.broker.hashring import HashRing\n"
        "bindings, keys = json.load(sys.stdin)\n"
        "ring = HashRing('procs', [tuple(b) for b in reversed(bindings)])\n"
        "print(json.dumps([ring.route(k) for k in keys]))\n"
    )
    ring = HashRing("procs", bindings)
    expected = [ring.route(key) for key in keys]
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
        result = subprocess.run(
            [sys.executable, "-c", program], input=json.dumps([bindings, keys]),
            capture_output=True, text=True, env=env, check=True,
        )
        assert json.loads(result.stdout) == expected


def test_score_is_strictly_increasing_in_m_for_a_fixed_weight() -> None:
    # The fast path's premise: for one weight, comparing m equals comparing float
    # scores. Probe consecutive m around the tightest point (u = 1/e) and others.
    for centre in (1 / math.e, 0.5, 1e-6, 1 - 1e-9):
        first = int(centre * 2**52) - 5_000
        for weight in (1, 7, MAX_WEIGHT):
            scores = [weight / -math.log((2 * m + 1) / 2**53) for m in range(first, first + 10_000)]
            assert all(a < b for a, b in zip(scores, scores[1:])), (centre, weight)


# --- golden vectors ----------------------------------------------------------

# Worked example of docs/consistent-hash.md: exchange "orders", queues q1, q2,
# q3 of weight 1, key "customer-42". (queue, seed s, x = mix(h ^ s), score).
WORKED_EXAMPLE_KEY_HASH = 0x3796D42913D899A0
WORKED_EXAMPLE = [
    ("q1", 0xA38DC56FBE69BDA6, 0x974CD057C82A4852, 1.9014571129750344),
    ("q2", 0x611FB13FB773F5D9, 0x924933616BE5DE0A, 1.7869452254070834),
    ("q3", 0x2316C45258E13310, 0x29D22E1B5852FBD3, 0.5519438632472513),
]

# (exchange, bindings, key, queue): generated once from reference_route and
# checked in; any change to these is a change of the routing algorithm.
N17 = [
    ("n00", 1), ("n01", 1), ("n02", 1), ("n03", 1), ("n04", 1), ("n05", 1),
    ("n06", 1), ("n07", 1), ("n08", 1), ("n09", 1), ("n10", 1), ("n11", 1),
    ("n12", 1), ("n13", 1), ("n14", 1), ("n15", 1), ("n16", 1),
]
O3 = [("q1", 1), ("q2", 1), ("q3", 1)]
W1122 = [("a", 1), ("b", 1), ("c", 2), ("d", 2)]
SKEW = [("light", 1), ("heavy", 10000)]
UNICODE = [("файл", 1), ("队列", 3), ("q", 2)]
GOLDEN_VECTORS = [
    ("orders", O3, "customer-42", "q1"),
    ("orders", O3, "customer-43", "q1"),
    ("orders", O3, None, "q2"),
    ("orders", O3, b"", "q2"),
    ("orders", [("q1", 1), ("q2", 1)], "customer-42", "q1"),
    ("orders", [("q2", 1), ("q3", 1)], "customer-42", "q2"),
    ("invoices", O3, "customer-42", "q2"),
    ("", [("a", 1), ("b", 1)], "k", "b"),
    ("ab", [("c", 1), ("d", 1), ("e", 1)], "x", "d"),
    ("a", [("bc", 1), ("d", 1), ("e", 1)], "x", "d"),
    ("échange", UNICODE, "ключ", "队列"),
    ("échange", UNICODE, "键", "q"),
    ("bin", [("a", 1), ("b", 1), ("c", 1), ("d", 1)], b"\xff\x00\xfe\x80", "d"),
    ("bin", [("a", 1), ("b", 1), ("c", 1), ("d", 1)], b"\x00", "b"),
    ("w", W1122, "0", "a"),
    ("w", W1122, "1", "b"),
    ("w", W1122, "2", "a"),
    ("w", W1122, "3", "c"),
    ("w", W1122, "4", "d"),
    ("w", W1122, "5", "c"),
    ("skew", SKEW, "one", "heavy"),
    ("skew", SKEW, "two", "heavy"),
    ("skew", SKEW, "16896", "light"),
    ("tournament", N17, "alpha", "n09"),
    ("tournament", N17, "beta", "n12"),
    ("tournament", N17, "gamma", "n11"),
    ("tournament", N17, "delta", "n11"),
    ("solo", [("only", 7)], "anything", "only"),
    ("empty", [], "anything", None),
]


def test_worked_example() -> None:
    assert ref_key_hash("customer-42") == WORKED_EXAMPLE_KEY_HASH
    for queue, seed, x, score in WORKED_EXAMPLE:
        assert ref_queue_seed("orders", queue) == seed
        assert ref_mix(WORKED_EXAMPLE_KEY_HASH ^ seed) == x
        assert ref_score(1, x) == score
    winner = max(WORKED_EXAMPLE, key=lambda row: row[3])[0]
    assert HashRing("orders", [("q1", 1), ("q2", 1), ("q3", 1)]).route("customer-42") == winner


@both_routers
@pytest.mark.parametrize(("exchange", "bindings", "key", "queue"), GOLDEN_VECTORS)
def test_golden_vectors(
    native: bool, exchange: str, bindings: list[tuple[str, int]], key: bytes | str | None, queue: str | None
) -> None:
    assert HashRing(exchange, bindings, native=native).route(key) == queue
    assert reference_route(exchange, bindings, key) == queue


# --- API and validation ------------------------------------------------------


@both_routers
def test_empty_and_single_binding(native: bool) -> None:
    assert HashRing("x", native=native).route("anything") is None
    assert HashRing("x", [("only", 5)], native=native).route("anything") == "only"


@both_routers
def test_missing_key_routes_as_empty_key(native: bool) -> None:
    ring = HashRing("x", equal_queues(7), native=native)
    assert ring.route(None) == ring.route(NO_KEY) == ring.route("") == reference_route("x", list(equal_queues(7)), b"")


@both_routers
def test_str_key_is_its_utf8_bytes(native: bool) -> None:
    ring = HashRing("x", equal_queues(9), native=native)
    assert all(ring.route(k) == ring.route(k.encode("utf-8")) for k in ["ключ", "键", "k\u00e9y", *KEYS[:200]])


@both_routers
def test_keys_of_every_length_across_hash_blocks(native: bool) -> None:
    # BLAKE2b works on 128-byte blocks: lengths around 0, 128, 256 and 384 take every
    # path of the native hash (empty message, one partial block, exact blocks, several).
    bindings = list(equal_queues(64))
    ring = HashRing("blocks", bindings, native=native)
    rng = random.Random(7693)
    for length in range(0, 400):
        key = bytes(rng.randrange(256) for _ in range(length))
        assert ring.route(key) == reference_route("blocks", bindings, key), length
        text = "é" * (length // 2)  # two UTF-8 bytes per character
        assert ring.route(text) == reference_route("blocks", bindings, text), length


@both_routers
def test_unencodable_or_unhashable_keys_raise(native: bool) -> None:
    ring = HashRing("x", equal_queues(3), native=native)
    with pytest.raises(UnicodeEncodeError):
        ring.route("\ud800")  # a lone surrogate has no UTF-8 form
    with pytest.raises(TypeError):
        ring.route(42)  # type: ignore[arg-type]


def test_native_router_is_built() -> None:
    # setup.py marks the extension optional so installs without a compiler still work, but
    # every machine we test and benchmark on has one: a silent fallback would go unnoticed.
    assert NATIVE, "stompmq.broker._rendezvous is missing: reinstall with a C compiler (pip install -e .)"


def test_native_router_checks_lane_order() -> None:
    # The winner search keeps the first of equal m, so HashRing hands lanes over sorted;
    # the router refuses anything else rather than break the name tie-break silently.
    from stompmq.broker._rendezvous import Router

    with pytest.raises(ValueError, match="names must ascend"):
        Router(KEY_HASH_KEY, ("b", "a"), (1, 2), (1, 1))
    with pytest.raises(ValueError, match="ascending order"):
        Router(KEY_HASH_KEY, ("a", "b"), (1, 2), (2, 1))
    with pytest.raises(ValueError, match="one entry per lane"):
        Router(KEY_HASH_KEY, ("a", "b"), (1,), (1, 1))
    assert Router(KEY_HASH_KEY, ("b", "a"), (1, 2), (1, 2)).route("k") in ("a", "b")


def test_native_router_leaves_keys_as_they_were() -> None:
    # PyUnicode_AsUTF8AndSize would cache a UTF-8 copy inside every non-ASCII key it saw.
    ring = HashRing("x", equal_queues(5), native=True)
    key = "ключ" * 50
    size = sys.getsizeof(key)
    ring.route(key)
    assert sys.getsizeof(key) == size


@both_routers
def test_derived_rings_keep_the_router_choice(native: bool) -> None:
    ring = HashRing("x", [("a", 1), ("b", 2)], native=native)
    for derived in (ring.with_binding("c", 3), ring.without("a")):
        assert isinstance(derived.route.__self__, _LaneRouter) is not native


def test_derived_rings() -> None:
    ring = HashRing("x", [("b", 2), ("a", 1)])
    assert ring.queues == ("a", "b") and dict(ring.bindings) == {"a": 1, "b": 2} and len(ring) == 2
    assert ring.exchange == "x"
    assert dict(ring.with_binding("c", 3).bindings) == {"a": 1, "b": 2, "c": 3}
    assert dict(ring.with_binding("a", 4).bindings) == {"a": 4, "b": 2}
    assert dict(ring.without("a").bindings) == {"b": 2}
    assert dict(ring.bindings) == {"a": 1, "b": 2}  # unchanged
    with pytest.raises(KeyError):
        ring.without("zzz")
    with pytest.raises(TypeError):
        ring.bindings["a"] = 3  # type: ignore[index]
    assert "HashRing('x'" in repr(ring)


@pytest.mark.parametrize(
    ("exchange", "bindings", "message"),
    [
        ("x", [("q", 0)], "must be in 1..10000, got 0"),
        ("x", [("q", MAX_WEIGHT + 1)], "must be in 1..10000, got 10001"),
        ("x", [("q", -3)], "must be in 1..10000"),
        ("x", [("q", 1.0)], "weight of queue 'q' must be an int"),
        ("x", [("q", True)], "weight of queue 'q' must be an int"),
        ("x", [("q", "2")], "weight of queue 'q' must be an int"),
        ("x", [("", 1)], "queue name must be a non-empty str"),
        ("x", [(7, 1)], "queue name must be a non-empty str"),
        ("x", [("q", 1), ("q", 2)], "queue 'q' is bound twice"),
        ("x", [("\udc80", 1)], "queue name '\\udc80' is not encodable as UTF-8"),
        ("x", [("q", 1, 2)], "a binding must be a (queue, weight) pair, got ('q', 1, 2)"),
        ("x", ["q"], "a binding must be a (queue, weight) pair, got 'q'"),
        (b"x", [("q", 1)], "exchange name must be a str"),
        ("\ud800", [("q", 1)], "exchange name '\\ud800' is not encodable as UTF-8"),
    ],
)
def test_validation(exchange: object, bindings: list[tuple[object, object]], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        HashRing(exchange, bindings)  # type: ignore[arg-type]


def test_with_binding_validates() -> None:
    with pytest.raises(ValueError, match="weight of queue 'q'"):
        HashRing("x", [("a", 1)]).with_binding("q", 0)
