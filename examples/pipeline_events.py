"""An event pipeline end to end: keyed events into a partitioned stream, a Structured Streaming
job aggregating them per key and time window into Parquet.

  python -m examples.pipeline_events                                   # starts a local broker
  python -m examples.pipeline_events --events 1000000 --streams 4 --rate 50000
  python -m examples.pipeline_events --url stomp://127.0.0.1:61613 --out /tmp/events

1. A consistent-hash exchange NAME is bound to --streams streams /stream/NAME-0.. (a partitioned
   stream: one key always lands in the same partition).
2. A generator thread publishes --events events (SEND to /exchange/NAME/KEY with a receipt; the
   header ``ts`` is the event time in epoch ms, the body the event's value) at --rate events/s
   (0: as fast as the broker takes them).
3. The Spark job reads every stream bound to the exchange (``option("exchange", NAME)``: one
   partition per stream, in parallel), counts and sums the values per key and --window-second
   event-time window with a watermark of --lateness seconds, and appends closed windows to Parquet
   in --out (with its checkpoint in --out/_checkpoint).
4. When the job has read every event, one end marker per stream (key ``__end__``, an event time
   past the lateness) moves the watermark on, so the last windows close; the script then waits
   for the job's state to empty and stops it.

A progress bar shows the events read while it runs; the summary gives the events sent and
read, the rates, the windows written and the output path, and the script exits 1 unless the
windows' counts add up to exactly the events sent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stompmq.protocol import Frame, encode_frame
from stompmq.spark.client import Connection
from tests.support.local_broker import LocalBroker

END = "__end__"


def setup(conn: Connection, name: str, streams: int) -> dict[str, int]:
    """Declare the exchange and bind its streams; return each stream's next offset (the start)."""
    conn.request("SEND", {"destination": f"/control/declare/exchange/{name}"})
    start = {}
    for i in range(streams):
        stream = f"{name}-{i}"
        conn.request("SEND", {"destination": f"/control/declare/stream/{stream}"})
        conn.request("SEND", {"destination": f"/control/bind/exchange/{name}", "queue": f"/stream/{stream}"})
        start[stream] = conn.stream_bounds(stream)[1]
    return start


