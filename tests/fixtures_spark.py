"""pytest plugin: one local Spark session for the whole test session.

Starting Spark costs seconds, so every test marked ``spark`` shares the session; tests only
build DataFrames from their own fixture tables, never global state in the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from exporter.config import SparkConfig
from exporter.pipeline.session import spark_session, stop


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    local_dir: Path = tmp_path_factory.mktemp("spark-local")
    session = spark_session(
        SparkConfig(
            master="local[2]",
            app_name="kafka-txn-exporter-tests",
            local_dir=str(local_dir),
            driver_memory="512m",
        )
    )
    try:
        yield session
    finally:
        stop(session)
