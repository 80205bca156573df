"""What a family's renderer (``exporter/metrics/families/<family>.py``) gets at each scrape:
every cluster's latest state, read once, and the families to fill in, made from their
catalogue entries (:meth:`Scrape.metric`: name, help, labels)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.metrics import catalogue
from exporter.metrics.state import ClusterState
from exporter.model import CycleResult, PipelineSettings


@dataclass(frozen=True)
class Scrape:
    states: Sequence[ClusterState]
    settings: PipelineSettings
    #: Unix time of the scrape.
    now: float
    cluster_label: str = catalogue.DEFAULT_CLUSTER_LABEL
    #: Each cluster's collection interval (config), for the staleness alert's threshold.
    intervals_ms: Mapping[str, int] = field(default_factory=dict)

    def results(self) -> Iterator[tuple[ClusterState, CycleResult]]:
        """The clusters with a result, each with it."""
        for s in self.states:
            if s.result is not None:
                yield s, s.result

    def metric(self, name: str) -> GaugeMetricFamily | CounterMetricFamily:
        """An empty family for the catalogue's ``name``, its labels in the catalogue's order."""
        return catalogue.family(name).metric(self.cluster_label)
