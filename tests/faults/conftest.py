"""Fixtures of the fault suite: Daemons on the test bed's clusters, stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.config import Config, parse_config
from exporter.daemon import Daemon, PipelineRunner

#: The interval every fault test's daemon uses, and its request timeout.
INTERVAL = "5s"
INTERVAL_S = 5.0
REQUEST_TIMEOUT = "2s"

DaemonFactory = Callable[..., Daemon]


def fault_config(clusters: list[Mapping[str, Any]], *, env: Mapping[str, str] | None = None,
                 **top: Any) -> Config:  # fmt: skip
    raw: dict[str, Any] = {
        "web": {"listen_address": "127.0.0.1:0"},
        "pipeline": {"lso_lag_series": "all"},
        "clusters": [{"interval": INTERVAL, "request_timeout": REQUEST_TIMEOUT, **c} for c in clusters],
        **top,
    }
    return parse_config(raw, env=dict(env or {}))


@pytest.fixture
def fault_daemon(spark: SparkSession) -> Iterator[DaemonFactory]:
    """``fault_daemon(bootstrap, topics=[...])`` or ``fault_daemon(clusters=[{...}, ...])``."""
    made: list[Daemon] = []

    def factory(bootstrap: str | None = None, *, topics: list[str] | None = None,
                clusters: list[Mapping[str, Any]] | None = None,
                env: Mapping[str, str] | None = None, **top: Any) -> Daemon:  # fmt: skip
        if clusters is None:
            assert bootstrap is not None
            cluster: dict[str, Any] = {"name": "fault", "bootstrap_servers": bootstrap}
            if topics:
                cluster["topics"] = {"allow": topics}
            clusters = [cluster]
        config = fault_config(clusters, env=env, **top)
        daemon = Daemon(config, registry=CollectorRegistry(),
                        pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))  # fmt: skip
        made.append(daemon)
        return daemon

    yield factory
    for daemon in made:
        daemon.stop()
