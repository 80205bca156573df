"""Every metric family the exporter serves, by name, with its labels: one place for the
collector's consumers (the dashboards in ``dashboards/`` and the alert rules in ``alerts/``).

Both generators import their metric names from here, never from each other, and
``tests/unit/test_catalogue.py`` ties this list to a rendering of the collector.

``labels`` never lists the Kafka cluster label: its name is configurable (top-level config
key ``cluster_label``, default ``kafka_cluster``) and added by :meth:`Family.label_names`
for every family with ``per_cluster`` set. Series Prometheus adds at scrape time (``job``,
``instance``, ``namespace``, ...) are not listed either.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

#: The default name of the label that carries the Kafka cluster (``Config.cluster_label``).
DEFAULT_CLUSTER_LABEL = "kafka_cluster"

#: Runbooks live in the repository; an alert's runbook is RUNBOOK_BASE_URL + name + ".md".
#: The alert rules' ``runbook_url`` base is overridable (alerts/thresholds.example.yml,
#: the chart's ``rules.runbookUrl``); dashboards link here.
RUNBOOK_BASE_URL = "https://github.com/kafka-txn-exporter/kafka-txn-exporter/blob/main/docs/runbooks/"

Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True)
class Family:
    """One metric family: its name as Prometheus stores it (counters with ``_total``)."""

    name: str
    kind: Kind
    labels: tuple[str, ...] = ()
    per_cluster: bool = True

    def label_names(self, cluster_label: str = DEFAULT_CLUSTER_LABEL) -> frozenset[str]:
        extra = {cluster_label} if self.per_cluster else set()
        return frozenset(self.labels) | extra

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


_FINDING = (
    "broker",
    "topic",
    "partition",
    "producer_id",
    "producer_epoch",
    "start_offset",
    "transactional_id",
    "start_time_source",
)

# -- Kafka-derived ---------------------------------------------------------------------------
PARTITION_MAX_ACTIVE_TRANSACTION_DURATION = "kafka_txn_partition_max_active_transaction_duration_seconds"
PARTITION_LAST_STABLE_OFFSET_LAG = "kafka_txn_partition_last_stable_offset_lag"
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
EXPORTER_BUILD_INFO = "kafka_txn_exporter_build_info"
EXPORTER_TRANSACTIONAL_IDS_VISIBLE = "kafka_txn_exporter_transactional_ids_visible"
REMEDIATIONS = "kafka_txn_remediations_total"

#: Series every Prometheus adds itself (the exporter-down alert reads ``up``); the alerts
#: reference ``ALERTS`` nowhere, the dashboards' annotations do.
PROMETHEUS_SERIES: dict[str, frozenset[str]] = {
    "up": frozenset({"job", "instance"}),
    "ALERTS": frozenset({"alertname", "alertstate", "severity"}),
}

FAMILIES: tuple[Family, ...] = (
    Family(PARTITION_MAX_ACTIVE_TRANSACTION_DURATION, "gauge", ("topic", "partition")),
    Family(PARTITION_LAST_STABLE_OFFSET_LAG, "gauge", ("topic", "partition")),
    Family(PARTITIONS_WITH_LATE_TRANSACTIONS, "gauge", ("broker",)),
    Family(MAX_LAST_STABLE_OFFSET_LAG, "gauge", ("broker",)),
    Family(HANGING_TRANSACTIONS, "gauge", ("broker",)),
    Family(BROKER_TRANSACTION_VERIFICATION_ENABLED, "gauge", ("broker",)),
    Family(BROKER_TRANSACTION_MAX_TIMEOUT, "gauge", ("broker",)),
    Family(BROKER_TWO_PHASE_COMMIT_ENABLED, "gauge", ("broker",)),
    Family(CLUSTER_TRANSACTION_VERSION, "gauge"),
    Family(ACTIVE_TRANSACTION_OPEN_TIME_MAX, "gauge", ("coordinator",)),
    Family(TWO_PHASE_COMMIT_OPEN_TIME_MAX, "gauge", ("coordinator",)),
    Family(COORDINATOR_PREPARE_TIME_MAX, "gauge", ("coordinator",)),
    Family(COORDINATOR_TRANSACTIONS, "gauge", ("coordinator", "state")),
    Family(COORDINATOR_TIMEOUT_ABORTS, "counter", ("coordinator",)),
    Family(OPEN_TRANSACTIONS, "gauge", ("class",)),
    Family(OPEN_TRANSACTIONS_UNKNOWN, "gauge", ("reason",)),
    Family(OPEN_TRANSACTIONS_BY_APPLICATION, "gauge", ("application", "class")),
    Family(HANGING_TRANSACTION_INFO, "gauge", (*_FINDING, "coordinator_epoch", "reason")),
    Family(LATE_TRANSACTION_INFO, "gauge", (*_FINDING, "class")),
    Family(CONSUMER_GROUP_LAG_CONSUMABLE, "gauge", ("group", "topic")),
    Family(CONSUMER_GROUP_LAG_CONSUMABLE_UPPER_BOUND, "gauge", ("group", "topic")),
    Family(CONSUMER_GROUP_LAG_BLOCKED, "gauge", ("group", "topic")),
    Family(CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE, "gauge", ("group", "topic", "partition")),
    Family(CONSUMER_GROUP_PARTITION_LAG_BLOCKED, "gauge", ("group", "topic", "partition")),
    Family(CONSUMER_GROUP_PARTITION_LAG_CONSUMABLE_UPPER_BOUND, "gauge", ("group", "topic", "partition")),
    Family(
        CONSUMER_GROUP_BLOCKED_INFO,
        "gauge",
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
    Family(CONSUMER_GROUP_BLOCKED_SECONDS, "gauge", ("group", "topic", "partition")),
    Family(CONSUMER_GROUP_BLOCKED_PARTITIONS, "gauge", ("group",)),
    Family(CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS, "gauge", ("group",)),
    Family(EXPORTER_UP, "gauge"),
    Family(EXPORTER_LAST_SUCCESS_TIMESTAMP, "gauge"),
    Family(EXPORTER_SNAPSHOT_AGE, "gauge"),
    Family(EXPORTER_COLLECTION_INTERVAL, "gauge"),
    Family(EXPORTER_CYCLE_DURATION, "histogram"),
    Family(EXPORTER_STAGE_DURATION, "gauge", ("stage",)),
    Family(EXPORTER_CYCLES, "counter", ("result",)),
    Family(EXPORTER_CYCLES_SKIPPED, "counter"),
    Family(EXPORTER_REQUEST_ERRORS, "counter", ("api", "error")),
    Family(EXPORTER_BUILD_INFO, "gauge", ("version",), per_cluster=False),
    Family(EXPORTER_TRANSACTIONAL_IDS_VISIBLE, "gauge"),
    Family(REMEDIATIONS, "counter", ("action", "result")),
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
    return {f.name: f for f in FAMILIES}


def all_series(cluster_label: str = DEFAULT_CLUSTER_LABEL) -> dict[str, frozenset[str]]:
    """Every series name the exporter or Prometheus provides -> its label names."""
    series: dict[str, frozenset[str]] = dict(PROMETHEUS_SERIES)
    for family in FAMILIES:
        series.update(family.series(cluster_label))
    return series


def iter_names() -> Iterator[str]:
    return (f.name for f in FAMILIES)
