"""Users files for the end-to-end permission tests: every user's password is ``pw-NAME``."""

from __future__ import annotations

from pathlib import Path

from stompmq.server.auth import Permission, User, Users, hash_password

#: A permission pattern that matches nothing (RabbitMQ's idiom).
NOTHING = "^$"


def write_users(path: Path, permissions: dict[str, Permission], vhost: str = "/") -> str:
    """Save a users file giving each user ``permissions[name]`` on ``vhost``; its path, as a str."""
    users = Users({name: User(name, hash_password("pw-" + name), [], {vhost: perm})
                   for name, perm in permissions.items()})
    users.save(path)
    return str(path)
