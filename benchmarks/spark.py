"""The Spark figures of docs/benchmarks.md: the stompmq data source's write and streaming read rates.

  python -m benchmarks.spark write --rows 1000000     # df.write.format("stompmq"), receipts, 4 streams
  python -m benchmarks.spark read --rows 1000000      # readStream from 4 streams -> Parquet
  python -m benchmarks.spark both --rows 1000000      # write, then read what was written
  python -m benchmarks.spark read --rows 400000 --warm-up 100000   # CPU per row of warm processes
  python -m benchmarks.spark write --rows 400000 --producer compare  # exactly-once vs at-least-once

``write``: a ``spark.range`` DataFrame of 100-byte bodies spread over the 4 streams
(``destination`` column), written in 4 tasks; each task sends every row with a receipt and
returns after the last RECEIPT.  Rate = rows / wall time of the write action.  ``--producer yes``
writes with the option ``producerId`` (a query id's length): each task is an idempotent producer
numbering its rows, the code path of the exactly-once streaming sink (``x-producer-id`` of the
task, ``x-producer-seq`` per row, checked and stored by the broker); ``--producer compare``
alternates plain (at-least-once) and idempotent writes, 3 each on fresh streams after a warm-up
write, and prints the ratio of their median rates.

``read``: a streaming query over the 4 streams (4 partitions per micro-batch,
``maxOffsetsPerTrigger``; ``--streams``, ``--min-partitions``) into a Parquet sink.  "Once running" excludes the first
micro-batch (the Python workers and the JVM warm up there): rate = rows of the later batches /
the sum of their batch durations, from ``StreamingQuery.recentProgress``.

A local broker on a temporary SQLite store is started unless --url is given.  Spark runs in local
mode with --cores cores (2: the machine of the recorded figures).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.proc import cpu_seconds, stat_fields
from tests.support.local_broker import LocalBroker

STREAMS = 4


def tree_cpu() -> dict[str, float]:
    """CPU seconds used so far by this process and every descendant, per kind of process
    (``broker``, ``jvm``, ``python workers``, ``driver``: this script): on a shared machine the
    wall rate swings with the neighbours' load, the CPU each row costs much less, and
    cores / (CPU per row) bounds the rate on an idle machine."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parents[int(entry)] = int(stat_fields(f"/proc/{entry}/stat")[1])
            used[int(entry)] = cpu_seconds(int(entry), children=True)
        except OSError:
            continue
    mine = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    kinds: dict[str, float] = {"broker": 0.0, "jvm": 0.0, "python workers": 0.0, "driver": 0.0}
    for pid in mine:
        kinds[_kind(pid)] += used.get(pid, 0.0)
    return kinds


def _kind(pid: int) -> str:
    if pid == os.getpid():
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return "driver"
    if b"stompmq.cli" in cmdline:
        return "broker"
    if b"java" in cmdline.split(b"\0")[0]:
        return "jvm"
    return "python workers"


def cpu_since(before: dict[str, float], rows: int) -> str:
    """CPU per row since ``before``, in total and per kind of process."""
    after = tree_cpu()
    spent = {kind: after[kind] - before[kind] for kind in after}
    parts = ", ".join(f"{kind} {seconds / rows * 1e6:.1f}" for kind, seconds in spent.items())
    return f"CPU of all processes {sum(spent.values()) / rows * 1e6:.1f} us/row ({parts})"


def session(cores: int) -> Any:
    from pyspark.sql import SparkSession

    import stompmq.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]").appName("stompmq-bench")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stompmq.spark.register(spark)
    return spark


def write(spark: Any, url: str, rows: int, prefix: str, streams: int = STREAMS, producer: bool = False) -> float:
    """Write ``rows``; with ``producer``, as an idempotent producer per task (option ``producerId``)."""
    columns = [
        "cast(lpad(cast(id as string), 100, 'x') as binary) as body",
        f"concat('/stream/{prefix}', cast(id % {streams} as string)) as destination",
    ]
    df = spark.range(0, rows, numPartitions=STREAMS).selectExpr(*columns)
    writer = df.write.format("stompmq").option("url", url).mode("append")
    if producer:  # a streaming query's id is a UUID: the same length
        writer = writer.option("producerId", str(uuid.uuid4()))
    started, cpu = time.perf_counter(), tree_cpu()
    writer.save()
    elapsed = time.perf_counter() - started
    rate = rows / elapsed
    print(f"write ({'idempotent' if producer else 'plain'}): {rows:,} rows with receipts in {elapsed:.2f} s ="
          f" {rate:,.0f} msg/s; {cpu_since(cpu, rows)}; load {os.getloadavg()[0]:.1f}", flush=True)
    return rate


