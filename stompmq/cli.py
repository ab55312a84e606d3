"""The ``stompmq`` command."""

from __future__ import annotations

import sys

import trio

from .broker import Broker
from .broker.definitions import DefinitionsError
from .config import load_config
from .logs import setup_logging
from .server import run_until_signal
from .server.app import tune_gc
from .server.security import SecurityError
from .server.users_cli import users_main
from .storage.base import StoreError
from .storage.factory import open_store


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["admin"]:
        from .admin import main as admin

        return admin(argv[1:])
    if argv[:1] == ["backup"]:
        from .backup import main as backup

        return backup(argv[1:])
    if argv[:1] == ["shovel"]:
        from .shovel import main as shovel

        return shovel(argv[1:])
    if argv[:1] == ["users"]:
        return users_main(argv[1:])
    config = load_config(argv)
    setup_logging(config.log_level, config.log_format)
    try:
        store = open_store(
            config.store_url,
            flush_interval=config.flush_interval,
            max_unflushed_bytes=config.max_unflushed_bytes,
            lease=config.lease,
        )
        broker = Broker(store, config.broker())
        tune_gc()
        trio.run(run_until_signal, broker, config.server())
    except BaseExceptionGroup as group:
        return _startup_failure(group, config.host, config.port)
    except (StoreError, DefinitionsError, SecurityError, OSError) as e:
        return _startup_failure(e, config.host, config.port)
    return 0


def _startup_failure(error: BaseException, host: str, port: int) -> int:
    """Print the operator-facing reason the broker could not run; re-raise anything unexpected."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, StoreError):
        print(f"stompmq: store error: {error}", file=sys.stderr)
    elif isinstance(error, (DefinitionsError, SecurityError)):
        print(f"stompmq: {error}", file=sys.stderr)
    elif isinstance(error, OSError):
        where = error.filename or f"{host}:{port}"  # the HTTP listener names itself (server/api/listener.py)
        print(f"stompmq: cannot listen on {where}: {error.strerror or error}", file=sys.stderr)
    else:
        raise error
    return 2


if __name__ == "__main__":
    sys.exit(main())
