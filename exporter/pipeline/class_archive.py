"""A class archive of the embedded Spark driver's JVM (HotSpot's Class Data Sharing).

Starting the driver loads ~23,500 of Spark's classes, and the first pipeline run thousands
more (the analyser's and optimiser's rules). A dynamic CDS archive written once after a
warm-up run holds those classes already parsed and verified: the JVM maps the file instead
of loading them. Measured on 2 cores (``bench/results/first_cycle.md``): session
start 3.6-3.8 -> 2.2 s, the first pipeline run 5.7-6.0 -> 4.5-5.0 s, a cold CLI
``find-hanging`` 9.1 -> 6.3 s, the daemon's first cycle 10-11 -> 8 s, the same JVM RSS.

* :func:`write_archive` (``kafka-txn-exporter class-archive --out FILE``) starts the driver
  with ``-XX:ArchiveClassesAtExit``, runs the warm-up snapshot through the pipeline, and lets
  the JVM exit, which writes the archive; the file appears under its name only when complete.
* :func:`archive_options` gives the embedded driver ``-XX:SharedArchiveFile`` when
  ``spark.class_archive`` (or ``$KAFKA_TXN_EXPORTER_SPARK_CLASS_ARCHIVE``, for the CLI) names
  an existing file. An archive written by another JVM build or for other Spark jars is
  refused by the JVM itself, which then starts without it (``-Xshare:auto``, the default);
  a damaged one (a copy cut short) crashes the JVM as it starts, so ``spark_session`` then
  calls :func:`refuse_archive` and starts again without it. The archive can make a start
  faster, never make it fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import replace
from pathlib import Path

from exporter.config import SparkConfig

log = logging.getLogger(__name__)

#: The archive for commands run without a config file (the image sets it).
CLASS_ARCHIVE_ENV = "KAFKA_TXN_EXPORTER_SPARK_CLASS_ARCHIVE"
#: How long the JVM may take to exit and write the archive (~10 s on 2 cores).
DUMP_TIMEOUT_S = 180.0

_warned: set[str] = set()
#: Archives a driver failed to start with, never mapped again by this process.
_refused: set[str] = set()


class ClassArchiveError(Exception):
    """The archive could not be written; the message names why."""


def archive_path(config: SparkConfig) -> str | None:
    """The archive the embedded driver should map: the config's, else the environment's."""
    return config.class_archive or os.environ.get(CLASS_ARCHIVE_ENV) or None


def mapped_archive(config: SparkConfig) -> str | None:
    """The archive the next embedded driver maps: configured, present, and not refused."""
    path = archive_path(config)
    if path is None or path in _refused:
        return None
    if not os.path.isfile(path):
        if path not in _warned:  # once per path, not at every session restart
            _warned.add(path)
            log.warning("Spark class archive %s does not exist: the driver starts without it", path)
        return None
    return path


def archive_options(config: SparkConfig) -> list[str]:
    """JVM flags that map the class archive, when there is one to map."""
    path = mapped_archive(config)
    return [] if path is None else [f"-XX:SharedArchiveFile={path}"]


def refuse_archive(path: str, why: BaseException) -> None:
    """The driver did not start with ``path`` mapped: start without it from now on. (The JVM
    ignores an archive of another JVM build or other jars, but a damaged one crashes it.)"""
    _refused.add(path)
    log.warning(
        "the Spark driver did not start with class archive %s (%s): starting without it; "
        "write it again with `kafka-txn-exporter class-archive`",
        path,
        str(why).splitlines()[0][:200] if str(why) else type(why).__name__,
    )


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
    from exporter.model import PipelineSettings
    from exporter.pipeline.compute import compute
    from exporter.pipeline.session import is_embedded, spark_session
    from exporter.pipeline.warmup import warmup_snapshot

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
