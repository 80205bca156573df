"""Every metric family the exporter serves, declared once: name, kind, help and labels.

The renderers (``exporter/metrics/families/<family>.py``), the daemon's instruments
(``collector.ExporterMetrics``), the history writer's metrics, the dashboards in
``dashboards/`` and the alert rules in ``alerts/`` all take their names from here; no name
is spelled anywhere else. ``tests/unit/test_catalogue.py`` ties this list to a rendering of the
collector and ``tests/unit/test_metric_names.py`` to the generated rules and dashboards.

``labels`` never lists the Kafka cluster label: its name is configurable (top-level config
key ``cluster_label``, default ``kafka_cluster``) and added by :meth:`Family.label_names`
for every family with ``per_cluster`` set. Series Prometheus adds at scrape time (``job``,
``instance``, ``namespace``, ...) are not listed either.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

#: The default name of the label that carries the Kafka cluster (``Config.cluster_label``).
DEFAULT_CLUSTER_LABEL = "kafka_cluster"

#: Runbooks live in the repository; an alert's runbook is RUNBOOK_BASE_URL + name + ".md".
#: The alert rules' ``runbook_url`` base is overridable (alerts/thresholds.example.yml,
#: the chart's ``rules.runbookUrl``); dashboards link here.
RUNBOOK_BASE_URL = "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbooks/"

Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True)
class Family:
    """One metric family: its name as Prometheus stores it (counters with ``_total``), its
    kind, its help text and its labels in the order they are served (the cluster label
    first, when ``per_cluster``)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    per_cluster: bool = True

    def label_list(self, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> list[str]:
        """The label names in the order they are served."""
        return [cluster_label, *self.labels] if self.per_cluster else list(self.labels)

    def label_names(self, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> frozenset[str]:
        return frozenset(self.label_list(cluster_label))

    def series(self, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> dict[str, frozenset[str]]:
        """Series name -> label names (a histogram gives ``_bucket``, ``_sum``, ``_count``)."""
        labels = self.label_names(cluster_label)
        if self.kind == "histogram":
            return {
                f"{self.name}_bucket": labels | {"le"},
                f"{self.name}_sum": labels,
                f"{self.name}_count": labels,
            }
        return {self.name: labels}

    def metric(self, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> GaugeMetricFamily | CounterMetricFamily:
        """An empty metric family to add this scrape's samples to (a gauge or a counter)."""
        labels = self.label_list(cluster_label)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=labels)
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=labels)
        raise ValueError(f"{self.name}: a {self.kind} is an instrument, not rendered at scrape time")


# -- Kafka-derived ---------------------------------------------------------------------------
PARTITION_MAX_ACTIVE_TRANSACTION_DURATION = "kafka_txn_partition_max_active_transaction_duration_seconds"
PARTITION_LAST_STABLE_OFFSET_LAG = "kafka_txn_partition_last_stable_offset_lag"
TOPIC_MAX_LAST_STABLE_OFFSET_LAG = "kafka_txn_topic_max_last_stable_offset_lag"
TOPIC_MAX_ACTIVE_TRANSACTION_DURATION = "kafka_txn_topic_max_active_transaction_duration_seconds"
TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS = "kafka_txn_topic_partitions_with_open_transactions"
TOPIC_MAX_LAST_STABLE_OFFSET_LAG = "kafka_txn_topic_max_last_stable_offset_lag"
TOPIC_MAX_ACTIVE_TRANSACTION_DURATION = "kafka_txn_topic_max_active_transaction_duration_seconds"
TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS = "kafka_txn_topic_partitions_with_open_transactions"
PARTITIONS_WITH_LATE_TRANSACTIONS = "kafka_txn_partitions_with_late_transactions"
MAX_LAST_STABLE_OFFSET_LAG = "kafka_txn_max_last_stable_offset_lag"
HANGING_TRANSACTIONS = "kafka_txn_hanging_transactions"
BROKER_TRANSACTION_VERIFICATION_ENABLED = "kafka_txn_broker_transaction_verification_enabled"
BROKER_TRANSACTION_MAX_TIMEOUT = "kafka_txn_broker_transaction_max_timeout_seconds"
BROKER_TWO_PHASE_COMMIT_ENABLED = "kafka_txn_broker_two_phase_commit_enabled"
CLUSTER_TRANSACTION_VERSION = "kafka_txn_cluster_transaction_version"
ACTIVE_TRANSACTION_OPEN_TIME_MAX = "kafka_txn_active_transaction_open_time_max_seconds"
TWO_PHASE_COMMIT_OPEN_TIME_MAX = "kafka_txn_two_phase_commit_transaction_open_time_max_seconds"
COORDINATOR_PREPARE_TIME_MAX = "kafka_txn_coordinator_prepare_time_max_seconds"
COORDINATOR_TRANSACTIONS = "kafka_txn_coordinator_transactions"
COORDINATOR_TIMEOUT_ABORTS = "kafka_txn_coordinator_timeout_aborts_total"
OPEN_TRANSACTIONS = "kafka_txn_open_transactions"
OPEN_TRANSACTIONS_UNKNOWN = "kafka_txn_open_transactions_unknown"
OPEN_TRANSACTIONS_BY_APPLICATION = "kafka_txn_open_transactions_by_application"
HANGING_TRANSACTION_INFO = "kafka_txn_hanging_transaction_info"
LATE_TRANSACTION_INFO = "kafka_txn_late_transaction_info"
CONSUMER_GROUP_LAG_CONSUMABLE = "kafka_txn_consumer_group_lag_consumable"
CONSUMER_GROUP_LAG_CONSUMABLE_UPPER_BOUND = "kafka_txn_consumer_group_lag_consumable_upper_bound_partitions"
CONSUMER_GROUP_LAG_BLOCKED = "kafka_txn_consumer_group_lag_blocked"
CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE = "kafka_txn_consumer_group_partition_lag_consumable"
CONSUMER_GROUP_PARTITION_LAG_BLOCKED = "kafka_txn_consumer_group_partition_lag_blocked"
CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE_UPPER_BOUND = (
    "kafka_txn_consumer_group_partition_lag_consumable_upper_bound"
)
CONSUMER_GROUP_BLOCKED_INFO = "kafka_txn_consumer_group_blocked_info"
CONSUMER_GROUP_BLOCKED_SECONDS = "kafka_txn_consumer_group_blocked_seconds"
CONSUMER_GROUP_BLOCKED_PARTITIONS = "kafka_txn_consumer_group_blocked_partitions"
CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS = "kafka_txn_consumer_group_unstable_offset_commits"

# -- self-monitoring -------------------------------------------------------------------------
EXPORTER_UP = "kafka_txn_exporter_up"
EXPORTER_LAST_SUCCESS_TIMESTAMP = "kafka_txn_exporter_last_success_timestamp_seconds"
EXPORTER_SNAPSHOT_AGE = "kafka_txn_exporter_snapshot_age_seconds"
EXPORTER_COLLECTION_INTERVAL = "kafka_txn_exporter_collection_interval_seconds"
EXPORTER_CYCLE_DURATION = "kafka_txn_exporter_cycle_duration_seconds"
EXPORTER_STAGE_DURATION = "kafka_txn_exporter_stage_duration_seconds"
EXPORTER_CYCLES = "kafka_txn_exporter_cycles_total"
EXPORTER_CYCLES_SKIPPED = "kafka_txn_exporter_cycles_skipped_total"
EXPORTER_REQUEST_ERRORS = "kafka_txn_exporter_request_errors_total"
EXPORTER_PIPELINE_FAMILY_ERRORS = "kafka_txn_exporter_pipeline_family_errors_total"
EXPORTER_PIPELINE_FAMILY_ERRORS = "kafka_txn_exporter_pipeline_family_errors_total"
EXPORTER_BUILD_INFO = "kafka_txn_exporter_build_info"
EXPORTER_TRANSACTIONAL_IDS_VISIBLE = "kafka_txn_exporter_transactional_ids_visible"
REMEDIATIONS = "kafka_txn_remediations_total"

# -- the history writer (process-level: one writer for every cluster) ------------------------
HISTORY_CYCLES_WRITTEN = "kafka_txn_exporter_history_cycles_written_total"
HISTORY_ROWS_WRITTEN = "kafka_txn_exporter_history_rows_written_total"
HISTORY_CYCLES_DROPPED = "kafka_txn_exporter_history_cycles_dropped_total"
HISTORY_WRITE_FAILURES = "kafka_txn_exporter_history_write_failures_total"
HISTORY_MAINTENANCE_FAILURES = "kafka_txn_exporter_history_maintenance_failures_total"
HISTORY_BUFFERED_CYCLES = "kafka_txn_exporter_history_buffered_cycles"
HISTORY_LAST_WRITE_DURATION = "kafka_txn_exporter_history_last_write_duration_seconds"

#: Series every Prometheus adds itself (the exporter-down alert reads ``up``); the alerts
#: reference ``ALERTS`` nowhere, the dashboards' annotations do.
PROMETHEUS_SERIES: dict[str, frozenset[str]] = {
    "up": frozenset({"job", "instance"}),
    "ALERTS": frozenset({"alertname", "alertstate", "severity"}),
}

CONSUMABLE_HELP = (
    "Records a read_committed consumer group can read now on the topic, summed over "
    "partitions: counted in the batches between the committed offset and the last stable "
    "offset (Fetch READ_COMMITTED; transaction markers and aborted records do not count), "
    "else LSO - committed (OffsetFetch, ListOffsets READ_COMMITTED), an upper bound: see "
    "_upper_bound_partitions."
)
BLOCKED_HELP = (
    "Records a read_committed consumer group can NOT read yet: from the last stable offset (or "
    "the committed offset, when past it) to the high watermark, behind open transactions "
    "(ListOffsets READ_COMMITTED and READ_UNCOMMITTED). A read_uncommitted consumer can read "
    "them."
)

FAMILIES: tuple[Family, ...] = (
    # -- instruments the daemon updates (exporter/metrics/collector.py's ExporterMetrics)
    Family(
        EXPORTER_CYCLE_DURATION,
        "histogram",
        "Duration of one collection cycle: Kafka requests plus the Spark pipeline.",
    ),
    Family(
        EXPORTER_CYCLES,
        "counter",
        "Collection cycles by result: complete, partial (some requests failed) or failed (no metadata from "
        "the cluster, or the pipeline failed).",
        ("result",),
    ),
    Family(
        EXPORTER_CYCLES_SKIPPED,
        "counter",
        "Scheduled cycles that did not run because the previous cycle of the cluster was still running, or "
        "whose snapshot was not ready when its round was computed (it joins a later round). A collection is "
        "cut at its deadline, so this stays at 0 unless the interval is shorter than a cycle can be or the "
        "process has more clusters than it can cycle.",
    ),
    Family(
        EXPORTER_REQUEST_ERRORS,
        "counter",
        "Kafka request errors by API (DescribeProducers, ListTransactions, ...) and Kafka error name.",
        ("api", "error"),
    ),
    Family(
        EXPORTER_PIPELINE_FAMILY_ERRORS,
        "counter",
        "Cycles in which one metric family of the pipeline failed (its series are absent for that cycle and "
        "what it remembers is kept); the cluster's other families were published.",
        ("family",),
    ),
    Family(
        EXPORTER_BUILD_INFO,
        "gauge",
        "Version of kafka-txn-exporter.",
        ("version",),
        per_cluster=False,
    ),
    Family(
        REMEDIATIONS,
        "counter",
        "Actions of the daemon's auto-remediation (config remediation:) by action (abort: WriteTxnMarkers) "
        "and result: aborted, dry_run (reported, nothing written), refused (the re-validation right before "
        "the write found it owned, changed or not provably hanging) or failed (a Kafka error).",
        ("action", "result"),
    ),
    # -- the exporter's per-cluster state (exporter/metrics/families/exporter.py)
    Family(
        CLUSTER_TRANSACTION_VERSION,
        "gauge",
        "The finalized transaction.version feature level of the cluster (KIP-890: 2 = transactions v2, "
        "server-side defense); absent when unknown.",
    ),
    Family(
        EXPORTER_UP,
        "gauge",
        "1 when the last collection cycle read every part of the cluster, 0 when any request failed or the "
        "cluster was unreachable.",
    ),
    Family(
        EXPORTER_LAST_SUCCESS_TIMESTAMP,
        "gauge",
        "Unix time of the last complete collection cycle.",
    ),
    Family(
        EXPORTER_SNAPSHOT_AGE,
        "gauge",
        "Age of the snapshot the Kafka-derived metrics come from.",
    ),
    Family(
        EXPORTER_COLLECTION_INTERVAL,
        "gauge",
        "The cluster's configured collection interval (a snapshot is expected this often).",
    ),
    Family(
        EXPORTER_STAGE_DURATION,
        "gauge",
        "Duration of each stage of the last cycle (metadata, configs, offsets, producers, list_transactions,"
        " describe_transactions, batch_timestamps, pipeline).",
        ("stage",),
    ),
    Family(
        EXPORTER_TRANSACTIONAL_IDS_VISIBLE,
        "gauge",
        "1 when the exporter's principal may Describe every transactional id, 0 when ListTransactions may "
        "silently leave some out (a blind spot: open transactions whose owner is not listed are then classed"
        " unknown, never hanging). From a DescribeTransactions probe of an id nobody uses; absent when the "
        "probe failed.",
    ),
    # -- partitions (exporter/metrics/families/partitions.py)
    Family(
        PARTITION_MAX_ACTIVE_TRANSACTION_DURATION,
        "gauge",
        "Age of the oldest open transaction on the partition, from its start (MaxActiveTransactionDuration, "
        "KIP-664; DescribeProducers and DescribeTransactions).",
        ("topic", "partition"),
    ),
    Family(
        PARTITION_LAST_STABLE_OFFSET_LAG,
        "gauge",
        "High watermark minus last stable offset (Kafka's LastStableOffsetLag partition gauge; ListOffsets "
        "READ_UNCOMMITTED and READ_COMMITTED).",
        ("topic", "partition"),
    ),
    # -- topics (exporter/metrics/families/topics.py)
    Family(
        TOPIC_MAX_LAST_STABLE_OFFSET_LAG,
        "gauge",
        "Largest LastStableOffsetLag (high watermark minus last stable offset, ListOffsets) over the topic's "
        "partitions: how far its read_committed consumers are held back.",
        ("topic",),
    ),
    Family(
        TOPIC_MAX_ACTIVE_TRANSACTION_DURATION,
        "gauge",
        "Age of the oldest open transaction on any of the topic's partitions, from its start "
        "(MaxActiveTransactionDuration per topic; absent when none is open).",
        ("topic",),
    ),
    Family(
        TOPIC_PARTITIONS_WITH_OPEN_TRANSACTIONS,
        "gauge",
        "The topic's partitions with at least one open transaction (DescribeProducers).",
        ("topic",),
    ),
    # -- brokers (exporter/metrics/families/brokers.py)
    Family(
        PARTITIONS_WITH_LATE_TRANSACTIONS,
        "gauge",
        "Partitions led by the broker with an open transaction older than transaction.max.timeout.ms plus "
        "the padding (Kafka's PartitionsWithLateTransactionsCount, measured from the transaction start).",
        ("broker",),
    ),
    Family(
        MAX_LAST_STABLE_OFFSET_LAG,
        "gauge",
        "Largest LastStableOffsetLag over the partitions the broker leads (MaxLastStableOffsetLag, KIP-939).",
        ("broker",),
    ),
    Family(
        HANGING_TRANSACTIONS,
        "gauge",
        "Confirmed hanging transactions on partitions the broker leads: open on the partition, unknown to "
        "its coordinator (KIP-664; DescribeProducers, ListTransactions, DescribeTransactions).",
        ("broker",),
    ),
    Family(
        BROKER_TRANSACTION_VERIFICATION_ENABLED,
        "gauge",
        "1 when the broker verifies transactional appends with the coordinator "
        "(transaction.partition.verification.enable, KIP-890; DescribeConfigs). Absent when the broker's "
        "configs could not be read.",
        ("broker",),
    ),
    Family(
        BROKER_TRANSACTION_MAX_TIMEOUT,
        "gauge",
        "The broker's transaction.max.timeout.ms (DescribeConfigs).",
        ("broker",),
    ),
    Family(
        BROKER_TWO_PHASE_COMMIT_ENABLED,
        "gauge",
        "1 when the broker accepts two-phase-commit transactions (transaction.two.phase.commit.enable, "
        "KIP-939; DescribeConfigs). Absent when the broker's configs could not be read.",
        ("broker",),
    ),
    # -- coordinators (exporter/metrics/families/coordinators.py)
    Family(
        ACTIVE_TRANSACTION_OPEN_TIME_MAX,
        "gauge",
        "Age of the oldest open transaction the broker coordinates, from its TransactionStartTimeMs "
        "(ActiveTransactionOpenTimeMaxMs, KIP-939; ListTransactions, DescribeTransactions).",
        ("coordinator",),
    ),
    Family(
        TWO_PHASE_COMMIT_OPEN_TIME_MAX,
        "gauge",
        "Age of the oldest open two-phase-commit transaction (TransactionTimeoutMs = 2147483647, KIP-939) "
        "the broker coordinates.",
        ("coordinator",),
    ),
    Family(
        COORDINATOR_PREPARE_TIME_MAX,
        "gauge",
        "How long the transactional id longest in PrepareCommit or PrepareAbort (markers being written) has "
        "been listed so by the broker, counted from the first cycle that saw it there (ListTransactions; 0 "
        "when none).",
        ("coordinator",),
    ),
    Family(
        COORDINATOR_TRANSACTIONS,
        "gauge",
        "Transactional ids the broker coordinates, by coordinator state (ListTransactions).",
        ("coordinator", "state"),
    ),
    # -- the classification of open transactions (exporter/metrics/families/classification.py)
    Family(
        OPEN_TRANSACTIONS,
        "gauge",
        "Open partition-level transactions by class: ongoing, late, hanging, suspected_hanging, "
        "two_phase_commit, unknown (DescribeProducers, classified against the coordinators).",
        ("class",),
    ),
    Family(
        OPEN_TRANSACTIONS_UNKNOWN,
        "gauge",
        "Open partition-level transactions classed unknown, by why the evidence is missing: "
        "coordinator_unreadable, listing_incomplete, owner_may_be_invisible (the principal may not Describe "
        "every transactional id), unlisted_within_timeout (listed by no coordinator, but not yet older than "
        "transaction.max.timeout.ms plus padding), unverified (see docs/metrics.md).",
        ("reason",),
    ),
    Family(
        HANGING_TRANSACTION_INFO,
        "gauge",
        "One series per confirmed hanging transaction (KIP-664): the partition, the producer, the start "
        "offset to abort from, and the transactional id where known.",
        (
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
        ),
    ),
    Family(
        LATE_TRANSACTION_INFO,
        "gauge",
        "One series per open transaction older than transaction.max.timeout.ms plus the padding, with its "
        "class (PartitionsWithLateTransactionsCount, per transaction).",
        (
            "broker",
            "topic",
            "partition",
            "producer_id",
            "producer_epoch",
            "start_offset",
            "transactional_id",
            "class",
            "start_time_source",
        ),
    ),
    # -- attribution to applications (exporter/metrics/families/attribution.py)
    Family(
        OPEN_TRANSACTIONS_BY_APPLICATION,
        "gauge",
        "Open partition-level transactions by application (attributed from the transactional id by the "
        "attribution rules; unknown when no rule matches) and class (DescribeProducers, classified against "
        "the coordinators). With or without consumer groups.",
        ("application", "class"),
    ),
    # -- KIP-588 timeout aborts (exporter/metrics/families/aborts.py)
    Family(
        COORDINATOR_TIMEOUT_ABORTS,
        "counter",
        "Transactions the coordinator aborted on timeout (KIP-588), counted since the exporter started: a "
        "transaction seen Ongoing, next seen with a bumped producer epoch after its deadline "
        "(DescribeTransactions; see docs/metrics.md).",
        ("coordinator",),
    ),
    # -- consumer groups (exporter/metrics/families/groups.py)
    Family(
        CONSUMER_GROUP_LAG_CONSUMABLE,
        "gauge",
        CONSUMABLE_HELP,
        ("group", "topic"),
    ),
    Family(
        CONSUMER_GROUP_LAG_CONSUMABLE_UPPER_BOUND,
        "gauge",
        "Partitions of the group on the topic whose consumable lag is an upper bound (LSO - committed, or "
        "what was counted plus every offset not read): the batches up to the LSO were not all read this "
        "cycle (consumable_check_max_bytes, a failed Fetch). 0: exact.",
        ("group", "topic"),
    ),
    Family(
        CONSUMER_GROUP_LAG_BLOCKED,
        "gauge",
        BLOCKED_HELP,
        ("group", "topic"),
    ),
    Family(
        CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE,
        "gauge",
        "Per partition (opt-in): " + CONSUMABLE_HELP,
        ("group", "topic", "partition"),
    ),
    Family(
        CONSUMER_GROUP_PARTITION_LAG_BLOCKED,
        "gauge",
        "Per partition (opt-in): " + BLOCKED_HELP,
        ("group", "topic", "partition"),
    ),
    Family(
        CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE_UPPER_BOUND,
        "gauge",
        "Per partition (opt-in): 1 when the partition's consumable lag is an upper bound (the batches up to "
        "the LSO were not all read this cycle), 0 when it is exact.",
        ("group", "topic", "partition"),
    ),
    Family(
        CONSUMER_GROUP_BLOCKED_INFO,
        "gauge",
        "1 per group partition blocked by a transaction: nothing a read_committed consumer gets lies before "
        "the last stable offset (committed there, or only transaction markers and aborted records between, "
        "read from the batches), the LSO is below the high watermark and has not moved for "
        "blocked_after_cycles cycles (OffsetFetch, ListOffsets, Fetch READ_COMMITTED). Names the open "
        "transaction whose first offset is the LSO (DescribeProducers, DescribeTransactions) and the "
        "application it is attributed to.",
        (
            "group",
            "topic",
            "partition",
            "transactional_id",
            "producer_id",
            "start_offset",
            "class",
            "application",
        ),
    ),
    Family(
        CONSUMER_GROUP_BLOCKED_SECONDS,
        "gauge",
        "How long the group partition has been at the last stable offset it is blocked at, since the first "
        "cycle that saw it there.",
        ("group", "topic", "partition"),
    ),
    Family(
        CONSUMER_GROUP_BLOCKED_PARTITIONS,
        "gauge",
        "Partitions of the group blocked by a transaction.",
        ("group",),
    ),
    Family(
        CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS,
        "gauge",
        "Partitions of the group with a pending transactional offset commit (OffsetFetch with RequireStable "
        "answered UNSTABLE_OFFSET_COMMIT).",
        ("group",),
    ),
    # -- the history writer (exporter/history/metrics.py)
    Family(
        HISTORY_CYCLES_WRITTEN,
        "counter",
        "Cycles whose facts were appended to the history.",
        per_cluster=False,
    ),
    Family(
        HISTORY_ROWS_WRITTEN, "counter", "Rows appended to the history (all datasets).", per_cluster=False
    ),
    Family(
        HISTORY_CYCLES_DROPPED,
        "counter",
        "Cycles dropped before they were written: the buffer (history.buffer_cycles) was full "
        "because writes kept failing or could not keep up. Lost history.",
        per_cluster=False,
    ),
    Family(
        HISTORY_WRITE_FAILURES,
        "counter",
        "Failed history writes; their cycles stay buffered and are retried with the next batch.",
        per_cluster=False,
    ),
    Family(
        HISTORY_MAINTENANCE_FAILURES,
        "counter",
        "Failed compactions or retention passes of the history.",
        per_cluster=False,
    ),
    Family(HISTORY_BUFFERED_CYCLES, "gauge", "Cycles waiting to be written.", per_cluster=False),
    Family(
        HISTORY_LAST_WRITE_DURATION,
        "gauge",
        "How long the last history write took (the writer thread, off the cycle's path).",
        per_cluster=False,
    ),
)


#: Families the collector emits only in some setups (consumer groups configured; the
#: partition lags with per-partition series on): tests/unit/test_catalogue.py renders a
#: fixture state that has them.
IN_FLIGHT: frozenset[str] = frozenset(
    {
        CONSUMER_GROUP_LAG_CONSUMABLE,
        CONSUMER_GROUP_LAG_CONSUMABLE_UPPER_BOUND,
        CONSUMER_GROUP_LAG_BLOCKED,
        CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE,
        CONSUMER_GROUP_PARTITION_LAG_BLOCKED,
        CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE_UPPER_BOUND,
        CONSUMER_GROUP_BLOCKED_INFO,
        CONSUMER_GROUP_BLOCKED_SECONDS,
        CONSUMER_GROUP_BLOCKED_PARTITIONS,
        CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS,
    }
)


def by_name() -> dict[str, Family]:
    return dict(_BY_NAME)


def family(name: str) -> Family:
    """The catalogued family of that name (KeyError when there is none)."""
    return _BY_NAME[name]


_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}


def all_series(cluster_label: str = DEFAULT_CLUSTER_LABEL) -> dict[str, frozenset[str]]:
    """Every series name the exporter or Prometheus provides -> its label names."""
    series: dict[str, frozenset[str]] = dict(PROMETHEUS_SERIES)
    for family in FAMILIES:
        series.update(family.series(cluster_label))
    return series


def iter_names() -> Iterator[str]:
    return (f.name for f in FAMILIES)
