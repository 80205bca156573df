"""The exporter's own per-cluster state: up, the last success, the snapshot's age, the
configured interval, each stage's duration, whether every transactional id is visible, and
the cluster's finalized transaction version."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalogue as c
from exporter.metrics.scrape import Scrape


def render(scrape: Scrape) -> Iterator[Metric]:
    up = scrape.metric(c.EXPORTER_UP)
    last = scrape.metric(c.EXPORTER_LAST_SUCCESS_TIMESTAMP)
    age = scrape.metric(c.EXPORTER_SNAPSHOT_AGE)
    interval = scrape.metric(c.EXPORTER_COLLECTION_INTERVAL)
    stage = scrape.metric(c.EXPORTER_STAGE_DURATION)
    visible = scrape.metric(c.EXPORTER_TRANSACTIONAL_IDS_VISIBLE)
    version = scrape.metric(c.CLUSTER_TRANSACTION_VERSION)
    for s in scrape.states:
        if s.result is not None and s.result.transactional_ids_visible is not None:
            visible.add_metric([s.cluster], 1.0 if s.result.transactional_ids_visible else 0.0)
        if s.result is not None and s.result.transaction_version is not None:
            version.add_metric([s.cluster], s.result.transaction_version)
        up.add_metric([s.cluster], 1.0 if s.up else 0.0)
        if s.last_success_at_ms:
            last.add_metric([s.cluster], s.last_success_at_ms / 1000)
        if s.snapshot_taken_at_ms:
            age.add_metric([s.cluster], max(0.0, scrape.now - s.snapshot_taken_at_ms / 1000))
        if s.cluster in scrape.intervals_ms:
            interval.add_metric([s.cluster], scrape.intervals_ms[s.cluster] / 1000)
        for name, seconds in s.stage_seconds:
            stage.add_metric([s.cluster, name], seconds)
    yield from (up, last, age, interval, stage, visible, version)
