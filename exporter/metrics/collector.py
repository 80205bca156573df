"""Renders the latest cluster states as Prometheus metrics. Never calls Kafka.

Metric names, labels and the Kafka metric or API each one stands for are listed in
docs/metrics.md. Series for a cluster are built fresh at every scrape from its immutable
:class:`ClusterState`; ``describe()`` returns nothing so that registering the collector
does not trigger a collection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.metrics.families import renderers
from exporter.metrics.groups import render_group_families
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import COORDINATOR_STATES, CycleResult, Finding, PipelineSettings, TxnClass
from exporter.pipeline.families import family_names

PREFIX = "kafka_txn"
DEFAULT_CLUSTER_LABEL = "kafka_cluster"
CYCLE_RESULTS = ("complete", "partial", "failed")
CYCLE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


#: Every (action, result) of the remediation counter, pre-created at zero per cluster.
REMEDIATION_LABELS = tuple(("abort", r) for r in ("aborted", "dry_run", "refused", "failed"))


class ExporterMetrics:
    """The exporter's own counters and histograms, updated by the cycle jobs."""

    def __init__(
        self, registry: CollectorRegistry, clusters: Iterable[str], cluster_label: str = DEFAULT_CLUSTER_LABEL
    ) -> None:
        self.cycle_duration = Histogram(
            f"{PREFIX}_exporter_cycle_duration_seconds",
            "Duration of one collection cycle: Kafka requests plus the Spark pipeline.",
            [cluster_label],
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.cycles = Counter(
            f"{PREFIX}_exporter_cycles",
            "Collection cycles by result: complete, partial (some requests failed) or failed "
            "(no metadata from the cluster, or the pipeline failed).",
            [cluster_label, "result"],
            registry=registry,
        )
        self.request_errors = Counter(
            f"{PREFIX}_exporter_request_errors",
            "Kafka request errors by API (DescribeProducers, ListTransactions, ...) and Kafka error name.",
            [cluster_label, "api", "error"],
            registry=registry,
        )
        self.family_errors = Counter(
            f"{PREFIX}_exporter_pipeline_family_errors",
            "Cycles in which one metric family of the pipeline failed (its series are absent for "
            "that cycle and what it remembers is kept); the cluster's other families were published.",
            [cluster_label, "family"],
            registry=registry,
        )
        self.cycles_skipped = Counter(
            f"{PREFIX}_exporter_cycles_skipped",
            "Scheduled cycles that did not run because the previous cycle of the cluster was "
            "still running, or whose snapshot was not ready when its round was computed (it "
            "joins a later round). A collection is cut at its deadline, so this stays at 0 "
            "unless the interval is shorter than a cycle can be or the process has more "
            "clusters than it can cycle.",
            [cluster_label],
            registry=registry,
        )
        self.remediations = Counter(
            f"{PREFIX}_remediations",
            "Actions of the daemon's auto-remediation (config remediation:) by action (abort: "
            "WriteTxnMarkers) and result: aborted, dry_run (reported, nothing written), "
            "refused (the re-validation right before the write found it owned, changed or not "
            "provably hanging) or failed (a Kafka error).",
            [cluster_label, "action", "result"],
            registry=registry,
        )
        self.add_clusters(clusters)
        build = Gauge(
            f"{PREFIX}_exporter_build_info", "Version of kafka-txn-exporter.", ["version"], registry=registry
        )
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
    """Kafka-derived transaction-health metrics and the per-cluster exporter gauges.

    Example output::

        # HELP kafka_txn_partitions_with_late_transactions ... PartitionsWithLateTransactionsCount
        # TYPE kafka_txn_partitions_with_late_transactions gauge
        kafka_txn_partitions_with_late_transactions{broker="1",cluster="prod"} 0.0
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
        states = self._store.all()
        yield from self._exporter_families(states)
        yield from self._partition_families(states)
        yield from self._broker_families(states)
        yield from self._coordinator_families(states)
        yield from self._finding_families(states)
        results = [(s.cluster, r) for s, r in _results(states)]
        for render in renderers():
            yield from render(results, self._label)
        groups = [(s.cluster, r.groups) for s, r in _results(states) if r.groups is not None]
        if groups:
            yield from render_group_families(groups, cluster_label=self._label)

    # -- families ------------------------------------------------------------------------

    def _exporter_families(self, states: list[ClusterState]) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            f"{PREFIX}_exporter_up",
            "1 when the last collection cycle read every part of the "
            "cluster, 0 when any request failed or the cluster was unreachable.",
            labels=[self._label],
        )
        last = GaugeMetricFamily(
            f"{PREFIX}_exporter_last_success_timestamp_seconds",
            "Unix time of the last complete collection cycle.",
            labels=[self._label],
        )
        age = GaugeMetricFamily(
            f"{PREFIX}_exporter_snapshot_age_seconds",
            "Age of the snapshot the Kafka-derived metrics come from.",
            labels=[self._label],
        )
        interval = GaugeMetricFamily(
            f"{PREFIX}_exporter_collection_interval_seconds",
            "The cluster's configured collection interval (a snapshot is expected this often).",
            labels=[self._label],
        )
        stage = GaugeMetricFamily(
            f"{PREFIX}_exporter_stage_duration_seconds",
            "Duration of each stage of the last cycle (metadata, configs, "
            "offsets, producers, list_transactions, describe_transactions, "
            "batch_timestamps, pipeline).",
            labels=[self._label, "stage"],
        )
        visible = GaugeMetricFamily(
            f"{PREFIX}_exporter_transactional_ids_visible",
            "1 when the exporter's principal may Describe every transactional id, 0 when "
            "ListTransactions may silently leave some out (a blind spot: open transactions "
            "whose owner is not listed are then classed unknown, never hanging). From a "
            "DescribeTransactions probe of an id nobody uses; absent when the probe failed.",
            labels=[self._label],
        )
        version = GaugeMetricFamily(
            f"{PREFIX}_cluster_transaction_version",
            "The finalized transaction.version feature level of the cluster (KIP-890: 2 = "
            "transactions v2, server-side defense); absent when unknown.",
            labels=[self._label],
        )
        now = self._clock()
        for s in states:
            if s.result is not None and s.result.transactional_ids_visible is not None:
                visible.add_metric([s.cluster], 1.0 if s.result.transactional_ids_visible else 0.0)
            if s.result is not None and s.result.transaction_version is not None:
                version.add_metric([s.cluster], s.result.transaction_version)
            up.add_metric([s.cluster], 1.0 if s.up else 0.0)
            if s.last_success_at_ms:
                last.add_metric([s.cluster], s.last_success_at_ms / 1000)
            if s.snapshot_taken_at_ms:
                age.add_metric([s.cluster], max(0.0, now - s.snapshot_taken_at_ms / 1000))
            if s.cluster in self._intervals_ms:
                interval.add_metric([s.cluster], self._intervals_ms[s.cluster] / 1000)
            for name, seconds in s.stage_seconds:
                stage.add_metric([s.cluster, name], seconds)
        yield from (up, last, age, interval, stage, visible, version)

    def _partition_families(self, states: list[ClusterState]) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            f"{PREFIX}_partition_max_active_transaction_duration_seconds",
            "Age of the oldest open transaction on the partition, from its start "
            "(MaxActiveTransactionDuration, KIP-664; DescribeProducers and DescribeTransactions).",
            labels=[self._label, "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}_partition_last_stable_offset_lag",
            "High watermark minus last stable offset (Kafka's LastStableOffsetLag partition "
            "gauge; ListOffsets READ_UNCOMMITTED and READ_COMMITTED).",
            labels=[self._label, "topic", "partition"],
        )
        mode = self._settings.lso_lag_series
        for s, r in _results(states):
            for p in r.partitions:
                labels = [s.cluster, p.topic, str(p.partition)]
                if p.max_active_transaction_duration_ms is not None:
                    duration.add_metric(labels, p.max_active_transaction_duration_ms / 1000)
                if p.lso_lag is None:
                    continue
                if (
                    mode == "all"
                    or p.lso_lag > 0
                    or (mode == "open" and p.max_active_transaction_duration_ms is not None)
                ):
                    lag.add_metric(labels, float(p.lso_lag))
        yield from (duration, lag)

    def _broker_families(self, states: list[ClusterState]) -> Iterator[Metric]:
        late = GaugeMetricFamily(
            f"{PREFIX}_partitions_with_late_transactions",
            "Partitions led by the broker with an open transaction older than "
            "transaction.max.timeout.ms plus the padding (Kafka's "
            "PartitionsWithLateTransactionsCount, measured from the transaction start).",
            labels=[self._label, "broker"],
        )
        max_lag = GaugeMetricFamily(
            f"{PREFIX}_max_last_stable_offset_lag",
            "Largest LastStableOffsetLag over the partitions the broker leads "
            "(MaxLastStableOffsetLag, KIP-939).",
            labels=[self._label, "broker"],
        )
        hanging = GaugeMetricFamily(
            f"{PREFIX}_hanging_transactions",
            "Confirmed hanging transactions on partitions the broker leads: open on the "
            "partition, unknown to its coordinator (KIP-664; DescribeProducers, "
            "ListTransactions, DescribeTransactions).",
            labels=[self._label, "broker"],
        )
        verification = GaugeMetricFamily(
            f"{PREFIX}_broker_transaction_verification_enabled",
            "1 when the broker verifies transactional appends with the coordinator "
            "(transaction.partition.verification.enable, KIP-890; DescribeConfigs). Absent when "
            "the broker's configs could not be read.",
            labels=[self._label, "broker"],
        )
        two_pc = GaugeMetricFamily(
            f"{PREFIX}_broker_two_phase_commit_enabled",
            "1 when the broker accepts two-phase-commit transactions "
            "(transaction.two.phase.commit.enable, KIP-939; DescribeConfigs). Absent when the "
            "broker's configs could not be read.",
            labels=[self._label, "broker"],
        )
        max_timeout = GaugeMetricFamily(
            f"{PREFIX}_broker_transaction_max_timeout_seconds",
            "The broker's transaction.max.timeout.ms (DescribeConfigs).",
            labels=[self._label, "broker"],
        )
        for s, r in _results(states):
            for b in r.brokers:
                labels = [s.cluster, str(b.broker_id)]
                late.add_metric(labels, b.partitions_with_late_transactions)
                max_lag.add_metric(labels, b.max_last_stable_offset_lag)
                hanging.add_metric(labels, b.hanging_transactions)
                if b.verification_enabled is not None:  # absent, not a guess, when unread
                    verification.add_metric(labels, 1.0 if b.verification_enabled else 0.0)
                if b.two_phase_commit_enabled is not None:
                    two_pc.add_metric(labels, 1.0 if b.two_phase_commit_enabled else 0.0)
                max_timeout.add_metric(labels, b.transaction_max_timeout_ms / 1000)
        yield from (late, max_lag, hanging, verification, two_pc, max_timeout)

    def _coordinator_families(self, states: list[ClusterState]) -> Iterator[Metric]:
        open_time = GaugeMetricFamily(
            f"{PREFIX}_active_transaction_open_time_max_seconds",
            "Age of the oldest open transaction the broker coordinates, from its "
            "TransactionStartTimeMs (ActiveTransactionOpenTimeMaxMs, KIP-939; "
            "ListTransactions, DescribeTransactions).",
            labels=[self._label, "coordinator"],
        )
        two_pc = GaugeMetricFamily(
            f"{PREFIX}_two_phase_commit_transaction_open_time_max_seconds",
            "Age of the oldest open two-phase-commit transaction (TransactionTimeoutMs = "
            "2147483647, KIP-939) the broker coordinates.",
            labels=[self._label, "coordinator"],
        )
        prepare_time = GaugeMetricFamily(
            f"{PREFIX}_coordinator_prepare_time_max_seconds",
            "How long the transactional id longest in PrepareCommit or PrepareAbort (markers "
            "being written) has been listed so by the broker, counted from the first cycle "
            "that saw it there (ListTransactions; 0 when none).",
            labels=[self._label, "coordinator"],
        )
        by_state = GaugeMetricFamily(
            f"{PREFIX}_coordinator_transactions",
            "Transactional ids the broker coordinates, by coordinator state (ListTransactions).",
            labels=[self._label, "coordinator", "state"],
        )
        by_class = GaugeMetricFamily(
            f"{PREFIX}_open_transactions",
            "Open partition-level transactions by class: ongoing, late, hanging, "
            "suspected_hanging, two_phase_commit, unknown (DescribeProducers, classified "
            "against the coordinators).",
            labels=[self._label, "class"],
        )
        by_application = GaugeMetricFamily(
            f"{PREFIX}_open_transactions_by_application",
            "Open partition-level transactions by application (attributed from the "
            "transactional id by the attribution rules; unknown when no rule matches) and class "
            "(DescribeProducers, classified against the coordinators). With or without "
            "consumer groups.",
            labels=[self._label, "application", "class"],
        )
        aborts = CounterMetricFamily(
            f"{PREFIX}_coordinator_timeout_aborts",
            "Transactions the coordinator aborted on timeout (KIP-588), counted since the "
            "exporter started: a transaction seen Ongoing, next seen with a bumped producer "
            "epoch after its deadline (DescribeTransactions; see docs/metrics.md).",
            labels=[self._label, "coordinator"],
        )
        unknown = GaugeMetricFamily(
            f"{PREFIX}_open_transactions_unknown",
            "Open partition-level transactions classed unknown, by why the evidence is missing: "
            "coordinator_unreadable, listing_incomplete, owner_may_be_invisible (the principal "
            "may not Describe every transactional id), unlisted_within_timeout (listed by no "
            "coordinator, but not yet older than transaction.max.timeout.ms plus padding), "
            "unverified (see docs/metrics.md).",
            labels=[self._label, "reason"],
        )
        for s, r in _results(states):
            for total in r.memory.timeout_aborts_total:
                aborts.add_metric([s.cluster, str(total.coordinator_id)], total.count)
            for c in r.coordinators:
                labels = [s.cluster, str(c.coordinator_id)]
                open_time.add_metric(labels, c.active_transaction_open_time_max_ms / 1000)
                two_pc.add_metric(labels, c.two_phase_commit_open_time_max_ms / 1000)
                prepare_time.add_metric(labels, c.prepare_time_max_ms / 1000)
                counts = dict(c.transactions_by_state)
                for state in COORDINATOR_STATES:
                    by_state.add_metric([*labels, state], counts.get(state, 0))
            for reason, count in r.open_transactions_unknown:
                unknown.add_metric([s.cluster, reason.value], count)
            counts_by_class = dict(r.open_transactions_by_class)
            for txn_class in TxnClass:
                by_class.add_metric([s.cluster, txn_class.value], counts_by_class.get(txn_class, 0))
            for a in r.open_transactions_by_application:
                by_application.add_metric([s.cluster, a.application, a.txn_class.value], a.count)
        yield from (open_time, two_pc, prepare_time, by_state, by_class, by_application, unknown, aborts)

    def _finding_families(self, states: list[ClusterState]) -> Iterator[Metric]:
        hanging = GaugeMetricFamily(
            f"{PREFIX}_hanging_transaction_info",
            "One series per confirmed hanging transaction (KIP-664): the partition, the "
            "producer, the start offset to abort from, and the transactional id where known.",
            labels=[
                self._label,
                "broker",
                "topic",
                "partition",
                "producer_id",
                "producer_epoch",
                "coordinator_epoch",
                "start_offset",
                "transactional_id",
                "reason",
                "start_time_source",
            ],
        )
        late = GaugeMetricFamily(
            f"{PREFIX}_late_transaction_info",
            "One series per open transaction older than transaction.max.timeout.ms plus the "
            "padding, with its class (PartitionsWithLateTransactionsCount, per transaction).",
            labels=[
                self._label,
                "broker",
                "topic",
                "partition",
                "producer_id",
                "producer_epoch",
                "start_offset",
                "transactional_id",
                "class",
                "start_time_source",
            ],
        )
        for s, r in _results(states):
            for f in r.findings:
                if f.hanging:
                    hanging.add_metric(
                        [
                            *_finding_labels(s.cluster, f),
                            str(f.coordinator_epoch),
                            str(f.start_offset),
                            f.transactional_id or "",
                            f.hanging_reason.value if f.hanging_reason else "",
                            f.start_time_source.value,
                        ],
                        1.0,
                    )
                if f.late:
                    late.add_metric(
                        [
                            *_finding_labels(s.cluster, f),
                            str(f.start_offset),
                            f.transactional_id or "",
                            f.txn_class.value,
                            f.start_time_source.value,
                        ],
                        1.0,
                    )
        yield from (hanging, late)


def _results(states: list[ClusterState]) -> Iterator[tuple[ClusterState, CycleResult]]:
    for s in states:
        if s.result is not None:
            yield s, s.result


def _finding_labels(cluster: str, f: Finding) -> list[str]:
    return [cluster, str(f.broker_id), f.topic, str(f.partition), str(f.producer_id), str(f.producer_epoch)]
