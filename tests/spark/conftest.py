"""One local-mode SparkSession for the whole test run (starting a JVM costs seconds).

Without the spark extra these tests are skipped, saying what is missing (``pytest.importorskip``
in this fixture and in the modules that import pyspark), so the suite runs with the dev extra alone."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    import stompmq.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("stompmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    stompmq.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
