"""Shared pytest plugins: the real Kafka test bed and the Spark session."""

from __future__ import annotations

import os
import sys

import pytest

pytest_plugins = ["tests.fixtures_kafka", "tests.fixtures_spark"]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT] = int(exitstatus)


_EXIT = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process with the run's own status once everything is reported.

    Native threads of the Kafka clients (librdkafka, kafka-python's I/O thread) and the py4j
    gateway can still call into Python while the interpreter finalizes, which aborts the
    process (``PyGILState_Release ... finalizing``, exit 134) after every test passed. The
    result is known and printed here, so the interpreter's finalization is skipped."""
    if _EXIT in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT])
