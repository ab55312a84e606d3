"""Print the uniformity and key-movement tables of docs/consistent-hash.md.

Usage: python -m benchmarks.hashring_table

Uniformity: exchange "uniform", N weight-1 queues "q0".."q{N-1}", keys
"0".."99999" (the same setup as tests/broker/test_hashring.py::test_uniform).
Movement: exchange "movement", weight-1 queues "q0".."q{n-1}", the same keys;
a key "moved" if its queue differs before and after the change.
"""

from __future__ import annotations

from collections import Counter

from stompmq.broker.hashring import HashRing

KEYS = [str(i) for i in range(100_000)]

# Upper-tail p = 0.01 chi-squared critical values by degrees of freedom, from
# the NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.4.
CHI2_CRITICAL_P01 = {
    1: 6.635, 2: 9.210, 3: 11.345, 4: 13.277, 5: 15.086, 6: 16.812, 7: 18.475,
    8: 20.090, 9: 21.666, 10: 23.209, 11: 24.725, 12: 26.217, 13: 27.688,
    14: 29.141, 15: 30.578, 16: 32.000, 17: 33.409, 18: 34.805, 19: 36.191,
}


def route_all(exchange: str, bindings: list[tuple[str, int]], keys: list[str] = KEYS) -> list[str | None]:
    ring = HashRing(exchange, bindings)
    return [ring.route(key) for key in keys]


def chi_squared(counts: list[int], expected: float) -> float:
    return sum((c - expected) ** 2 / expected for c in counts)


def critical_p01(df: int) -> float:
    """The p = 0.01 upper-tail chi-squared critical value: the NIST table up to 19 degrees of
    freedom, the Wilson-Hilferty approximation (within 0.1 % from 20 on) beyond."""
    if df in CHI2_CRITICAL_P01:
        return CHI2_CRITICAL_P01[df]
    z = 2.326348  # the standard normal's upper 1 % point
    return df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3


def uniformity_table() -> None:
    print("| N | chi-squared | critical (p = 0.01) | min count | max count |")
    print("|---:|---:|---:|---:|---:|")
    for n in range(2, 21):
        counts = Counter(route_all("uniform", [(f"q{i}", 1) for i in range(n)]))
        per_queue = [counts[f"q{i}"] for i in range(n)]
        chi2 = chi_squared(per_queue, len(KEYS) / n)
        print(f"| {n} | {chi2:.2f} | {critical_p01(n - 1):.3f} | {min(per_queue)} | {max(per_queue)} |")


def movement_table() -> None:
    print("| change | keys moved | share of the changed queue | moved between other queues |")
    print("|---|---:|---:|---:|")
    for n in (5, 10):
        queues = [(f"q{i}", 1) for i in range(n)]
        before = route_all("movement", queues)
        for position, index in (("first", 0), ("middle", n // 2), ("last", n - 1)):
            gone = queues[index][0]
            after = route_all("movement", [b for b in queues if b[0] != gone])
            row(f"remove {position} of {n} ({gone})", before, after, gone, before.count(gone))
        added = f"q{n}"
        after = route_all("movement", [*queues, (added, 1)])
        row(f"add a queue to {n} ({added})", before, after, added, after.count(added))


def row(label: str, before: list[str | None], after: list[str | None], changed: str, share: int) -> None:
    moves = [(b, a) for b, a in zip(before, after) if b != a]
    elsewhere = sum(1 for b, a in moves if changed not in (b, a))
    total = len(KEYS)
    print(f"| {label} | {len(moves) / total:.3%} | {share / total:.3%} | {elsewhere} |")


def main() -> None:
    uniformity_table()
    print()
    movement_table()


if __name__ == "__main__":
    main()
