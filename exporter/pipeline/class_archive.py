"""A class archive of the embedded Spark driver's JVM (HotSpot's Class Data Sharing).

Starting the driver loads ~23,500 of Spark's classes, and the first pipeline run thousands
more (the analyser's and optimiser's rules). A dynamic CDS archive written once after a
warm-up run holds those classes already parsed and verified: the JVM maps the file instead
of loading them. Measured on 2 cores (``bench/results/first_cycle.md``): session
start 3.6-3.8 -> 2.2 s, the first pipeline run 5.7-6.0 -> 4.5-5.0 s, a cold CLI
``find-hanging`` 9.1 -> 6.3 s, the daemon's first cycle 10-11 -> 8 s, the same JVM RSS.

* :func:`exporter.pipeline.archive_writer.write_archive` (``kafka-txn-exporter class-archive
  --out FILE``) starts the driver
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

import logging
import os

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
