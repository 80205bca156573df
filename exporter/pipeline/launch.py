"""Launch the embedded Spark driver's JVM as soon as the process knows its configuration.

The daemon's first cycle waits for the driver to start (seconds) and then for its first plan.
``kafka-txn-exporter run`` calls :func:`launch_early` right after reading its configuration,
before it imports and builds the daemon (HTTP, scheduler, Kafka clients, metrics): the JVM
then starts on the other core while this process does that, instead of after. The
session itself is made later, as before (``exporter.pipeline.session.spark_session`` finds
the driver launched, or launching, and uses it).

This module imports no Spark: the import happens on the launching thread.
"""

from __future__ import annotations

import logging
import threading

from exporter.config import SparkConfig

log = logging.getLogger(__name__)


def launch_early(config: SparkConfig) -> threading.Thread:
    """Launch the embedded driver of ``config`` on a thread of its own (nothing for Spark
    Connect or a remote master). A failure is left to the session's start to report."""
    thread = threading.Thread(target=_launch, args=(config,), name="spark-launch", daemon=True)
    thread.start()
    return thread


def _launch(config: SparkConfig) -> None:
    try:
        from exporter.pipeline.session import driver_conf, is_embedded, launch_driver

        if is_embedded(config):
            launch_driver(driver_conf(config))
    except Exception as e:  # the session's start launches again and says what failed
        log.debug("launching the Spark driver early failed: %s", e)
