"""Users and their permissions over the API, as RabbitMQ's: ``/api/users``, ``/api/permissions``.

``PUT /api/users/{name}`` takes ``{"password": TEXT}`` (hashed here with scrypt, as
``stompmq users`` does) or ``{"password_hash": HASH}`` (the users file's ``scrypt$...`` form)
and ``"tags"`` (a list, or RabbitMQ's comma-separated text); a user that exists keeps its
password when the body gives none, and its permissions always.  ``PUT
/api/permissions/{vhost}/{user}`` takes ``configure``, ``write`` and ``read``, each a regular
expression as the users file has them.  A password or its hash is never answered.

Every route here is for administrators only, reads included (``ApiRoute.admin``): the list of
users is what a guesser wants first.  The users live in the broker's users file, the one the
``stompmq users`` CLI writes: each change reads the file, changes it and writes it back
atomically (an edit made meanwhile by the CLI is kept), then reloads it at once
(``Security.reload``), so it holds for the next login, STOMP's and the API's alike, and
survives a restart.  Without a users file (``--users-file``) there is nowhere to keep a user:
409, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..auth import KNOWN_TAGS, Permission, User, Users, UsersFileError, hash_password, is_password_hash
from .requests import json_object, log, only_fields

if TYPE_CHECKING:
    from .management import Management

ACTIONS = ("configure", "write", "read")


def user_json(user: User) -> dict[str, Any]:
    return {"name": user.name, "tags": list(user.tags)}


def permission_json(user: str, vhost: str, permission: Permission) -> dict[str, str]:
    return {"user": user, "vhost": vhost, **{action: getattr(permission, action) for action in ACTIONS}}


def _tags(value: Any) -> list[str]:
    """RabbitMQ's ``"administrator,monitoring"`` or a list of tags; 400 for an unknown one."""
    if isinstance(value, str):
        tags = [t.strip() for t in value.split(",") if t.strip()]
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        tags = list(value)
    else:
        raise HTTPException(400, "tags must be a list of tags or a comma-separated text")
    unknown = sorted(set(tags) - KNOWN_TAGS)
    if unknown:
        raise HTTPException(400, f"unknown tag {unknown[0]!r}: the tags are {', '.join(sorted(KNOWN_TAGS))}")
    return tags


class UserApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    def _path(self) -> Path:
        users_file = self.app.settings.users_file
        if not users_file:
            raise HTTPException(409, "the broker runs without a users file (--users-file): there is nowhere to "
                                     "keep users and permissions; start it with one (stompmq users writes it)")
        return Path(users_file)

    def _load(self) -> tuple[Path, Users]:
        path = self._path()
        try:
            return path, Users.load(path) if path.exists() else Users()
        except UsersFileError as e:
            raise HTTPException(409, f"{e}: fix the file first") from None

    def _save(self, path: Path, users: Users) -> None:
        """Write the file and reload it at once: the next login sees the change."""
        users.save(path)
        if self.app.security is not None:
            self.app.security.reload({str(path)})

    def _user(self, users: Users, name: str) -> User:
        user = users.users.get(name)
        if user is None:
            raise HTTPException(404, f"no user {name!r}")
        return user

    async def list_users(self, request: Request) -> Response:
        _, users = self._load()
        return JSONResponse({"items": [user_json(u) for _, u in sorted(users.users.items())]})

    async def get_user(self, request: Request) -> Response:
        _, users = self._load()
        return JSONResponse(user_json(self._user(users, request.path_params["name"])))

    async def put_user(self, request: Request) -> Response:
        """Create or replace a user's password and tags (201 if it is new); permissions are kept."""
        name = request.path_params["name"]
        body = await json_object(request)
        only_fields(body, {"password", "password_hash", "tags"}, "a user has password or password_hash, and tags")
        if "password" in body and "password_hash" in body:
            raise HTTPException(400, "give password or password_hash, not both")
        password, hashed = body.get("password"), body.get("password_hash")
        if password is not None and (not isinstance(password, str) or not password):
            raise HTTPException(400, "password must be a non-empty text")
        if hashed is not None and (not isinstance(hashed, str) or not is_password_hash(hashed)):
            raise HTTPException(400, "password_hash must be a hash as the users file has them "
                                     "(scrypt$N$r$p$SALT$HASH, as stompmq users writes)")
        tags = _tags(body.get("tags", []))
        if password is not None:
            hashed = await trio.to_thread.run_sync(hash_password, password)  # ~50 ms of scrypt
        path, users = self._load()  # (after the hash: the file as it is now)
        present = users.users.get(name)
        if hashed is None:
            if present is None:
                raise HTTPException(400, f"user {name!r} is new: give a password or a password_hash")
            hashed = present.password
        users.users[name] = User(name, hashed, tags, present.permissions if present is not None else {})
        self._save(path, users)
        log.info("user %s %s through the management API (tags %s)", name,
                 "created" if present is None else "changed", ",".join(tags) or "none")
        return JSONResponse(user_json(users.users[name]), status_code=201 if present is None else 200)

    async def delete_user(self, request: Request) -> Response:
        name = request.path_params["name"]
        path, users = self._load()
        self._user(users, name)
        del users.users[name]
        self._save(path, users)
        log.info("user %s deleted through the management API", name)
        return JSONResponse({"deleted": name})

    async def list_permissions(self, request: Request) -> Response:
        _, users = self._load()
        return JSONResponse({"items": [permission_json(u.name, vhost, p) for _, u in sorted(users.users.items())
                                       for vhost, p in sorted(u.permissions.items())]})

    def _target(self, request: Request, users: Users) -> tuple[str, User]:
        vhost = request.path_params["vhost"]
        if vhost not in self.app.engines:
            raise HTTPException(404, f"no vhost {vhost!r}")
        return vhost, self._user(users, request.path_params["user"])

    async def get_permission(self, request: Request) -> Response:
        _, users = self._load()
        vhost, user = self._target(request, users)
        permission = user.permissions.get(vhost)
        if permission is None:
            raise HTTPException(404, f"user {user.name!r} has no permissions in vhost {vhost!r}")
        return JSONResponse(permission_json(user.name, vhost, permission))

    async def put_permission(self, request: Request) -> Response:
        """Set the user's three patterns on the vhost (201 if it had none there)."""
        body = await json_object(request)
        only_fields(body, set(ACTIONS), "a permission has configure, write and read")
        missing = [action for action in ACTIONS if not isinstance(body.get(action), str)]
        if missing:
            raise HTTPException(400, f"{missing[0]} is missing: a permission has configure, write and read, each a "
                                     "regular expression (\"^$\" for none, \".*\" for all)")
        permission = Permission(*(body[action] for action in ACTIONS))
        try:
            permission.validate()
        except re.error as e:
            raise HTTPException(400, f"bad regular expression: {e}") from None
        path, users = self._load()
        vhost, user = self._target(request, users)
        created = vhost not in user.permissions
        user.permissions[vhost] = permission
        self._save(path, users)
        log.info("permissions of user %s in vhost %s set through the management API", user.name, vhost)
        return JSONResponse(permission_json(user.name, vhost, permission), status_code=201 if created else 200)

    async def delete_permission(self, request: Request) -> Response:
        path, users = self._load()
        vhost, user = self._target(request, users)
        if user.permissions.pop(vhost, None) is None:
            raise HTTPException(404, f"user {user.name!r} has no permissions in vhost {vhost!r}")
        self._save(path, users)
        log.info("permissions of user %s in vhost %s deleted through the management API", user.name, vhost)
        return JSONResponse({"deleted": user.name, "vhost": vhost})
