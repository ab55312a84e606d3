"""The stompmq PySpark data source in a local-mode Spark session against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stompmq.broker import BrokerConfig

from ..support.broker_process import BrokerProcess
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import TEST_LEASE, make_store_factory, postgres_server

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Any:
    thread = BrokerThread(make_store_factory("sqlite", tmp_path_factory.mktemp("spark"))).start()
    try:
        yield thread
    finally:
        thread.stop()


def url(broker: BrokerThread) -> str:
    return f"stomp://127.0.0.1:{broker.port}"


def publish(port: int, stream: str, bodies: list[str]) -> None:
    with Client(port) as c:
        for body in bodies:
            c.send_to(f"/stream/{stream}", body, receipt=False, headers={"k": body[-1]})
        c.sync()


def test_batch_read_of_offset_ranges(spark: Any, durable: BrokerThread) -> None:
    publish(durable.port, "b", [f"m{i}" for i in range(30)])
    df = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/b").load()
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(r.offset, r.body) for r in rows] == [(i, f"m{i}".encode()) for i in range(30)]
    assert rows[0].destination == "/stream/b" and rows[0].headers == {"k": "0", "amq-msg-type": "text"}  # (sent as text: no content-length) and rows[0].priority == 4
    part = (spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/b")
            .option("startingOffsets", json.dumps({"b": 10})).option("endingOffsets", json.dumps({"b": 15})).load())
    assert sorted(r.offset for r in part.collect()) == [10, 11, 12, 13, 14]


def test_rows_carry_the_trace_context_the_send_had(spark: Any, durable: BrokerThread) -> None:
    """A producer's W3C trace context reaches the Spark rows, so a pipeline can continue the trace."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with Client(durable.port) as c:
        c.send_to("/stream/traced", "t", headers={"traceparent": traceparent, "tracestate": "vendor=1"})
    df = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/traced").load()
    [row] = df.collect()
    assert (row.headers["traceparent"], row.headers["tracestate"]) == (traceparent, "vendor=1")


def test_empty_ranges_are_no_rows_and_an_end_past_the_stream_is_an_error(spark: Any, durable: BrokerThread) -> None:
    publish(durable.port, "e", [f"m{i}" for i in range(5)])

    def read(**options: str) -> Any:
        return spark.read.format("stompmq").option("url", url(durable)).options(**options).load()

    assert read(destination="/stream/e", startingOffsets="latest").count() == 0
    assert read(destination="/stream/never-written").count() == 0
    assert read(destination="/stream/e", startingOffsets=json.dumps({"e": 3}), endingOffsets=json.dumps({"e": 3})).count() == 0
    with pytest.raises(Exception, match="option 'endingOffsets': 9 is past the end of stream 'e'"):
        read(destination="/stream/e", endingOffsets=json.dumps({"e": 9})).collect()
    with pytest.raises(Exception, match="unknown option 'startingoffset'") as raised:  # (Spark lower-cases names)
        read(destination="/stream/e", startingOffset="earliest").collect()
    # The nearest name, in one line at the top (not after a 2,000-character traceback).
    first, *rest = str(raised.value).splitlines()
    assert "unknown option 'startingoffset'; did you mean 'startingOffsets'?" in first
    assert "Traceback" not in str(raised.value) and len(rest) <= 1, str(raised.value)


#: A driver that sets neither PYSPARK_PYTHON nor spark.pyspark.python: its workers must still run
#: this interpreter (the one with stompmq and pyarrow), not the PATH's python3.
DRIVER_WITHOUT_PYSPARK_PYTHON = """
import sys
from pyspark.sql import SparkSession
import stompmq.spark
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
stompmq.spark.register(spark)
assert spark.sparkContext.pythonExec == sys.executable, spark.sparkContext.pythonExec
try:
    spark.read.format("stompmq").option("url", "stomp://127.0.0.1:1").option("destination", "/stream/a") \
        .option("destinaton", "x").load().collect()
except Exception as e:
    print(str(e).splitlines()[0])
spark.stop()
"""


