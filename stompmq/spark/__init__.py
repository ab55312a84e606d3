"""The PySpark data source ``stompmq`` (extra ``spark``): ``stompmq.spark.register(spark)``.

    import stompmq.spark; stompmq.spark.register(spark)
    spark.readStream.format("stompmq").option("url", "stomp://localhost:61613") \\
        .option("destination", "/stream/events").load()
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .client import StompmqError
from .source import StompmqDataSource

__all__ = ["StompmqDataSource", "StompmqError", "register"]


def register(spark: Any) -> None:
    """Make ``format("stompmq")`` available in ``spark`` (a SparkSession).

    The data source runs in Spark's Python workers, which start ``PYSPARK_PYTHON`` (``python3``
    on the PATH when unset): an interpreter without stompmq fails every read with ``No module
    named 'stompmq.spark'``.  In local mode the workers run on this machine, so when
    ``PYSPARK_PYTHON`` is unset they run this driver's interpreter, which has stompmq.  On a
    cluster, set ``PYSPARK_PYTHON`` to an interpreter with ``stompmq[spark]`` on every executor."""
    context = spark.sparkContext
    if "PYSPARK_PYTHON" not in os.environ and context.master.startswith("local"):
        context.pythonExec = sys.executable  # read when the data source is wrapped, below
    spark.dataSource.register(StompmqDataSource)
