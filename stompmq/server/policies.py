"""Every vhost's policies and operator policies: stored, and handed to each vhost's engine.

A policy is a ``broker_meta`` row (a ``SavePolicy`` row, ``Store.write``), its record naming its vhost and
whether it is an operator policy, so a restart applies it again.  A change is applied to the
vhost's engine at once (broker/policy_apply.py) and stored with the next commit group; on
PostgreSQL the commit notifies every broker sharing the database, which reads all the policies
again and applies them (``Store.policies_changed``): within a LISTEN tick (half a second) of the
commit, the commit within ``--flush-interval`` of the change.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..broker import Broker, ClientError
from ..broker.policy_match import Policy
from ..storage.base import Store
from ..storage.rows import SavePolicy

log = logging.getLogger(__name__)

#: (operator policy?, vhost, name)
PolicyKey = tuple[bool, str, str]


def stored_key(key: PolicyKey) -> str:
    """The policy's name in the store (after ``SavePolicy.PREFIX``): unique, one per policy."""
    operator, vhost, name = key
    return f"{'operator' if operator else 'policy'}/{urllib.parse.quote(vhost, safe='')}/{name}"


class Policies:
    """The broker's policies by (operator?, vhost, name)."""

    def __init__(self, store: Store, engines: Mapping[str, Broker]) -> None:
        self.store = store
        self.engines = engines
        self.policies: dict[PolicyKey, Policy] = {}

    def of(self, vhost: str, operator: bool) -> list[Policy]:
        """The vhost's policies (or operator policies), by name."""
        return sorted((p for (op, v, _), p in self.policies.items() if op == operator and v == vhost),
                      key=lambda p: p.name)

    def vhosts(self) -> list[str]:
        return sorted({vhost for _, vhost, _ in self.policies})

    def load(self, records: list[dict[str, Any]]) -> None:
        """Take the stored policies (at start, or all of them again when another broker changed
        them) and apply them to every vhost; a record this version cannot read is logged, skipped."""
        loaded: dict[PolicyKey, Policy] = {}
        for record in records:
            try:
                operator = bool(record.get("operator", False))
                body = {k: v for k, v in record.items() if k not in ("name", "vhost", "operator")}
                policy = Policy.parse(str(record.get("name")), body, operator)
                loaded[operator, str(record.get("vhost")), policy.name] = policy
            except ClientError as e:
                log.warning("a stored policy is skipped: %s (%s)", e.message, record)
        touched = {vhost for _, vhost, _ in {*loaded, *self.policies}}
        self.policies = loaded
        for vhost in sorted(touched):
            self.apply(vhost)

    def apply(self, vhost: str) -> None:
        """Hand the vhost's engine (if it has one) its policies and operator policies."""
        engine = self.engines.get(vhost)
        if engine is not None:
            engine.set_policies([p for (_, v, _), p in self.policies.items() if v == vhost])

    def put(self, vhost: str, name: str, body: Mapping[str, Any], operator: bool) -> tuple[Policy, bool]:
        """Set a policy (ClientError if ``body`` is not one); (the policy, whether it is new)."""
        policy = Policy.parse(name, body, operator)
        key = (operator, vhost, name)
        created = key not in self.policies
        self.policies[key] = policy
        self.store.write(SavePolicy(stored_key(key), {**policy.record(), "vhost": vhost, "operator": operator}))
        log.info("%s %s of vhost %s set: pattern %r, %s", "operator policy" if operator else "policy", name, vhost,
                 policy.pattern, dict(policy.definition))
        self.apply(vhost)
        return policy, created

    def delete(self, vhost: str, name: str, operator: bool) -> bool:
        """Clear a policy; False if there was none."""
        key = (operator, vhost, name)
        if self.policies.pop(key, None) is None:
            return False
        self.store.write(SavePolicy(stored_key(key), None))
        log.info("%s %s of vhost %s cleared", "operator policy" if operator else "policy", name, vhost)
        self.apply(vhost)
        return True
