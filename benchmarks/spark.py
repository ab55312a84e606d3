"""The Spark figures of docs/benchmarks.md: the stompmq data source's write and streaming read rates.

  python -m benchmarks.spark write --rows 1000000     # df.write.format("stompmq"), receipts, 4 streams
  python -m benchmarks.spark read --rows 1000000      # readStream from 4 streams -> Parquet
  python -m benchmarks.spark both --rows 1000000      # write, then read what was written
  python -m benchmarks.spark read --rows 400000 --warm-up 100000   # CPU per row of warm processes
  python -m benchmarks.spark write --rows 400000 --producer compare  # idempotent vs plain appends

``write``: a ``spark.range`` DataFrame of 100-byte bodies spread over the 4 streams
(``destination`` column), written in 4 tasks; each task sends every row with a receipt and
returns after the last RECEIPT.  Rate = rows / wall time of the write action.  ``--producer yes``
gives every row the headers of an idempotent producer (``x-producer-id`` per task,
``x-producer-seq`` its row's id), as the exactly-once streaming sink sends them;
``--producer compare`` alternates plain writes, writes whose rows carry two headers of the same
size that are not the producer's, and idempotent writes (3 each, fresh streams) and prints the
ratios of their median rates.

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
from pathlib import Path
from typing import Any

from benchmarks.local_broker import LocalBroker, cpu_seconds, stat_fields

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


def write(spark: Any, url: str, rows: int, prefix: str, streams: int = STREAMS, producer: bool | None = None) -> float:
    """Write ``rows``; ``producer``: True, with idempotent producer headers; False, with two headers
    of the same size that are not (the baseline of ``compare``); None, with no headers."""
    columns = [
        "cast(lpad(cast(id as string), 100, 'x') as binary) as body",
        f"concat('/stream/{prefix}', cast(id % {streams} as string)) as destination",
    ]
    if producer is not None:  # ids rise within a task: each task numbers its rows in order, as the sink does
        names = ("x-producer-id", "x-producer-seq") if producer else ("x-produced-by", "x-produced-num")
        columns.append(f"map('{names[0]}', concat('bench/', cast(spark_partition_id() as string)),"
                       f" '{names[1]}', cast(id as string)) as headers")
    df = spark.range(0, rows, numPartitions=STREAMS).selectExpr(*columns)
    started, cpu = time.perf_counter(), tree_cpu()
    df.write.format("stompmq").option("url", url).mode("append").save()
    elapsed = time.perf_counter() - started
    rate = rows / elapsed
    kind = {None: "plain", False: "plain, same-size headers", True: "idempotent"}[producer]
    print(f"write ({kind}): {rows:,} rows with receipts in {elapsed:.2f} s = {rate:,.0f} msg/s;"
          f" {cpu_since(cpu, rows)}", flush=True)
    return rate


def compare_producer(spark: Any, url: str, rows: int, prefix: str, streams: int) -> None:
    """Plain and idempotent writes, alternated so that a busy machine slows both alike."""
    kinds: tuple[bool | None, ...] = (None, False, True)
    rates: dict[bool | None, list[float]] = {kind: [] for kind in kinds}
    for run in range(3):
        for kind in kinds:
            rates[kind].append(write(spark, url, rows, f"{prefix}{run}{kind}-", streams, kind))
    plain, same, idempotent = (statistics.median(rates[kind]) for kind in kinds)
    print(f"median: plain {plain:,.0f} msg/s, with same-size headers {same:,.0f} msg/s, idempotent"
          f" {idempotent:,.0f} msg/s = {idempotent / plain:.0%} of plain, {idempotent / same:.0%} of same-size")


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
                        help="write: rows carry idempotent producer headers (yes), or compare both")
    args = parser.parse_args(argv)
    spark = session(args.cores)
    with LocalBroker() if args.url is None else contextlib.nullcontext(args.url) as url:
        if args.what == "write" and args.producer == "compare":
            compare_producer(spark, url, args.rows, args.prefix, args.streams)
        elif args.what in ("write", "both"):
            write(spark, url, args.rows, args.prefix, args.streams, True if args.producer == "yes" else None)
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
