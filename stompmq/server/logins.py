"""Before a client has logged in: the byte budget of connections not yet CONNECTED, and the
failed-login throttle.

Pure: no trio, no sockets, no clock (time is passed in), so both are unit-tested in
virtual time without a broker.

* **Budget.**  Until CONNECTED a connection may send at most ``CONNECT_MAX_BYTES`` (its
  CONNECT frame: headers, no large body).  Each such connection reserves that much of
  ``--max-login-bytes`` when it is accepted and gives it back once CONNECTED (or closed);
  a connection that finds the budget spent is refused at once.  So clients that never
  log in hold at most ``--max-login-bytes`` of buffers in all, however many there are.
* **Throttle.**  Failed logins are counted per (source address, login), not per address,
  so a correct login from an address that also carries an attack on other logins (a NAT,
  a shared host) is never held behind their failures.  After the n-th consecutive failure
  of one key the next attempt is refused for ``first * 2**(n-1)`` seconds (at most
  ``longest``) with "too many failed logins, retry in N s" — refused at once, not delayed,
  so a guess costs a connection nothing to wait for and the broker nothing to hold.
  A success clears the key; a key idle for ``forget`` seconds after its back-off is
  forgotten.  The table is bounded (``capacity`` keys, stale ones swept first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Bytes a connection may send before its CONNECT frame is complete (heart-beat EOLs before it
#: included): room for the headers of any real CONNECT, a bearer token as passcode included.
CONNECT_MAX_BYTES = 16 * 1024
#: Seconds of back-off after the first failed login of one (address, login); doubled per failure.
FIRST_BACKOFF = 1.0
#: The longest back-off, in seconds.
LONGEST_BACKOFF = 60.0
#: Seconds after its back-off ends that a key's failures are forgotten (the count starts anew).
FORGET_SECONDS = 600.0
#: Keys remembered by the throttle (bounded memory under a distributed guess).
MAX_THROTTLED = 100_000

Key = tuple[str, str]
"""(source address, login) — the unit the throttle counts failures of."""


@dataclass(slots=True)
class LoginBudget:
    """Bytes reserved by connections that have not logged in yet (see the module docstring)."""

    total: int
    each: int = CONNECT_MAX_BYTES
    reserved: int = 0

    def reserve(self) -> bool:
        """Reserve one connection's share; False (nothing reserved) when the budget is spent."""
        if self.reserved + self.each > self.total:
            return False
        self.reserved += self.each
        return True

    def release(self) -> None:
        self.reserved -= self.each


@dataclass(slots=True)
class _Failures:
    count: int
    retry_at: float


@dataclass(slots=True)
class LoginThrottle:
    """When each (address, login) may next try to log in (see the module docstring)."""

    first: float = FIRST_BACKOFF
    longest: float = LONGEST_BACKOFF
    forget: float = FORGET_SECONDS
    capacity: int = MAX_THROTTLED
    _keys: dict[Key, _Failures] = field(default_factory=dict)

    def delay(self, key: Key, now: float) -> float:
        """Seconds until ``key`` may try again; 0: it may try now."""
        entry = self._keys.get(key)
        return 0.0 if entry is None or entry.retry_at <= now else entry.retry_at - now

    def failed(self, key: Key, now: float) -> None:
        """Count a failure: the key's next attempt waits twice as long as after the previous one."""
        table = self._keys
        entry = table.get(key)
        if entry is not None and now >= entry.retry_at + self.forget:
            entry = None  # an old streak: start anew
        if entry is None:
            if len(table) >= self.capacity:
                self._sweep(now)
            entry = table[key] = _Failures(0, now)
        entry.count += 1
        entry.retry_at = now + min(self.first * 2.0 ** min(entry.count - 1, 62), self.longest)

    def succeeded(self, key: Key) -> None:
        self._keys.pop(key, None)

    def _sweep(self, now: float) -> None:
        """Forget stale keys; if all are live, forget the oldest half (a flood of keys)."""
        table = self._keys
        for key in [k for k, e in table.items() if now >= e.retry_at + self.forget]:
            del table[key]
        if len(table) >= self.capacity:
            for key in list(table)[: len(table) // 2]:
                del table[key]

    def __len__(self) -> int:
        return len(self._keys)