def test_a_local_session_needs_no_pyspark_python(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", DRIVER_WITHOUT_PYSPARK_PYTHON], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "unknown option 'destinaton'; did you mean 'destination'?" in done.stdout, done.stdout + done.stderr[-3000:]


def test_min_partitions_splits_a_stream_and_reads_every_entry_once(spark: Any, durable: BrokerThread, tmp_path: Path) -> None:
    publish(durable.port, "mp", [f"m{i}" for i in range(1000)])
    df = (spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/mp")
          .option("minPartitions", "4").load())
    assert df.rdd.getNumPartitions() >= 4
    assert sorted(r.offset for r in df.collect()) == list(range(1000))
    stream = (spark.readStream.format("stompmq").option("url", url(durable)).option("destination", "/stream/mp")
              .option("startingOffsets", "earliest").option("minPartitions", "4").load())
    out = tmp_path / "out"
    query = (stream.select("offset", "body").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "c")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.offset, r.body) for r in rows) == [(i, f"m{i}".encode()) for i in range(1000)]
    assert len(list(out.glob("*.parquet"))) >= 4  # one file per partition


def test_write_then_read_back(spark: Any, durable: BrokerThread) -> None:
    df = spark.createDataFrame([(f"w{i}".encode(), {"n": str(i)}) for i in range(200)], "body binary, headers map<string,string>")
    df.repartition(3).write.format("stompmq").option("url", url(durable)).option("destination", "/stream/w").mode("append").save()
    back = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/w").load()
    got = sorted((r.headers["n"], r.body) for r in back.collect())
    assert got == sorted((str(i), f"w{i}".encode()) for i in range(200))


def test_a_batch_write_with_a_producer_id_adds_nothing_when_run_again(spark: Any, durable: BrokerThread) -> None:
    """``producerId``: each task numbers its rows, so the same write again is dropped row by row;
    with ``sequenceColumn`` the numbers are the column's, so a grown input adds only its new rows."""
    df = spark.createDataFrame([(f"p{i}".encode(),) for i in range(60)], "body binary").repartition(3)
    for _ in range(2):
        (df.write.format("stompmq").option("url", url(durable)).option("destination", "/stream/idem")
         .option("producerId", "export-1").mode("append").save())
    with Client(durable.port) as c:
        receipt = c.request("SEND", {"destination": "/control/stream-offsets/stream/idem"})
        assert (receipt["count"], receipt["duplicates"]) == ("60", "60")

    def export(rows: int) -> None:  # an id lands in the same partition (producer) every time, in order
        (spark.range(rows).selectExpr("id", "cast(id as string) as body").repartition(2, "id")
         .sortWithinPartitions("id").write.format("stompmq").option("url", url(durable)).option("destination", "/stream/keyed")
         .option("producerId", "orders").option("sequenceColumn", "id").mode("append").save())

    export(10)
    export(16)  # the same ids again, and 6 new ones
    back = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/keyed").load()
    bodies = [r.body.decode() for r in back.collect()]
    assert sorted(bodies, key=int) == [str(i) for i in range(16)]
    assert not any(k.startswith("x-producer") for r in back.collect() for k in r.headers)  # not stored
    shuffled = spark.createDataFrame([(3, "a"), (1, "b")], "id long, body string").coalesce(1)
    with pytest.raises(Exception, match="must rise within each partition"):
        (shuffled.write.format("stompmq").option("url", url(durable)).option("destination", "/stream/keyed2")
         .option("producerId", "x").option("sequenceColumn", "id").mode("append").save())


def test_parallel_partitions_of_an_exchange(spark: Any, durable: BrokerThread) -> None:
    with Client(durable.port) as c:
        c.request("SEND", {"destination": "/control/declare/exchange/px"})
        for p in range(4):
            c.request("SEND", {"destination": "/control/bind/exchange/px", "queue": f"/stream/px{p}"})
        for i in range(400):
            c.send_to(f"/exchange/px/k{i}", f"e{i}", receipt=False)
        c.sync()
    df = spark.read.format("stompmq").option("url", url(durable)).option("exchange", "px").load()
    assert df.rdd.getNumPartitions() == 4
    rows = df.collect()
    assert sorted(int(r.body[1:]) for r in rows) == list(range(400))
    assert len({r.destination for r in rows}) == 4


