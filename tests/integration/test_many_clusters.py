"""Hundreds of clusters in one daemon (issue 39): every cluster gets a cycle, and the
process's threads and file descriptors stay bounded by the collection settings, not by the
number of clusters.

The clusters are entries of one config pointing at the same real broker (each with Kafka
clients of its own, as distinct clusters would have); the pipeline is a stand-in engine (no
Spark: what is measured here is the schedule, the collections and the Kafka clients)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.model import CycleResult
from exporter.pipeline.compute import ComputeStats
from exporter.pipeline.rounds import ClusterRun, RoundResult
from testbed.broker import KafkaCluster
from tests.unit.test_pipeline_runner import StandInSession

pytestmark = pytest.mark.kafka

CLUSTERS = 300
WORKERS = 4
KEPT_OPEN = 8
#: Threads of one cluster's open Kafka clients, at most (librdkafka: main, background and a
#: thread per broker and per bootstrap address; kafka-python: its I/O thread), and sockets
#: and pipes they hold; measured at 10 threads and 9 descriptors on one broker.
THREADS_PER_OPEN_CLUSTER = 12
FDS_PER_OPEN_CLUSTER = 12
#: Every cluster gets a cycle within this (it takes ~1 minute on a loaded 2-core machine).
BOUND_S = 600.0


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def instant_round(_spark: Any, runs: Sequence[ClusterRun]) -> RoundResult:
    results = {r.cluster: CycleResult(cluster=r.cluster, computed_at_ms=r.now_ms) for r in runs}
    return RoundResult(results=results, failures={}, stats=ComputeStats())


class Sampler:
    """The process's threads and descriptors, every 0.2 s, the largest kept."""

    def __init__(self) -> None:
        self.threads = threads()
        self.fds = fds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.threads = max(self.threads, threads())
            self.fds = max(self.fds, fds())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)


def test_every_one_of_hundreds_of_clusters_gets_a_cycle_with_threads_and_fds_bounded(
    kafka: KafkaCluster,
) -> None:
    config = parse_config(
        {
            "web": {"listen_address": "127.0.0.1:0"},
            "collection": {"workers": WORKERS, "clients_kept_open": KEPT_OPEN},
            "clusters": [
                {
                    "name": f"fleet-{i:03d}",
                    "bootstrap_servers": kafka.bootstrap_servers,
                    "interval": "1h",
                    "request_timeout": "20s",
                    "topics": {"allow": ["^$"]},  # nothing per partition: the clients are measured
                }
                for i in range(CLUSTERS)
            ],
        },
        env={},
    )
    pipeline = PipelineRunner(
        config.spark, config.pipeline, session=StandInSession(), interval_s=3600.0, round_fn=instant_round
    )
    base_threads, base_fds = threads(), fds()
    daemon = Daemon(config, registry=CollectorRegistry(), pipeline=pipeline)
    names = [c.name for c in config.clusters]
    try:
        with Sampler() as sampled:
            daemon.start()
            deadline = time.monotonic() + BOUND_S
            while True:
                done = [n for n in names if daemon.store.get(n).cycles_complete >= 1]
                if len(done) == len(names):
                    break
                assert time.monotonic() < deadline, f"{len(names) - len(done)} cluster(s) never got a cycle"
                time.sleep(0.5)
            idle_threads, idle_fds = threads(), fds()
    finally:
        daemon.stop()

    # Bounded by the settings, whatever the number of clusters: the collection and stage
    # pools, the clients of the clusters kept open plus those collecting, the HTTP server.
    open_clusters = KEPT_OPEN + WORKERS
    thread_bound = WORKERS * 9 + open_clusters * THREADS_PER_OPEN_CLUSTER + config.web.workers + 10
    fd_bound = open_clusters * FDS_PER_OPEN_CLUSTER + 20
    assert sampled.threads - base_threads <= thread_bound < CLUSTERS
    assert sampled.fds - base_fds <= fd_bound < CLUSTERS
    # Between cycles only the clusters kept open hold clients.
    assert idle_threads - base_threads <= WORKERS * 9 + KEPT_OPEN * THREADS_PER_OPEN_CLUSTER + 10
    assert idle_fds - base_fds <= KEPT_OPEN * FDS_PER_OPEN_CLUSTER + 20
