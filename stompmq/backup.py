"""``stompmq backup DEST``: a consistent copy of a live SQLite store.

SQLite's online backup API copies the database inside one read transaction
(``pages=-1``: all pages in one step), so the copy is the database as of one
commit: every message whose RECEIPT was sent before the backup began is in it.
The store runs in WAL mode, so the broker keeps committing meanwhile (readers
do not block its writer), and the broker's own flock is on ``PATH.lock``, which
a reader does not need.  The copy is written next to DEST and renamed into
place, so DEST is never a half-written file.  An existing DEST is refused unless
``--force`` says to replace it (a backup must not silently overwrite the last
good one), and every error names the file it is about.  PostgreSQL stores are
backed up with PostgreSQL's own tools (pg_dump, base backups).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path

from .config import load_config

SQLITE_PREFIX = "sqlite:///"


class BackupError(Exception):
    """The backup could not be made; the message names the file at fault."""


def backup_sqlite(source: str, dest: str, *, force: bool = False) -> None:
    """Copy the SQLite database at ``source`` to ``dest`` consistently, even while it is in use."""
    if not Path(source).is_file():
        raise BackupError(f"no SQLite store at {source}")
    target = Path(dest)
    if target.is_dir():
        raise BackupError(f"{dest} is a directory: name the backup file")
    if target.exists() and not force:
        raise BackupError(f"{dest} exists: remove it or give --force to replace it")
    if target.exists() and target.resolve() == Path(source).resolve():
        raise BackupError(f"{dest} is the store itself")
    tmp = dest + ".partial"
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise BackupError(f"cannot read {source}: {e}") from None
    try:
        try:
            dst = sqlite3.connect(tmp)
        except sqlite3.Error as e:
            raise BackupError(f"cannot write {dest}: {e}") from None
        try:
            src.execute("PRAGMA busy_timeout = 10000")
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode = DELETE")  # a single self-contained file
        except sqlite3.Error as e:
            raise BackupError(f"cannot copy {source} to {dest}: {e}") from None
        finally:
            dst.close()
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        src.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stompmq backup", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("dest", metavar="DEST", help="the backup file to write (refused if it exists, unless --force)")
    parser.add_argument("--force", action="store_true", help="replace DEST if it exists")
    parser.add_argument("--store", metavar="URL", help="the store to copy: sqlite:///PATH [default: as the broker: "
                        "env STOMPMQ_STORE, --config, else stompmq.db in --data-dir]")
    parser.add_argument("--data-dir", metavar="DIR", help="the broker's --data-dir (its default SQLite store)")
    parser.add_argument("--config", metavar="FILE", help="the broker's TOML settings file (for its store)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    broker_args = [arg for flag in ("store", "data_dir", "config") if getattr(args, flag) is not None
                   for arg in ("--" + flag.replace("_", "-"), getattr(args, flag))]
    config = load_config(broker_args)
    url = config.store_url
    if not url.startswith(SQLITE_PREFIX):
        print(f"stompmq backup: only SQLite stores ({config.store_shown} is not one); back up PostgreSQL "
              "with pg_dump", file=sys.stderr)
        return 2
    source = url[len(SQLITE_PREFIX):]
    try:
        backup_sqlite(source, args.dest, force=args.force)
    except (BackupError, OSError) as e:
        print(f"stompmq backup: {e}", file=sys.stderr)
        return 2
    print(f"backed up {Path(source).resolve()} to {Path(args.dest).resolve()}")
    return 0
