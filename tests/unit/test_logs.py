"""One line per state change: the libraries quiet at the default level, the Spark driver's
start-up lines at DEBUG, a streak of skipped cycles said once (exporter/logs.py,
exporter/daemon/cycle.py)."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import parse_config
from exporter.daemon.cycle import ClusterJob
from exporter.logs import JVM_LOGGER, QUIET_LIBRARIES, jvm_line_level, setup_logging
from exporter.metrics.collector import ExporterMetrics
from exporter.metrics.state import StateStore
from exporter.model import ClusterSnapshot, CycleResult, PipelineSettings
from exporter.pipeline.compute import ComputeStats
from exporter.pipeline.rounds import ClusterRun, RoundResult
from exporter.pipeline.session import relay_driver_output

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in levels.items():
        logging.getLogger(name).setLevel(saved)


@pytest.mark.parametrize(
    "line",
    [
        "WARNING: Using incubator modules: jdk.incubator.vector",
        'Setting default log level to "WARN".',
        "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
        "WARNING: A terminally deprecated method in sun.misc.Unsafe has been called",
    ],
)
def test_the_drivers_start_up_lines_are_debug(line: str) -> None:
    assert jvm_line_level(line) == logging.DEBUG


def test_the_drivers_errors_and_their_stack_traces_are_errors_and_anything_else_a_warning() -> None:
    error = "2026-11-27 18:00:00,000 ERROR spark Executor: Exception in task 0.0"
    assert jvm_line_level(error) == logging.ERROR
    assert jvm_line_level("\tat org.apache.spark.Foo.bar(Foo.scala:1)", logging.ERROR) == logging.ERROR
    assert jvm_line_level("Terminating due to java.lang.OutOfMemoryError: Java heap space") == logging.WARNING


def test_the_relay_logs_every_line_of_the_driver_at_its_level(caplog: pytest.LogCaptureFixture) -> None:
    output = io.BytesIO(
        b"WARNING: Using incubator modules: jdk.incubator.vector\n"
        b"2026-11-27 18:00:00,000 ERROR spark X: broken\n\tat a.b.C(C.java:1)\n\n"
    )
    with caplog.at_level(logging.DEBUG, logger=JVM_LOGGER):
        relay_driver_output(output)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (JVM_LOGGER, logging.DEBUG, "WARNING: Using incubator modules: jdk.incubator.vector"),
        (JVM_LOGGER, logging.ERROR, "2026-11-27 18:00:00,000 ERROR spark X: broken"),
        (JVM_LOGGER, logging.ERROR, "\tat a.b.C(C.java:1)"),
    ]


def test_the_libraries_are_quiet_at_the_default_level() -> None:
    setup_logging("info")
    assert not logging.getLogger("kafka.net.selector").isEnabledFor(logging.WARNING)
    assert not logging.getLogger("py4j.clientserver").isEnabledFor(logging.ERROR)
    assert not logging.getLogger(JVM_LOGGER).isEnabledFor(logging.DEBUG)
    assert logging.getLogger("exporter.daemon.cycle").isEnabledFor(logging.INFO)


def test_debug_shows_everything_but_kafka_pythons_credentials() -> None:
    setup_logging("debug")
    assert logging.getLogger("py4j.clientserver").isEnabledFor(logging.DEBUG)
    assert logging.getLogger(JVM_LOGGER).isEnabledFor(logging.DEBUG)
    # kafka-python's DEBUG lines carry its config and every request, SASL passwords too.
    assert logging.getLogger("kafka.net.selector").isEnabledFor(logging.WARNING)
    assert not logging.getLogger("kafka.conn").isEnabledFor(logging.DEBUG)
    setup_logging("info")  # a reload back to info quiets them again
    assert not logging.getLogger("py4j.clientserver").isEnabledFor(logging.ERROR)


class _Collector:
    def collect(self, **_: Any) -> ClusterSnapshot:
        return ClusterSnapshot(cluster="prod", taken_at_ms=NOW)

    def close(self) -> None:
        pass


class _Pipeline:
    settings = PipelineSettings()

    def compute_round(self, runs: list[ClusterRun]) -> RoundResult:
        results = {r.cluster: CycleResult(cluster=r.cluster, computed_at_ms=r.now_ms) for r in runs}
        return RoundResult(results=results, failures={}, stats=ComputeStats())


def _job(registry: CollectorRegistry) -> ClusterJob:
    config = parse_config({"clusters": [{"name": "prod", "bootstrap_servers": "127.0.0.1:1"}]}, env={})
    return ClusterJob(
        config.clusters[0],
        _Collector(),  # type: ignore[arg-type]
        _Pipeline(),  # type: ignore[arg-type]
        StateStore(["prod"]),
        ExporterMetrics(registry, ["prod"]),
        clock=lambda: NOW / 1000,
    )


def test_a_streak_of_skipped_runs_is_counted_each_and_said_once_in_the_line_of_the_cycle_that_caused_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    job = _job(registry)
    with caplog.at_level(logging.DEBUG, logger="exporter.daemon.cycle"):
        for _ in range(3):  # the first cycle waits for Spark: its scheduled runs are skipped
            job.skipped()
        assert caplog.records == []  # nothing per skipped run
        job.run_cycle()
        job.run_cycle()
        job.skipped()  # falling behind: a warning, once
        job.run_cycle()
        job.skipped()
        job.skipped()  # still behind: said at INFO
        job.run_cycle()
        job.run_cycle()  # keeping up again
    skipped = registry.get_sample_value("kafka_txn_exporter_cycles_skipped_total", {"kafka_cluster": "prod"})
    assert skipped == 6
    lines = [(r.levelno, re.sub(r"in \d+\.\d\d s", "in N s", r.getMessage())) for r in caplog.records]
    behind = "cycle for cluster prod: complete in N s, longer than its interval: {} scheduled run(s) skipped"
    assert lines == [
        (logging.INFO, behind.format(3)),
        (logging.INFO, "cycle for cluster prod: complete in N s"),
        (logging.WARNING, behind.format(1)),
        (logging.INFO, behind.format(2)),
        (logging.INFO, "cycle for cluster prod: complete in N s, within its interval again"),
    ]
