"""Launch the embedded Spark driver's JVM as soon as the process knows its configuration.

The daemon's first cycle waits for the driver to start (seconds) and then for its first plan.
``kafka-txn-exporter run`` calls :func:`launch_early` right after reading its configuration:
the modules a launch needs (PySpark's gateway, py4j) are imported here, on the calling
thread, and the JVM is launched on a thread of its own, so that it starts on the other core
while the main thread imports the rest of what the daemon's threads need
(``exporter/daemon/preload.py``: no thread may import a module for the first time) and
builds the daemon. The session itself is made later, as before:
``exporter.pipeline.session.spark_session`` finds the driver launched, or launching, and
uses it.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping

from exporter.config import SparkConfig

log = logging.getLogger(__name__)

#: What :func:`exporter.pipeline.session.launch_driver` and PySpark's launch import.
LAUNCH_MODULES = (
    "exporter.pipeline.session",
    "pyspark.java_gateway",
    "py4j.clientserver",
    "py4j.java_gateway",
    "pyspark.core.context",
)


def launch_early(config: SparkConfig) -> threading.Thread | None:
    """Import what a launch needs (here, on the caller's thread), then launch the embedded
    driver of ``config`` on a thread of its own; None for Spark Connect or a remote master.
    A failure is left to the session's start to report."""
    for name in LAUNCH_MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:  # the session's start imports it again and says what failed
            log.debug("not imported before the launch: %s (%s)", name, e)
            return None
    from exporter.pipeline.session import driver_conf, is_embedded, launch_driver

    if not is_embedded(config):
        return None
    conf = driver_conf(config)
    thread = threading.Thread(target=_launch, args=(launch_driver, conf), name="spark-launch", daemon=True)
    thread.start()
    return thread


def _launch(launch: Callable[[Mapping[str, str]], None], conf: Mapping[str, str]) -> None:
    try:
        launch(conf)
    except Exception as e:  # the session's start launches again and says what failed
        log.debug("launching the Spark driver early failed: %s", e)