def test_streaming_exactly_once_across_a_restart(spark: Any, durable: BrokerThread, tmp_path: Path) -> None:
    streams = ["x0", "x1"]
    for s in streams:
        publish(durable.port, s, [f"{s}-{i}" for i in range(300)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        df = (spark.readStream.format("stompmq").option("url", url(durable))
              .option("destination", ",".join(f"/stream/{s}" for s in streams))
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").load())
        return (df.select("destination", "offset", "body").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(checkpoint)).start())

    query = start()
    try:
        while not query.recentProgress or query.recentProgress[-1]["numInputRows"] == 0:
            query.awaitTermination(0.2)
        assert query.recentProgress[0]["numInputRows"] <= 100  # admission control
    finally:
        query.stop()  # mid-run: 600 entries at 100 per trigger take several batches
    for s in streams:
        publish(durable.port, s, [f"{s}-{i}" for i in range(300, 350)])
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.destination, r.offset) for r in rows)
    assert got == sorted((f"/stream/{s}", i) for s in streams for i in range(350))  # no gap, no duplicate
    assert all(r.body == f"{r.destination[8:]}-{r.offset}".encode() for r in rows)


def test_streaming_sink(spark: Any, durable: BrokerThread, tmp_path: Path) -> None:
    publish(durable.port, "src", [f"s{i}" for i in range(50)])
    df = (spark.readStream.format("stompmq").option("url", url(durable)).option("destination", "/stream/src")
          .option("startingOffsets", "earliest").load())
    query = (df.selectExpr("body", "headers").writeStream.format("stompmq").option("url", url(durable))
             .option("destination", "/stream/dst").option("checkpointLocation", str(tmp_path / "c")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    back = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/dst").load()
    assert sorted(r.body for r in back.collect()) == sorted(f"s{i}".encode() for i in range(50))


def test_streaming_sink_is_exactly_once_when_a_batch_is_replayed(spark: Any, durable: BrokerThread,
                                                                  tmp_path: Path) -> None:
    """A restart replays the last batch whose commit Spark had not written (here: deleted from the
    checkpoint, as a driver killed between the sink's writes and the commit would leave it): the
    sink sends its rows again, with the same producer numbers, and the broker drops them."""
    publish(durable.port, "once-src", [f"o{i}" for i in range(120)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        df = (spark.readStream.format("stompmq").option("url", url(durable)).option("destination", "/stream/once-src")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50").load())
        query = (df.selectExpr("body").repartition(2).writeStream.format("stompmq").option("url", url(durable))
                 .option("destination", "/stream/once-dst").option("checkpointLocation", str(checkpoint)).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run()
    commits = checkpoint / "commits"
    assert max(int(f.name) for f in commits.iterdir() if f.name.isdigit()) == 2  # 50 + 50 + 20 entries
    (commits / "2").unlink()
    (commits / ".2.crc").unlink(missing_ok=True)
    run()
    with Client(durable.port) as c:
        receipt = c.request("SEND", {"destination": "/control/stream-offsets/stream/once-dst"})
        assert (receipt["count"], receipt["duplicates"]) == ("120", "20")  # batch 2 (20 rows) sent twice
    back = spark.read.format("stompmq").option("url", url(durable)).option("destination", "/stream/once-dst").load()
    assert sorted(r.body for r in back.collect()) == sorted(f"o{i}".encode() for i in range(120))


def test_retention_gap_is_an_error_not_a_silent_skip(spark: Any, tmp_path: Path) -> None:
    thread = BrokerThread(make_store_factory("sqlite", tmp_path), config=BrokerConfig(stream_segment=10)).start()
    try:
        with Client(thread.port) as c:
            c.request("SEND", {"destination": "/control/declare/stream/r", "max-bytes": "100"})
        publish(thread.port, "r", [f"{i:09d}" for i in range(40)])
        reader = (spark.read.format("stompmq").option("url", url(thread)).option("destination", "/stream/r")
                  .option("startingOffsets", json.dumps({"r": 0})))
        with pytest.raises(Exception, match="are gone .*failOnDataLoss=false"):
            reader.load().collect()
        assert sorted(r.offset for r in reader.option("failOnDataLoss", "false").load().collect()) == list(range(20, 40))
        assert spark.read.format("stompmq").option("url", url(thread)).option("destination", "/stream/r").load().count() == 20  # [20, 40): retention runs as a segment starts
    finally:
        thread.stop()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"destination": "/stream/a"}, "option 'url'"),
        ({"url": "stomp://127.0.0.1:1", "destination": "/stream/a"}, "option 'url'"),
        ({"url": "URL", "destination": "/queue/a"}, "option 'destination'"),
        ({"url": "URL"}, "option 'destination'"),
        ({"url": "URL", "exchange": "nope"}, "option 'exchange'"),
        ({"url": "URL", "destination": "/stream/a", "login": "bad", "passcode": "bad"}, "login"),
    ],
)
def test_bad_options_name_the_option(spark: Any, make_memory_broker: Any, options: dict[str, str], problem: str) -> None:
    from stompmq.server import ServerSettings

    thread = make_memory_broker(settings=ServerSettings(port=0, login="user", passcode="pw"))
    options = {k: v.replace("URL", url(thread)) for k, v in options.items()}
    options.setdefault("login", "user")
    options.setdefault("passcode", "pw")
    with pytest.raises(Exception, match=problem):
        spark.read.format("stompmq").options(**options).load().collect()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"destination": "/stream/a"}, "option 'url'"),
        ({"url": "stomp://127.0.0.1:1", "destination": "/stream/a"}, "option 'url'"),
        ({"url": "URL", "destination": "/stream/a", "login": "bad", "passcode": "bad"}, "login"),
        ({"url": "URL"}, "option 'destination'"),  # and no destination column
    ],
)
def test_bad_write_options_name_the_option(spark: Any, make_memory_broker: Any, options: dict[str, str],
                                           problem: str) -> None:
    from stompmq.server import ServerSettings

    thread = make_memory_broker(settings=ServerSettings(port=0, login="user", passcode="pw"))
    options = {k: v.replace("URL", url(thread)) for k, v in options.items()}
    options.setdefault("login", "user")
    options.setdefault("passcode", "pw")
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception, match=problem):
        df.write.format("stompmq").options(**options).mode("append").save()


