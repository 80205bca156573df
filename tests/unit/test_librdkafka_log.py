"""librdkafka's log lines are rate-limited per cluster and kind, and still visible at DEBUG."""

from __future__ import annotations

import logging
import re

import pytest

from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaUnavailable
from exporter.kafka.librdkafka_log import LOGGER_NAME, LibrdkafkaLog, kind_of

FMT = "%s [%s] %s"  # what confluent-kafka passes to logger.log()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def connect_failed(port: int) -> tuple[str, str, str]:
    return ("FAIL", "rdkafka#producer-1",
            f"127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: Connection "
            "refused (after 0ms in state CONNECT)")  # fmt: skip


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME and r.levelno == level]


def test_the_same_kind_of_line_is_logged_once_per_window_and_the_rest_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    clock = Clock()
    log = LibrdkafkaLog("orders", window_s=300, clock=clock)

    for _ in range(3):  # three unreachable cycles of 28 lines each, 30 s apart
        for i in range(28):
            log.log(logging.ERROR, FMT, *connect_failed(9092 + i % 3))
        clock.now += 30

    errors = records(caplog, logging.ERROR)
    assert len(errors) == 1
    assert errors[0].startswith("cluster orders: FAIL [rdkafka#producer-1] 127.0.0.1:9092/bootstrap")
    assert len(records(caplog, logging.DEBUG)) == 3 * 28 - 1  # every line is still there


def test_after_the_window_one_line_says_how_many_were_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock = Clock()
    log = LibrdkafkaLog("orders", window_s=300, clock=clock)
    for _ in range(5):
        log.log(logging.ERROR, FMT, *connect_failed(9092))
    clock.now += 301

    log.log(logging.ERROR, FMT, *connect_failed(9092))

    errors = records(caplog, logging.ERROR)
    assert len(errors) == 2
    assert "4 similar line(s) held back in the last 301 s" in errors[1]
    assert records(caplog, logging.DEBUG) == []  # DEBUG is off: nothing else is logged


def test_different_kinds_and_clusters_are_limited_separately(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    orders, payments = LibrdkafkaLog("orders"), LibrdkafkaLog("payments")

    for log in (orders, payments):
        log.log(logging.ERROR, FMT, *connect_failed(9092))
        log.log(logging.ERROR, FMT, "ERROR", "rdkafka#producer-1", "1/1 brokers are down")
        log.log(logging.ERROR, FMT, "ERROR", "rdkafka#producer-1", "3/3 brokers are down")

    assert len(records(caplog, logging.ERROR)) == 4
    assert kind_of("ERROR", "1/1 brokers are down") == kind_of("ERROR", "3/3 brokers are down")
    assert kind_of("FAIL", "x") != kind_of("ERROR", "x")


def test_an_unreachable_cluster_logs_each_kind_once_over_several_cycles(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real client against a closed port, three metadata attempts (three "cycles")."""
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    admin = ClusterAdmin(bootstrap_servers="127.0.0.1:1", request_timeout_ms=1500, name="gone")
    try:
        for _ in range(3):
            with pytest.raises(KafkaUnavailable):
                admin.metadata()
    finally:
        admin.close()

    loud = [r for r in caplog.records if r.name == LOGGER_NAME and r.levelno > logging.DEBUG]
    everything = [r for r in caplog.records if r.name == LOGGER_NAME]
    kinds = {re.sub(r"\d+", "#", r.getMessage()) for r in loud}
    print(f"librdkafka lines: {len(everything)} in total, {len(loud)} above DEBUG")
    assert loud
    assert len(loud) == len(kinds)  # one line per kind
    assert len(everything) > len(loud)  # the others at DEBUG
    assert all(r.getMessage().startswith("cluster gone: ") for r in everything)
