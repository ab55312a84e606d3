"""The PySpark data source ``stompmq`` (extra ``spark``): ``stompmq.spark.register(spark)``.

    import stompmq.spark; stompmq.spark.register(spark)
    spark.readStream.format("stompmq").option("url", "stomp://localhost:61613") \\
        .option("destination", "/stream/events").load()
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from .client import StompmqError
from .source import StompmqDataSource

__all__ = ["StompmqDataSource", "StompmqError", "register"]

log = logging.getLogger(__name__)


def register(spark: Any) -> None:
    """Make ``format("stompmq")`` available in ``spark`` (a SparkSession).

    Spark runs the source in Python workers started with ``PYSPARK_PYTHON`` (or the setting
    ``spark.pyspark.python``), else ``python3`` from the PATH, which rarely has stompmq and
    pyarrow installed: every read then failed with ``No module named ...``.  With neither set,
    a local session's workers run this interpreter (the one stompmq was imported by); other
    masters' executors may not have it, so they are told, in one line, what to set."""
    context = spark.sparkContext
    if not os.environ.get("PYSPARK_PYTHON") and not context.getConf().get("spark.pyspark.python"):
        if context.master.startswith("local"):
            context.pythonExec = sys.executable  # (what the data source's workers are started with)
        else:
            log.warning("stompmq.spark: set PYSPARK_PYTHON (or spark.pyspark.python) to a Python with"
                        " stompmq[spark] installed on every executor; the workers use %r", context.pythonExec)
    spark.dataSource.register(StompmqDataSource)