@pytest.mark.postgres
def test_batch_read_through_one_broker_sees_appends_through_another(spark: Any) -> None:
    """Two broker processes on one PostgreSQL database share the stream: Spark plans and reads
    through B what was appended through A and B, in one offset order."""
    database = postgres_server().new_database()
    with BrokerProcess(database, "--lease", str(TEST_LEASE)) as a, BrokerProcess(database, "--lease", str(TEST_LEASE)) as b:
        a.start()
        b.start()
        publish(a.port, "shared", [f"a{i}" for i in range(40)])
        publish(b.port, "shared", [f"b{i}" for i in range(10)])
        publish(a.port, "shared", [f"c{i}" for i in range(10)])
        df = spark.read.format("stompmq").option("url", f"stomp://127.0.0.1:{b.port}").option("destination", "/stream/shared").load()
        rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(r.offset, r.body) for r in rows] == list(
        enumerate([f"a{i}".encode() for i in range(40)] + [f"b{i}".encode() for i in range(10)]
                  + [f"c{i}".encode() for i in range(10)])
    )


DRIVER = """
import sys
from pyspark.sql import SparkSession
import stompmq.spark
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
stompmq.spark.register(spark)
rows = spark.read.format("stompmq").option("url", sys.argv[1]).option("destination", "/stream/bare-python").load().collect()
print("bodies", sorted(row.body.decode() for row in rows))
spark.stop()
"""


def test_a_local_driver_reads_without_pyspark_python_set(durable: BrokerThread, tmp_path: Path) -> None:
    """Spark's workers start ``python3`` from the PATH unless ``PYSPARK_PYTHON`` says otherwise;
    here that is an interpreter without stompmq (the base one, outside the test's environment),
    and the read still works: in local mode the workers run the driver's interpreter."""
    publish(durable.port, "bare-python", ["w0", "w1", "w2"])
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(Path(sys.base_prefix) / "bin" / "python3")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    env["PATH"] = f"{bare}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run([sys.executable, "-c", DRIVER, url(durable)], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "bodies ['w0', 'w1', 'w2']" in out.stdout