def compare_producer(spark: Any, url: str, rows: int, prefix: str, streams: int) -> None:
    """Plain and idempotent writes, alternated so that a busy machine slows both alike."""
    rates: dict[bool, list[float]] = {False: [], True: []}
    print("warm-up ", end="")  # the first write of a session also starts the JVM's and workers' code
    write(spark, url, max(1, rows // 4), f"{prefix}warm-", streams)
    for run in range(3):
        for kind in rates:
            rates[kind].append(write(spark, url, rows, f"{prefix}{run}{kind}-", streams, kind))
    plain, idempotent = (statistics.median(rates[kind]) for kind in rates)
    print(f"median: at-least-once {plain:,.0f} msg/s, exactly-once {idempotent:,.0f} msg/s = {idempotent / plain:.0%}")


def read(spark: Any, url: str, rows: int, prefix: str, per_trigger: int, streams: int = STREAMS,
         min_partitions: int = 1) -> float:
    work = Path(tempfile.mkdtemp(prefix="stompmq-bench-spark-"))
    df = (spark.readStream.format("stompmq").option("url", url)
          .option("destination", ",".join(f"/stream/{prefix}{i}" for i in range(streams)))
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_trigger))
          .option("minPartitions", str(min_partitions)).load())
    cpu = tree_cpu()
    query = (df.writeStream.format("parquet").option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    used = cpu_since(cpu, rows)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    total = sum(p["numInputRows"] for p in batches)
    later = batches[1:]
    seconds = sum(p["batchDuration"] for p in later) / 1000
    later_rows = sum(p["numInputRows"] for p in later)
    rate = later_rows / seconds if seconds else 0.0
    first = batches[0]
    print(f"read: {total:,} rows in {len(batches)} batches; first batch {first['numInputRows']:,} rows in "
          f"{first['batchDuration'] / 1000:.2f} s; then {later_rows:,} rows in {seconds:.2f} s = {rate:,.0f} msg/s; "
          f"{used} (first batch included); load {os.getloadavg()[0]:.1f}",
          flush=True)
    if total != rows:
        raise SystemExit(f"read {total} rows, expected {rows}")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["write", "read", "both"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-trigger", type=int, default=200_000, help="maxOffsetsPerTrigger of the read")
    parser.add_argument("--streams", type=int, default=STREAMS, help="streams written and read")
    parser.add_argument("--min-partitions", type=int, default=1, help="minPartitions of the read")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--url", help="a running broker (stomp://host:port); default: start a local one")
    parser.add_argument("--prefix", default=f"bench{os.getpid()}-", help="stream names: PREFIX0..")
    parser.add_argument("--warm-up", type=int, default=0, metavar="ROWS",
                        help="read: first write and read ROWS other rows, so the figures are of warm processes")
    parser.add_argument("--producer", choices=["no", "yes", "compare"], default="no",
                        help="write: as idempotent producers (yes, option producerId), or compare both")
    args = parser.parse_args(argv)
    spark = session(args.cores)
    with LocalBroker() if args.url is None else contextlib.nullcontext(args.url) as url:
        if args.what == "write" and args.producer == "compare":
            compare_producer(spark, url, args.rows, args.prefix, args.streams)
        elif args.what in ("write", "both"):
            write(spark, url, args.rows, args.prefix, args.streams, args.producer == "yes")
        if args.what == "read":
            if args.warm_up:
                write(spark, url, args.warm_up, "warm-" + args.prefix)
                print("warm-up ", end="")
                read(spark, url, args.warm_up, "warm-" + args.prefix, args.per_trigger)
            write(spark, url, args.rows, args.prefix, args.streams)  # the data to read
        if args.what in ("read", "both"):
            read(spark, url, args.rows, args.prefix, args.per_trigger, args.streams, args.min_partitions)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
