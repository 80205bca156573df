"""What the daemon's threads import, imported on the main thread before the first of them starts.

Why: two threads importing at once can deadlock in CPython's import system (CPython issue
83065, open in 3.11). Each module has a lock held while it is first imported, and a module
``a.b`` is locked *before* its package ``a`` is imported. So when one thread imports
``importlib.abc`` (which imports ``importlib.resources.abc``: that module's lock, then its
package ``importlib.resources``) while another imports ``importlib.resources`` (which imports
``importlib.resources.abc`` from its ``__init__``), each holds the lock the other waits for;
CPython detects the cycle and raises ``_DeadlockError: deadlock detected by
_ModuleLock('importlib.resources')`` into one of them. That is how the daemon died at start
about once in five: the Spark start thread imports PySpark (whose error classes are read
through ``importlib.resources``) while the first cycle imports kafka-python (whose protocol
schemas are read the same way) and the Kafka, Arrow and pipeline modules.

How it cannot recur: an import of a module that is already in ``sys.modules``, fully
initialised, returns it without taking any lock. :func:`import_before_threads` imports every
module the daemon's threads import (the Spark start and warm-up, a cycle's Kafka collection
and pipeline run, the history writer, the HTTP workers) before the command line starts the
daemon; the threads then never import for the first time, so no two imports ever run at once.
``tests/integration/test_daemon_start.py`` runs the daemon with an audit hook through its
start, a complete cycle, scrapes and SIGTERM and fails if any thread but the main one imports
a module for the first time: a new lazy import in a thread's path has to be added here.
"""

from __future__ import annotations

import importlib
import logging
import time

from exporter.config import Config

log = logging.getLogger(__name__)

#: Every deployment: a cycle (``exporter.daemon.cycle``) collects through ``exporter.kafka``,
#: whose modules import the Kafka clients inside their functions, then runs the pipeline.
COMMON: tuple[str, ...] = (
    # The Kafka clients, as exporter.kafka's functions import them.
    "confluent_kafka",
    "confluent_kafka.admin",
    "kafka",
    "kafka.admin",
    "kafka.errors",
    "kafka.net.compat",
    "kafka.net.sasl.oauth",
    "kafka.protocol.admin.groups",
    "kafka.protocol.admin.transactions",
    "kafka.protocol.api_header",
    "kafka.protocol.consumer.fetch",
    "kafka.protocol.consumer.group",
    "kafka.protocol.consumer.offsets",
    "kafka.protocol.metadata",
    "kafka.protocol.producer.transaction",
    "kafka.record",
    # What the clients import on their first connection (host name encoding).
    "encodings.idna",
    # The pipeline and what it brings: PySpark's SQL API, Arrow (and its Parquet hand-over).
    "exporter.pipeline.session",
    "exporter.pipeline.compute",
    "exporter.pipeline.warmup",
    "pyarrow.pandas_compat",
    "pyarrow.vendored.version",
    "pandas",
    # PySpark's session start imports its testing helpers (and protobuf's error details) to
    # learn which optional dependencies are installed.
    "pyspark.testing.utils",
    "google.rpc.error_details_pb2",
    # The HTTP workers: prometheus_client's exposition (gzip, OpenMetrics).
    "gzip",
    "prometheus_client.openmetrics.exposition",
)

#: The embedded driver (and a remote classic master): PySpark's classic session, its JVM
#: gateway, and the classic DataFrame modules its first plan imports.
CLASSIC: tuple[str, ...] = (
    "py4j.clientserver",
    "py4j.java_gateway",
    "pyspark.java_gateway",
    "pyspark.core.context",
    "pyspark.sql.classic.column",
    "pyspark.sql.classic.dataframe",
    "pyspark.sql.pandas.map_ops",
)

#: Spark Connect: the client session (gRPC, protobuf) and its DataFrame modules.
CONNECT: tuple[str, ...] = (
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.dataframe",
    "pyspark.sql.connect.functions",
)

#: The history writer's thread (``history`` configured).
HISTORY: tuple[str, ...] = ("exporter.history.store",)


def found_by_module() -> tuple[str, ...]:
    """The modules found by name rather than imported: the pipeline's families (planned by a
    round) and their renderers (run by a scrape), each a module of its package."""
    import pkgutil

    from exporter.metrics import families as renderers
    from exporter.pipeline.families import family_names

    pipeline = tuple(f"exporter.pipeline.families.{name}" for name in family_names())
    rendering = tuple(
        f"{renderers.__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(renderers.__path__))
    )
    return ("exporter.pipeline.rounds", *pipeline, *rendering)


def modules_for(config: Config) -> tuple[str, ...]:
    """The modules the daemon's threads import under ``config``."""
    engine = CONNECT if config.spark.connect_url else CLASSIC
    history = HISTORY if config.history is not None else ()
    return COMMON + found_by_module() + engine + history


def import_before_threads(config: Config) -> None:
    """Import :func:`modules_for` ``config``; call it on the main thread before the daemon
    starts. A module that cannot be imported is left to the thread that needs it, which
    reports the failure where it is handled (a Spark start that fails, a failed cycle)."""
    started = time.monotonic()
    import_names(modules_for(config))
    log.debug("modules imported before the threads start in %.1f s", time.monotonic() - started)


def import_names(names: tuple[str, ...], *, strict: bool = False) -> None:
    """Import ``names``; ``strict``: raise when one cannot be (the thin image's build checks
    that its daemon's modules are all there)."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # the thread that needs it reports it in context
            if strict:
                raise
            log.debug("not imported before start: %s (%s: %s)", name, type(e).__name__, e)


if __name__ == "__main__":
    # The thin image's build (Dockerfile): every module its daemon imports, imported once so
    # that their bytecode is written, and checked to be there. A module, not ``python -c``:
    # PySpark's Connect client takes a ``__main__`` without a file for its doctests.
    import_names(COMMON + CONNECT + HISTORY, strict=True)
