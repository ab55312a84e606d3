"""End-to-end suites: a real broker (tests/support) over real sockets, on every store.

Timing semantics belong in virtual time (tests/server, tests/broker); here a wall-clock wait
polls for a condition with a generous deadline, and a quiet period only checks that something
does *not* happen.
"""