class Generator(threading.Thread):
    """Publishes the events; ``sent`` counts the receipted ones, ``last_ts`` the newest time."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        super().__init__(daemon=True)
        self.url, self.args = url, args
        self.sent = 0
        self.last_ts = 0
        self.seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Connection(self.url, self.args.login, self.args.passcode) as conn:
                started = time.monotonic()
                conn.send_all(self.frames())
                self.seconds = time.monotonic() - started
        except BaseException as e:  # reported by the main thread
            self.error = e

    def frames(self) -> Iterator[bytes]:
        args = self.args
        rng = random.Random(args.seed)
        started = time.monotonic()
        for i in range(args.events):
            if args.rate and i % 1000 == 0:
                ahead = i / args.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            self.last_ts = ts = max(self.last_ts, time.time_ns() // 1_000_000)
            key = f"k{rng.randrange(args.keys)}"
            headers = {"destination": f"/exchange/{args.name}/{key}", "key": key, "ts": str(ts), "receipt": str(i)}
            yield encode_frame(Frame("SEND", headers, str(rng.randrange(100)).encode()), "1.2")
            self.sent = i + 1


def send_end_markers(conn: Connection, name: str, streams: int, ts: int) -> None:
    for i in range(streams):
        conn.request("SEND", {"destination": f"/stream/{name}-{i}", "key": END, "ts": str(ts)}, b"0")


def start_query(spark: Any, url: str, args: argparse.Namespace, start: dict[str, int]) -> Any:
    from pyspark.sql import functions as F

    source = (spark.readStream.format("stompmq").option("url", url).option("exchange", args.name)
              .option("startingOffsets", json.dumps(start)).option("maxOffsetsPerTrigger", str(args.per_trigger)))
    if args.login is not None:
        source = source.option("login", args.login).option("passcode", args.passcode or "")
    events = source.load().select(
        F.col("headers")["key"].alias("key"),
        F.timestamp_millis(F.col("headers")["ts"].cast("long")).alias("event_time"),
        F.col("body").cast("string").cast("long").alias("value"),
    )
    # No filter for the end markers: Spark pushes a filter below the watermark, which would then
    # never see them.  Their own window is the one that stays open.
    windows = (events.withWatermark("event_time", f"{args.lateness} seconds")
               .groupBy(F.window("event_time", f"{args.window} seconds"), "key")
               .agg(F.count("*").alias("events"), F.sum("value").alias("total")))
    return (windows.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                           "key", "events", "total")
            .writeStream.format("parquet").outputMode("append").option("path", str(args.out))
            .option("checkpointLocation", str(args.out / "_checkpoint")).start())


def events_read(query: Any, start: dict[str, int]) -> int:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return sum(int(end.get(s, v)) - v for s, v in start.items()) if end else 0


def bar(done: int, total: int, rate: float, width: int = 30) -> str:
    """The progress line: events only (the end markers are the script's, not the user's)."""
    filled = width * min(done, total) // max(total, 1)
    return f"\r[{'#' * filled}{'.' * (width - filled)}] {done:>12,}/{total:,} events read  {rate:>9,.0f} msg/s"


def session(cores: int) -> Any:
    from pyspark.sql import SparkSession

    import stompmq.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("stompmq-pipeline-events")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cores)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    stompmq.spark.register(spark)
    return spark


def run(url: str, args: argparse.Namespace, spark: Any) -> int:
    """The pipeline against the broker at ``url`` in ``spark`` (with stompmq registered)."""
    with Connection(url, args.login, args.passcode) as conn:
        start = setup(conn, args.name, args.streams)
        query = start_query(spark, url, args, start)
        generator = Generator(url, args)
        began = time.monotonic()
        generator.start()
        total = args.events + args.streams  # the end markers are read too, not shown in the bar
        markers_sent = False
        last, last_t, rate = 0, began, 0.0
        while True:
            time.sleep(0.5)
            if generator.error is not None:
                raise SystemExit(f"the generator failed: {generator.error}")
            if query.exception() is not None:
                raise SystemExit(f"the Spark job failed: {query.exception()}")
            done, now = events_read(query, start), time.monotonic()
            if done != last:
                rate, last, last_t = (done - last) / (now - last_t), done, now
            if not args.quiet:
                print(bar(min(done, args.events), args.events, rate), end="", file=sys.stderr, flush=True)
            if not markers_sent and not generator.is_alive() and done == args.events:
                read_all = time.monotonic()
                send_end_markers(conn, args.name, args.streams, generator.last_ts + (args.lateness + args.window + 1) * 1000)
                markers_sent = True
            if markers_sent and done == total and _only_markers_left(query):
                break
        elapsed = time.monotonic() - began
        query.stop()
        out = spark.read.parquet(str(args.out))
        windows = out.count()
        counted = out.agg({"events": "sum"}).collect()[0][0] or 0
        distinct = out.select("window_start").distinct().count()
    batches = [p for p in query.recentProgress if p["numInputRows"] > args.streams][1:]  # the first warms up
    job_seconds = sum(p["batchDuration"] for p in batches) / 1000
    job_rate = (f"the job ran at {sum(p['numInputRows'] for p in batches) / job_seconds:,.0f} msg/s after its "
                "first micro-batch" if job_seconds else "the first micro-batch read them all")
    print(file=sys.stderr)
    print(f"events sent:     {generator.sent:,} over {args.streams} stream partitions ({args.keys} keys) "
          f"in {generator.seconds:.1f} s = {generator.sent / generator.seconds:,.0f} msg/s with receipts")
    print(f"events read:     {args.events:,}; all read {read_all - began:.1f} s after the first was sent; "
          + job_rate)
    print(f"windows written: {windows:,} (key x window) rows over {distinct} {args.window}-second windows, "
          f"{counted:,} events counted")
    print(f"output:          {args.out} (Parquet), finished in {elapsed:.1f} s")
    if counted != generator.sent:
        print(f"MISMATCH: the windows count {counted} events, {generator.sent} were sent", file=sys.stderr)
        return 1
    return 0


def _only_markers_left(query: Any) -> bool:
    """True once the watermark has closed every window but the end markers' (one key, one window)."""
    progress = query.lastProgress
    return bool(progress) and all(op["numRowsTotal"] == 1 for op in progress.get("stateOperators", []))


class Help(argparse.RawDescriptionHelpFormatter):
    """The module text as written, and each option's default (where it has one)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:
            return action.help
        return f"{action.help} (default: %(default)s)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=Help)
    parser.add_argument("--url", help="broker (stomp://host:port); default: start a local one")
    parser.add_argument("--login", help="the broker's login")
    parser.add_argument("--passcode", help="the broker's passcode")
    parser.add_argument("--events", type=int, default=200_000, help="events the generator publishes")
    parser.add_argument("--streams", type=int, default=4, help="stream partitions bound to the exchange")
    parser.add_argument("--keys", type=int, default=100, help="distinct event keys")
    parser.add_argument("--rate", type=float, default=0, help="events/s the generator sends (0: as fast as it can)")
    parser.add_argument("--window", type=int, default=1, help="seconds per aggregation window")
    parser.add_argument("--lateness", type=int, default=30, help="watermark delay, seconds")
    parser.add_argument("--per-trigger", type=int, default=100_000, help="the job's maxOffsetsPerTrigger")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--name", default=f"events{os.getpid()}", help="exchange name; streams are NAME-0..")
    parser.add_argument("--out", type=Path, default=Path("pipeline-events"), help="Parquet output and checkpoint")
    parser.add_argument("--seed", type=int, default=1, help="the generator's random seed")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(LocalBroker())
        print("starting Spark… (the JVM and the first micro-batch take a few seconds)", file=sys.stderr, flush=True)
        spark = session(args.cores)
        stack.callback(spark.stop)
        return run(url, args, spark)


if __name__ == "__main__":
    sys.exit(main())
