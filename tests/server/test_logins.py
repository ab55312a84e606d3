"""Before login: the budget of connections not yet CONNECTED and the failed-login throttle, in
virtual time (the throttle takes the time as an argument; ``check_password`` runs under
``autojump_clock``)."""

from __future__ import annotations

import pytest
import trio

from stompmq.server.auth import Permission, User, Users, hash_password
from stompmq.server.logins import CONNECT_MAX_BYTES, LoginBudget, LoginThrottle
from stompmq.server.security import CHECKS_PER_KEY, LoginThrottled, Security
from stompmq.server.settings import ServerSettings


def test_the_budget_admits_whole_shares_and_takes_them_back() -> None:
    budget = LoginBudget(total=3 * CONNECT_MAX_BYTES)
    assert budget.reserve() and budget.reserve() and budget.reserve()
    assert not budget.reserve()  # spent: refused, nothing reserved
    assert budget.reserved == 3 * CONNECT_MAX_BYTES
    budget.release()
    assert budget.reserve()


def test_the_back_off_doubles_per_failure_up_to_the_longest() -> None:
    throttle = LoginThrottle(first=1.0, longest=8.0, forget=100.0)
    key = ("10.0.0.1", "alice")
    assert throttle.delay(key, 0.0) == 0.0  # nobody waits before a failure
    now = 0.0
    waits = []
    for _ in range(6):
        throttle.failed(key, now)
        waits.append(throttle.delay(key, now))
        now += waits[-1]  # the next attempt comes exactly when allowed, and fails again
        assert throttle.delay(key, now) == 0.0
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert throttle.delay(key, now - 0.25) == pytest.approx(0.25)
    throttle.succeeded(key)
    throttle.failed(key, now)
    assert throttle.delay(key, now) == 1.0  # a success ends the streak


def test_failures_are_counted_per_address_and_login() -> None:
    throttle = LoginThrottle(first=1.0)
    for _ in range(10):
        throttle.failed(("10.0.0.1", "mallory"), 0.0)
    assert throttle.delay(("10.0.0.1", "mallory"), 0.5) > 0
    assert throttle.delay(("10.0.0.1", "alice"), 0.5) == 0.0  # same address, another login
    assert throttle.delay(("10.0.0.2", "mallory"), 0.5) == 0.0  # same login, another address


def test_an_old_streak_is_forgotten() -> None:
    throttle = LoginThrottle(first=1.0, longest=60.0, forget=600.0)
    key = ("10.0.0.1", "alice")
    for _ in range(5):
        throttle.failed(key, 0.0)
    assert throttle.delay(key, 0.0) == 16.0
    throttle.failed(key, 16.0 + 600.0)  # long after its back-off ended: a first failure again
    assert throttle.delay(key, 616.0) == 1.0


def test_the_throttle_table_is_bounded() -> None:
    throttle = LoginThrottle(first=1.0, forget=10.0, capacity=10)
    for i in range(100):
        throttle.failed((f"10.0.0.{i}", "x"), float(i) / 1000)
    assert len(throttle) <= 10
    throttle.failed(("late", "x"), 50.0)  # everything else is stale: swept
    assert len(throttle) == 1


def _security() -> Security:
    security = Security(ServerSettings(port=0))
    security.users = Users({"alice": User("alice", hash_password("pw"), [], {"/": Permission()})})
    return security


async def test_a_burst_of_guesses_costs_a_few_hashes_and_others_pass(autojump_clock: trio.abc.Clock) -> None:
    security = _security()
    hashed = 0
    authenticate = security.authenticate

    def counting(login: str | None, passcode: str | None) -> User | None:
        nonlocal hashed
        hashed += 1
        return authenticate(login, passcode)

    security.authenticate = counting  # type: ignore[method-assign]
    outcomes: list[str] = []

    async def guess() -> None:
        try:
            user = await security.check_password("10.0.0.1", "alice", "guess")
            outcomes.append("bad" if user is None else "in")
        except LoginThrottled as e:
            outcomes.append(e.message)

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(guess)
    assert hashed == CHECKS_PER_KEY  # the first few; the rest saw their failures
    assert outcomes.count("bad") == CHECKS_PER_KEY
    refused = [o for o in outcomes if o.startswith("too many failed logins, retry in ")]
    assert len(refused) == 40 - CHECKS_PER_KEY
    assert security._checking == {}  # nothing left behind
    # the right passcode from the same address, for another login, is not held
    assert await security.check_password("10.0.0.1", "bob", "x") is None
    with pytest.raises(LoginThrottled):
        await security.check_password("10.0.0.1", "alice", "pw")  # alice's back-off holds
    await trio.sleep(security.throttle.delay(("10.0.0.1", "alice"), trio.current_time()))
    assert (await security.check_password("10.0.0.1", "alice", "pw")) is security.users.users["alice"]  # type: ignore[union-attr]
