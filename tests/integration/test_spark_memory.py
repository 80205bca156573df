"""The embedded driver's execution memory against cycles that run at once: several clusters
in one process share one Spark session, and a cycle's plan is one task holding every hash
table of its joins and aggregations (no broker; the shared local session, 512m)."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import SparkSession

from exporter.pipeline.compute import compute
from exporter.pipeline.session import LOCAL_DEFAULTS
from tests.integration.spark_connect_cycles import RICH_GROUPS, run_cycles

pytestmark = pytest.mark.spark

CLUSTERS = 3


def test_three_clusters_cycles_with_consumer_groups_run_at_once_in_the_512m_driver(
    spark: SparkSession,
) -> None:
    """With Spark's default page (4 MiB in this driver) each of these cycles took ~50 MiB of
    execution memory, and three at once failed with UNABLE_TO_ACQUIRE_MEMORY in every run;
    with 1 MiB pages (LOCAL_DEFAULTS) they fit."""
    assert spark.conf.get("spark.buffer.pageSize") == LOCAL_DEFAULTS["spark.buffer.pageSize"]
    failures: list[BaseException] = []
    results: list[int] = []

    def cluster() -> None:
        try:
            done = run_cycles(
                lambda snap, settings, previous, now_ms: compute(
                    spark, snap, settings, previous.memory if previous else None, now_ms, groups=RICH_GROUPS
                )
            )
            results.append(len(done))
        except BaseException as e:  # reported below, with the others'
            failures.append(e)

    threads = [threading.Thread(target=cluster, name=f"cluster-{i}") for i in range(CLUSTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a cluster's cycles did not finish in 300 s"
    assert failures == [], "\n\n".join(str(f)[:1500] for f in failures)
    assert len(results) == CLUSTERS
