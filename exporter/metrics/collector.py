"""Renders the latest cluster states as Prometheus metrics. Never calls Kafka.

Metric names, labels and the Kafka metric or API each one stands for are listed in
docs/metrics.md; every family is declared in ``catalogue.py`` and rendered by its module
(``exporter/metrics/families/<family>.py``, found by module). Series for a cluster are
built fresh at every scrape from its immutable :class:`ClusterState`; ``describe()`` returns
nothing so that registering the collector does not trigger a collection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.metrics import catalogue as c
from exporter.metrics.catalogue import DEFAULT_CLUSTER_LABEL
from exporter.metrics.families import renderers
from exporter.metrics.scrape import Scrape
from exporter.metrics.state import StateStore
from exporter.model import PipelineSettings
from exporter.pipeline.families import family_names

CYCLE_RESULTS = ("complete", "partial", "failed")
CYCLE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

#: Every (action, result) of the remediation counter, pre-created at zero per cluster.
REMEDIATION_LABELS = tuple(("abort", r) for r in ("aborted", "dry_run", "refused", "failed"))

_INSTRUMENTS: dict[str, Callable[..., Any]] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


def instrument(name: str, registry: CollectorRegistry, cluster_label: str, **options: Any) -> Any:
    """The prometheus_client instrument of a catalogued family: its kind, name, help and
    labels from the catalogue (``options``: a histogram's buckets)."""
    family = c.family(name)
    make = _INSTRUMENTS[family.kind]
    return make(family.name, family.help, family.label_list(cluster_label), registry=registry, **options)


class ExporterMetrics:
    """The exporter's own counters and histograms, updated by the cycle jobs."""

    def __init__(
        self, registry: CollectorRegistry, clusters: Iterable[str], cluster_label: str = DEFAULT_CLUSTER_LABEL
    ) -> None:
        self.cycle_duration: Histogram = instrument(
            c.EXPORTER_CYCLE_DURATION, registry, cluster_label, buckets=CYCLE_BUCKETS
        )
        self.cycles: Counter = instrument(c.EXPORTER_CYCLES, registry, cluster_label)
        self.request_errors: Counter = instrument(c.EXPORTER_REQUEST_ERRORS, registry, cluster_label)
        self.cycles_skipped: Counter = instrument(c.EXPORTER_CYCLES_SKIPPED, registry, cluster_label)
        self.family_errors: Counter = instrument(c.EXPORTER_PIPELINE_FAMILY_ERRORS, registry, cluster_label)
        self.remediations: Counter = instrument(c.REMEDIATIONS, registry, cluster_label)
        self.add_clusters(clusters)
        build: Gauge = instrument(c.EXPORTER_BUILD_INFO, registry, cluster_label)
        build.labels(__version__).set(1)

    def add_clusters(self, clusters: Iterable[str]) -> None:
        """Every cluster's series exist at 0 before its first cycle."""
        for cluster in clusters:
            self.cycle_duration.labels(cluster)
            self.cycles_skipped.labels(cluster)
            for result in CYCLE_RESULTS:
                self.cycles.labels(cluster, result)
            for family in family_names():
                self.family_errors.labels(cluster, family)
            for action, result in REMEDIATION_LABELS:
                self.remediations.labels(cluster, action, result)


class TransactionHealthCollector(Collector):
    """Kafka-derived transaction-health metrics and the per-cluster exporter gauges: every
    family's renderer, on the cluster states read once per scrape.

    Example output::

        # HELP kafka_txn_partitions_with_late_transactions ... PartitionsWithLateTransactionsCount
        # TYPE kafka_txn_partitions_with_late_transactions gauge
        kafka_txn_partitions_with_late_transactions{broker="1",kafka_cluster="prod"} 0.0
    """

    def __init__(
        self,
        store: StateStore,
        settings: PipelineSettings,
        clock: Callable[[], float] = time.time,
        cluster_label: str = DEFAULT_CLUSTER_LABEL,
        intervals_ms: Mapping[str, int] | None = None,
    ) -> None:
        self._label = cluster_label
        self._store = store
        self._settings = settings
        self._clock = clock
        #: Each cluster's collection interval (config), for the staleness alert's threshold.
        self._intervals_ms = dict(intervals_ms or {})

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        scrape = Scrape(self._store.all(), self._settings, self._clock(), self._label, self._intervals_ms)
        for render in renderers():
            yield from render(scrape)
