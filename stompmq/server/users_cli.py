"""``stompmq users --users-file F VERB ...``: edit the users file a broker reads (auth.py).

A running broker picks the change up on SIGHUP or within ``WATCH_SECONDS``.
"""

from __future__ import annotations

import argparse
import getpass
import re
import sys
from pathlib import Path

from ..vhost_names import DEFAULT_VHOST
from .auth import KNOWN_TAGS, Permission, User, Users, UsersFileError, hash_password


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stompmq users", description="Manage the users file of --users-file.")
    parser.add_argument("--users-file", required=True, metavar="FILE")
    verbs = parser.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="add a user (no permissions until set-permissions)")
    add.add_argument("name")
    add.add_argument("--password", help="the password (asked for when omitted)")
    add.add_argument("--tags", default="", help="comma-separated: administrator, monitoring")
    passwd = verbs.add_parser("passwd", help="change a user's password")
    passwd.add_argument("name")
    passwd.add_argument("--password")
    delete = verbs.add_parser("delete", help="delete a user")
    delete.add_argument("name")
    verbs.add_parser("list", help="list users, tags and permissions")
    perms = verbs.add_parser("set-permissions", help="set a user's configure/write/read regexes on a vhost")
    perms.add_argument("name")
    perms.add_argument("--vhost", default=DEFAULT_VHOST)
    for action in ("configure", "write", "read"):
        perms.add_argument(f"--{action}", required=True, metavar="REGEX")
    return parser


def users_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    path = Path(args.users_file)
    try:
        users = Users.load(path) if path.exists() else Users()
    except UsersFileError as e:
        print(f"stompmq users: {e}", file=sys.stderr)
        return 2
    name: str = getattr(args, "name", "")
    if args.verb == "list":
        for user in sorted(users.users.values(), key=lambda u: u.name):
            print(f"{user.name}\ttags={','.join(user.tags)}")
            for vhost, p in sorted(user.permissions.items()):
                print(f"\tvhost={vhost}\tconfigure={p.configure}\twrite={p.write}\tread={p.read}")
        return 0
    if args.verb != "add" and name not in users.users:
        print(f"stompmq users: no user {name!r}", file=sys.stderr)
        return 1
    if args.verb == "add":
        if name in users.users:
            print(f"stompmq users: user {name!r} exists (use passwd)", file=sys.stderr)
            return 1
        tags = [t for t in args.tags.split(",") if t]
        unknown = set(tags) - KNOWN_TAGS
        if unknown:
            print(f"stompmq users: unknown tags {', '.join(sorted(unknown))}", file=sys.stderr)
            return 1
        users.users[name] = User(name, hash_password(_password(args.password)), tags)
    elif args.verb == "passwd":
        users.users[name].password = hash_password(_password(args.password))
    elif args.verb == "delete":
        del users.users[name]
    elif args.verb == "set-permissions":
        permission = Permission(args.configure, args.write, args.read)
        try:
            permission.validate()
        except re.error as e:
            print(f"stompmq users: bad regular expression: {e}", file=sys.stderr)
            return 1
        users.users[name].permissions[args.vhost] = permission
    users.save(path)
    return 0


def _password(given: str | None) -> str:
    return given if given is not None else getpass.getpass("password: ")
