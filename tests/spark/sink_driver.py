"""A streaming query in a process of its own, for the kill -9 test (test_sink_crash.py): stream
SRC to stream DST through the stompmq source and sink, slowed so a micro-batch's rows reach the
broker over a while (a SIGKILL lands mid-write), checkpointed; exits once DST has all of SRC.

    python -m tests.spark.sink_driver URL SRC DST CHECKPOINT
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

import stompmq.spark

from ..support.waiting import pace

#: Rows per Arrow batch between the steps, and seconds each small batch is held back.
SLICE, PAUSE = 25, 0.02


def slowly(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows unchanged and in order (a replay must send the same rows), a slice at a time."""
    for batch in batches:
        for start in range(0, batch.num_rows, SLICE):
            pace(PAUSE)  # the slowness is the point: a SIGKILL must land mid-write
            yield batch.slice(start, SLICE)


def main(url: str, src: str, dst: str, checkpoint: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]").appName("stompmq-sink-crash")
        .config("spark.ui.enabled", "false").config("spark.driver.memory", "512m")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(SLICE))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stompmq.spark.register(spark)
    df = (spark.readStream.format("stompmq").option("url", url).option("destination", src)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "200").load())
    query = (df.select("body").mapInArrow(slowly, "body binary").writeStream.format("stompmq")
             .option("url", url).option("destination", dst).option("checkpointLocation", checkpoint).start())
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
