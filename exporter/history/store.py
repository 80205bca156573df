"""The history on disk: Parquet datasets written and read with Spark's DataFrame API.

Layout: ``<history.path>/<dataset>/cluster=<name>/date=<YYYY-MM-DD>/part-*.parquet``.

* :meth:`HistoryStore.append` appends rows (one file per dataset and partition per write);
* :meth:`HistoryStore.compact` rewrites one (cluster, date) partition as about one file per
  hour: the partition is copied to ``_staging/`` and written back with Spark's dynamic
  partition overwrite, so only that partition is replaced;
* :meth:`HistoryStore.drop_before` deletes whole date partitions (retention) through the
  Hadoop file system of the session (any URL Spark supports) or, on Spark Connect where
  the client has no file system, for a local path only.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from exporter.history.config import HistoryConfig
from exporter.history.rows import Row
from exporter.history.schema import ACTIONS, BY_NAME, PARTITION_COLUMNS, Dataset, spark_schema

log = logging.getLogger(__name__)
HOUR_MS = 3_600_000
STAGING = "_staging"


def arrow_rows(dataset: Dataset, rows: Sequence[Row]) -> pa.Table:
    schema = dataset.arrow_schema()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )


class HistoryStore:
    def __init__(self, spark: Any, config: HistoryConfig) -> None:
        self.spark = spark
        self.config = config
        self.base = config.path

    def dataset_path(self, name: str) -> str:
        return f"{self.base}/{name}"

    # --- writing ------------------------------------------------------------------------

    def append(self, name: str, rows: Sequence[Row]) -> None:
        """Append rows to one dataset. Raises on failure (the caller keeps the rows)."""
        if not rows:
            return
        dataset = BY_NAME[name]
        frame = self.spark.createDataFrame(arrow_rows(dataset, rows), spark_schema(dataset))
        (
            frame.coalesce(1)
            .write.mode("append")
            .partitionBy(*PARTITION_COLUMNS)
            .parquet(self.dataset_path(name))
        )

    def compact(self, name: str, cluster: str, date: str) -> int:
        """Rewrite one partition as about one file per hour; returns the files it had
        (0 when nothing needed doing)."""
        from pyspark.sql import functions as F

        dataset = BY_NAME[name]
        part = self.read(name).where((F.col("cluster") == cluster) & (F.col("date") == date))
        files = part.inputFiles()
        bucket = F.floor(F.col(dataset.time_column) / F.lit(HOUR_MS))
        hours = part.select(bucket.alias("h")).distinct().count()
        if hours == 0 or len(files) <= hours:
            return 0
        staging = f"{self.base}/{STAGING}/{name}"
        (
            part.repartitionByRange(hours, bucket)
            .write.mode("overwrite")
            .partitionBy(*PARTITION_COLUMNS)
            .parquet(staging)
        )
        staged = self.spark.read.schema(dataset.spark_ddl()).parquet(staging)
        (
            staged.repartitionByRange(hours, bucket)
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy(*PARTITION_COLUMNS)
            .parquet(self.dataset_path(name))
        )
        return len(files)

    def drop_before(self, cutoff_date: str, datasets: Iterable[Dataset]) -> list[str]:
        """Delete every date partition older than ``cutoff_date``; returns what went."""
        dropped: list[str] = []
        fs = _FileSystem.of(self.spark, self.config)
        for dataset in datasets:
            root = self.dataset_path(dataset.name)
            for cluster_dir in fs.children(root):
                if not cluster_dir.rsplit("/", 1)[-1].startswith("cluster="):
                    continue
                for date_dir in fs.children(cluster_dir):
                    date = date_dir.rsplit("/", 1)[-1].removeprefix("date=")
                    if date_dir.rsplit("/", 1)[-1].startswith("date=") and date < cutoff_date:
                        fs.delete(date_dir)
                        dropped.append(date_dir)
        return dropped

    # --- reading ------------------------------------------------------------------------

    def read(self, name: str) -> Any:
        """One dataset as a DataFrame (empty when nothing was ever written)."""
        dataset = BY_NAME[name]
        try:
            return (
                self.spark.read.schema(dataset.spark_ddl())
                .option("basePath", self.dataset_path(name))
                .parquet(self.dataset_path(name))
            )
        except Exception as e:  # AnalysisException PATH_NOT_FOUND: an empty dataset
            if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
                return self.spark.createDataFrame([], spark_schema(dataset))
            raise


class _FileSystem:
    """Listing and deleting directories: Hadoop's FileSystem of a classic session, or the
    local file system (Spark Connect, local paths)."""

    def __init__(self, jvm: Any, hadoop_conf: Any, local: bool) -> None:
        self._jvm = jvm
        self._conf = hadoop_conf
        self._local = local

    @classmethod
    def of(cls, spark: Any, config: HistoryConfig) -> _FileSystem:
        jvm = getattr(spark, "_jvm", None)
        if jvm is not None:
            return cls(jvm, spark._jsc.hadoopConfiguration(), False)
        if config.is_local:
            return cls(None, None, True)
        raise RuntimeError(
            "retention on a remote history needs a classic Spark session "
            "(Spark Connect clients have no file system access)"
        )

    def _path(self, path: str) -> Any:
        hp = self._jvm.org.apache.hadoop.fs.Path(path)
        return hp, hp.getFileSystem(self._conf)

    def children(self, path: str) -> list[str]:
        if self._local:
            local = Path(path.removeprefix("file://"))
            return [str(p) for p in sorted(local.iterdir()) if p.is_dir()] if local.is_dir() else []
        hp, fs = self._path(path)
        if not fs.exists(hp):
            return []
        return [str(s.getPath().toString()) for s in fs.listStatus(hp) if s.isDirectory()]

    def delete(self, path: str) -> None:
        if self._local:
            shutil.rmtree(path.removeprefix("file://"), ignore_errors=True)
            return
        hp, fs = self._path(path)
        fs.delete(hp, True)


#: Datasets the daemon's writer compacts (``actions`` is appended by the CLI, possibly while
#: the daemon runs: it is never rewritten, so no concurrent append can be lost).
COMPACTED = tuple(name for name in BY_NAME if name != ACTIONS.name)
