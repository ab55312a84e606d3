"""The ``stompmq`` command."""

from __future__ import annotations

import logging
import sys

import trio

from .broker import Broker
from .config import load_config
from .server import run_until_signal
from .storage.base import StoreError
from .storage.factory import open_store


def main(argv: list[str] | None = None) -> int:
    config = load_config(argv)
    logging.basicConfig(
        level=getattr(logging, str(config.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        store = open_store(config.store_url, flush_interval=config.flush_interval)
        broker = Broker(store, config.broker())
        trio.run(run_until_signal, broker, config.server())
    except StoreError as e:
        print(f"stompmq: store error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"stompmq: cannot listen on {config.host}:{config.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
