"""Writing the class archive (``kafka-txn-exporter class-archive --out FILE``): the driver
started with ``-XX:ArchiveClassesAtExit``, the warm-up snapshot run through the pipeline, the
JVM ended so that it writes the archive (:mod:`exporter.pipeline.class_archive` says why, and
how a driver maps one). A module of its own: it runs the whole pipeline, which the session's
archive options must not import."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path

from exporter.config import SparkConfig
from exporter.model import PipelineSettings
from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV, DUMP_TIMEOUT_S, ClassArchiveError
from exporter.pipeline.compute import compute
from exporter.pipeline.session import is_embedded, spark_session
from exporter.pipeline.warmup import warmup_snapshot


def check_destination(out: Path) -> str | None:
    """Why the archive cannot be written at ``out`` (None: it can)."""
    directory = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        return f"{out} is a directory"
    if not directory.is_dir():
        return f"directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory} is not writable"
    return None


def write_archive(out: Path, config: SparkConfig | None = None) -> int:
    """Write the class archive of the embedded driver to ``out``; return its size in bytes.

    The warm-up snapshot runs through the pipeline once, so the archive holds the classes
    of a whole cycle, not only those of the start. Raises ClassArchiveError."""
    config = config or SparkConfig()
    if not is_embedded(config):
        raise ClassArchiveError("a class archive is for the embedded driver (local master, no connect_url)")
    problem = check_destination(out)
    if problem:
        raise ClassArchiveError(problem)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    own = config.conf.get("spark.driver.extraJavaOptions", "")
    dump = f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=error"
    conf = {**config.conf, "spark.driver.extraJavaOptions": f"{own} {dump}".strip()}
    # No archive mapped while writing one: the JVM refuses to do both.
    writing = replace(config, conf=conf, class_archive=None, connect_server_port=None)
    saved = os.environ.pop(CLASS_ARCHIVE_ENV, None)
    try:
        spark = spark_session(writing, short_lived=False)
        snapshot = warmup_snapshot()
        compute(spark, snapshot, PipelineSettings(), None, snapshot.taken_at_ms)
        _exit_jvm(spark)
        if not partial.is_file() or partial.stat().st_size == 0:
            raise ClassArchiveError("the JVM exited without writing the archive (see its output above)")
        os.replace(partial, out)
        return out.stat().st_size
    finally:
        if saved is not None:
            os.environ[CLASS_ARCHIVE_ENV] = saved
        with contextlib.suppress(OSError):
            partial.unlink()


def _exit_jvm(spark: object) -> None:
    """Stop the session and end its JVM normally (the archive is written at exit): PySpark's
    gateway JVM exits when its standard input closes."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    spark.stop()  # type: ignore[attr-defined]
    proc = getattr(gateway, "proc", None)
    if gateway is None or proc is None:
        raise ClassArchiveError("no driver JVM of this process to end")
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc.stdin is not None:
        proc.stdin.close()
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise ClassArchiveError(f"the driver JVM did not exit within {DUMP_TIMEOUT_S:.0f} s")
        time.sleep(0.2)
    SparkContext._gateway = None
    SparkContext._jvm = None
