"""The Spark session the pipeline runs on.

Three deployments, chosen by config alone:

* embedded local mode (``master: local[2]``, the default): a JVM started by PySpark inside
  the exporter's process tree, tuned for small data (a snapshot is kilobytes to a few MB);
* a standalone/YARN/Kubernetes master (``master: spark://HOST:PORT`` ...);
* Spark Connect (``connect_url: sc://HOST:PORT``): no local JVM at all. The pipeline only uses
  the DataFrame API, so it runs unchanged there.

The session is expensive to start (seconds) and cheap to reuse: the daemon creates it once
and passes it to every cycle; :meth:`SparkSession.builder.getOrCreate` also returns the
already active session when called twice in one process.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from exporter.config import SparkConfig

log = logging.getLogger(__name__)
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

#: Settings for a snapshot-sized workload in local mode. ``SparkConfig.conf`` overrides them.
LOCAL_DEFAULTS: Mapping[str, str] = {
    # A cycle's tables are small: 200 shuffle partitions would mean 200 tiny tasks per stage.
    # One partition per shuffle and no adaptive re-planning: measured with
    # bench/pipeline_bench.py, half the cycle time of 2 partitions with AQE at 1k-10k partitions.
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.catalogImplementation": "in-memory",  # no Hive metastore, no derby files
    "spark.sql.session.timeZone": "UTC",
    # The embedded driver only talks to itself: never depend on the host name resolving.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

#: Settings for a remote master: the workload is still small.
CLUSTER_DEFAULTS: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.session.timeZone": "UTC",
}


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def session_conf(config: SparkConfig) -> dict[str, str]:
    """The Spark settings :func:`spark_session` applies (defaults, then the config's ``conf``)."""
    if config.connect_url:
        # Static settings (UI, memory, catalog) belong to the Connect server; only the
        # operator's own runtime settings are sent.
        return dict(config.conf)
    local = is_local_master(config.master)
    conf = dict(LOCAL_DEFAULTS if local else CLUSTER_DEFAULTS)
    if local:
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    conf["spark.driver.memory"] = config.driver_memory
    if config.local_dir:
        conf["spark.local.dir"] = config.local_dir
    conf.update(config.conf)
    return conf


def spark_session(config: SparkConfig) -> SparkSession:
    """Start (or return the already running) Spark session described by ``config``."""
    conf = session_conf(config)
    if config.connect_url:
        builder = SparkSession.builder.remote(config.connect_url)
        where = config.redacted_connect_url
    else:
        builder = SparkSession.builder.master(config.master).appName(config.app_name)
        where = config.master
    for key, value in conf.items():
        builder = builder.config(key, value)
    if is_local_master(config.master) and not config.connect_url:
        # The embedded driver binds to loopback; without this Spark looks up the host name.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log.info("starting Spark session on %s", where)
    session = builder.getOrCreate()
    if not config.connect_url:
        # Only a classic session has a SparkContext; with Connect the server owns logging.
        session.sparkContext.setLogLevel("ERROR")
    return session


def stop(session: SparkSession | None) -> None:
    """Stop a session started by :func:`spark_session`; safe to call with ``None`` or twice."""
    if session is None:
        return
    log.info("stopping Spark session")
    session.stop()
