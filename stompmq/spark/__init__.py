"""The PySpark data source ``stompmq`` (extra ``spark``): ``stompmq.spark.register(spark)``.

    import stompmq.spark; stompmq.spark.register(spark)
    spark.readStream.format("stompmq").option("url", "stomp://localhost:61613") \\
        .option("destination", "/stream/events").load()
"""

from __future__ import annotations

from typing import Any

from .client import StompmqError
from .source import StompmqDataSource

__all__ = ["StompmqDataSource", "StompmqError", "register"]


def register(spark: Any) -> None:
    """Make ``format("stompmq")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(StompmqDataSource)
