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
    """``skip_corrupt``: reads skip files Spark cannot read (the report) instead of failing;
    the daemon's compaction never does, so that it never rewrites a partition without them."""

    def __init__(self, spark: Any, config: HistoryConfig, *, skip_corrupt: bool = False) -> None:
        self.spark = spark
        self.config = config
        self.base = config.path
        self.skip_corrupt = skip_corrupt

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
        reader = self.spark.read.schema(dataset.spark_ddl()).option("basePath", self.dataset_path(name))
        where = self.dataset_path(name)
        if self.skip_corrupt:
            # Only the partitions' own directories: a stray file higher up would make
            # Spark's partition discovery fail the whole read.
            reader = reader.option("ignoreCorruptFiles", "true")
            where = f"{where}/{PARTITION_COLUMNS[0]}=*/{PARTITION_COLUMNS[1]}=*"
        try:
            return reader.parquet(where)
        except Exception as e:  # AnalysisException PATH_NOT_FOUND: an empty dataset
            if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
                return self.spark.createDataFrame([], spark_schema(dataset))
            raise

    def is_history(self) -> str | None:
        """What makes the path not a history (it does not exist, is not a directory, holds no
        dataset), or None."""
        if self.config.is_local:
            return local_history_problem(self.config.local_path)
        fs = _FileSystem.of(self.spark, self.config)
        if not fs.exists(self.base):
            return "does not exist"
        if not any(fs.exists(self.dataset_path(d.name)) for d in BY_NAME.values()):
            return f"is not a history (none of {', '.join(BY_NAME)})"
        return None

    def unreadable_files(self, dates: tuple[str, str], cluster: str | None) -> list[str]:
        """The data files of the datasets, in the date range (and of the cluster, if given),
        that are not readable Parquet, relative to the history's path: a local file's footer
        is read (pyarrow), a remote one's framing checked (the magic bytes and the footer's
        length, through Hadoop's file system). Spark Connect with a remote history: none
        checked (the client has no file system)."""
        try:
            fs = _FileSystem.of(self.spark, self.config, prefer_local=True)
        except RuntimeError:
            return []
        bad = []
        for name in BY_NAME:
            for path in fs.files(self.dataset_path(name)):
                relative = path[path.find(f"/{name}/") + 1 :]
                if _in_window(relative, dates, cluster) and not fs.is_parquet(path):
                    bad.append(relative)
        return sorted(bad)


def local_history_problem(path: str) -> str | None:
    """What makes a local directory not a history, or None."""
    root = Path(path)
    if not root.exists():
        return "does not exist"
    if not root.is_dir():
        return "is not a directory"
    if not any((root / name).is_dir() for name in BY_NAME):
        return f"is not a history (no {', '.join(BY_NAME)} directory in it)"
    return None


def _in_window(relative: str, dates: tuple[str, str], cluster: str | None) -> bool:
    parts = dict(p.split("=", 1) for p in relative.split("/") if "=" in p)
    if cluster is not None and parts.get("cluster") not in (cluster, None):
        return False
    date = parts.get("date")
    return date is None or dates[0] <= date <= dates[1]


def _data_file(name: str) -> bool:
    """Spark's file sources skip names starting with _ or . (_SUCCESS, .crc files)."""
    return not name.startswith(("_", "."))


class _FileSystem:
    """Listing and deleting directories: Hadoop's FileSystem of a classic session, or the
    local file system (Spark Connect, local paths)."""

    def __init__(self, jvm: Any, hadoop_conf: Any, local: bool) -> None:
        self._jvm = jvm
        self._conf = hadoop_conf
        self._local = local

    @classmethod
    def of(cls, spark: Any, config: HistoryConfig, *, prefer_local: bool = False) -> _FileSystem:
        jvm = getattr(spark, "_jvm", None)
        if prefer_local and config.is_local:
            return cls(None, None, True)
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

    def exists(self, path: str) -> bool:
        if self._local:
            return Path(path.removeprefix("file://")).exists()
        hp, fs = self._path(path)
        return bool(fs.exists(hp))

    def files(self, root: str) -> list[str]:
        """Every data file under ``root`` (recursive), by full path; none when it is absent."""
        if self._local:
            local = Path(root.removeprefix("file://"))
            return [
                str(p)
                for p in sorted(local.rglob("*"))
                if p.is_file()
                and _data_file(p.name)
                and not any(q.startswith((".", "_")) for q in p.relative_to(local).parts[:-1])
            ]
        hp, fs = self._path(root)
        if not fs.exists(hp):
            return []
        found, listing = [], fs.listFiles(hp, True)
        while listing.hasNext():
            path = listing.next().getPath()
            if _data_file(str(path.getName())) and f"/{STAGING}/" not in str(path.toString()):
                found.append(str(path.toString()))
        return found

    def is_parquet(self, path: str) -> bool:
        """Whether ``path`` is readable Parquet: its footer parses (local), or its framing
        is whole (remote: PAR1 at both ends, a footer length that fits)."""
        if self._local:
            import pyarrow.parquet as pq

            try:
                pq.read_metadata(path)
            except Exception:  # ArrowInvalid, OSError: whatever it is, it is not readable
                return False
            return True
        hp, fs = self._path(path)
        try:
            size = int(fs.getFileStatus(hp).getLen())
            if size < 12:
                return False
            stream = fs.open(hp)
            try:
                head = self._read(stream, 0, 4)
                tail = self._read(stream, size - 8, 8)
            finally:
                stream.close()
        except Exception:  # an unreadable file, or the JVM's IOException through py4j
            return False
        footer = int.from_bytes(tail[:4], "little")
        return head == b"PAR1" and tail[4:] == b"PAR1" and 0 < footer <= size - 12

    @staticmethod
    def _read(stream: Any, position: int, length: int) -> bytes:
        """``length`` bytes at ``position``, a byte a call: py4j copies Java arrays, so a
        read into one would be lost (a dozen round trips a file)."""
        stream.seek(position)
        return bytes(stream.read() & 0xFF for _ in range(length))

    def delete(self, path: str) -> None:
        if self._local:
            shutil.rmtree(path.removeprefix("file://"), ignore_errors=True)
            return
        hp, fs = self._path(path)
        fs.delete(hp, True)


#: Datasets the daemon's writer compacts (``actions`` is appended by the CLI, possibly while
#: the daemon runs: it is never rewritten, so no concurrent append can be lost).
COMPACTED = tuple(name for name in BY_NAME if name != ACTIONS.name)
