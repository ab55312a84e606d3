"""``stompmq shovel --from URL --to URL``: move the messages of one STOMP destination to another.

The command around ``transfer.Shovel`` (which the broker's declared shovels run too): its
options, a progress line on stderr, and a last line with what moved.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import trio

from .client import ClientError, run_client
from .transfer import (
    DEFAULT_PREFETCH,
    IDLE_SECONDS,
    MAX_PREFETCH,
    PLAIN_PROGRESS_SECONDS,
    PROGRESS_SECONDS,
    REDELIVERED,
    Shovel,
    endpoint,
)


async def _progress(shovel: Shovel, interactive: bool) -> None:
    """A progress line on stderr: moved so far and the rate over the last interval."""
    interval = PROGRESS_SECONDS if interactive else PLAIN_PROGRESS_SECONDS
    before, then = 0, trio.current_time()
    while True:
        await trio.sleep(interval)
        now = trio.current_time()
        rate = (shovel.moved - before) / (now - then)
        before, then = shovel.moved, now
        line = f"stompmq shovel: {shovel.moved} moved, {rate:,.0f}/s, {len(shovel.outstanding)} in flight"
        print(("\r" + line + "\033[K") if interactive else line, end="" if interactive else "\n",
              file=sys.stderr, flush=True)


async def _main(shovel: Shovel) -> float:
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_progress, shovel, sys.stderr.isatty())
        await shovel.run()
        nursery.cancel_scope.cancel()
    return trio.current_time() - start


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stompmq shovel", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--from", dest="source", required=True, metavar="URL",
                        help="stomp://[user:password@]host[:port]/DESTINATION[?vhost=V] to take messages from")
    parser.add_argument("--to", dest="target", required=True, metavar="URL",
                        help="stomp://[user:password@]host[:port]/DESTINATION[?vhost=V] to put them on")
    parser.add_argument("--from-vhost", help="the source's vhost (CONNECT host header) [default: the URL's ?vhost=, else /]")
    parser.add_argument("--to-vhost", help="the destination's vhost [default: the URL's ?vhost=, else /]")
    parser.add_argument("--prefetch", type=_positive, default=DEFAULT_PREFETCH,
                        help=f"messages in flight, the source's prefetch [default: {DEFAULT_PREFETCH}]")
    parser.add_argument("--max", type=_positive, help="stop after moving this many messages (what the source "
                        "delivered beyond them goes back to it, marked redelivered by the source)")
    parser.add_argument("--until-empty", nargs="?", type=float, const=IDLE_SECONDS, metavar="SECONDS",
                        help=f"stop once the source delivered nothing for SECONDS [default: {IDLE_SECONDS:g}]")
    return parser


def _positive(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PREFETCH:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_PREFETCH}, not {text!r}")
    return int(text)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        source, target = endpoint(args.source, "--from"), endpoint(args.target, "--to")
        if args.until_empty is not None and not (math.isfinite(args.until_empty) and args.until_empty > 0):
            raise ClientError("--until-empty needs a number of seconds > 0")
        if args.from_vhost is not None:
            source = dataclasses.replace(source, vhost=args.from_vhost)
        if args.to_vhost is not None:
            target = dataclasses.replace(target, vhost=args.to_vhost)
        shovel = Shovel(source, target, args.prefetch, args.max, args.until_empty)
        started = time.monotonic()
        run_client(_main, shovel)
    except ClientError as e:
        print(f"{_line_end()}stompmq shovel: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"{_line_end()}stompmq shovel: interrupted; what was not confirmed stays at the source", file=sys.stderr)
        return 130
    elapsed = time.monotonic() - started
    rate = shovel.moved / max(elapsed, 1e-9)
    print(f"{_line_end()}stompmq shovel: {shovel.moved} moved in {elapsed:.1f} s ({rate:,.0f}/s), "
          f"{shovel.flagged} flagged {REDELIVERED}", file=sys.stderr)
    return 0


def _line_end() -> str:
    """What ends a progress line before a last message: on a terminal the line is still open."""
    return "\n" if sys.stderr.isatty() else ""
