"""Partition drill-down: why is the LSO of this partition held back, and by whom."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import (
    CLI,
    CLUSTER,
    GREEN_THEN_RED_AT_1,
    LSO_LAG_LINE,
    LSO_LAG_STAT,
    PARTITION,
    PARTITION_LEGEND,
    PARTITION_LSO_LAG,
    PARTITION_UID,
    PER_PARTITION,
    TOPIC,
    PanelSpec,
    Query,
    Section,
    cluster_variable,
    dashboard,
    datasource_variable,
    findings_table,
    max_by,
    partition_variable,
    runbook,
    topic_variable,
)
from exporter.metrics import catalogue as m

SELECTOR = f"{CLUSTER},{TOPIC},{PARTITION}"
FINDING_COLUMNS = (
    "kafka_cluster",
    "topic",
    "partition",
    "broker",
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "start_offset",
    "start_time_source",
)
MAX_ACTIVE_DURATION = m.PARTITION_MAX_ACTIVE_TRANSACTION_DURATION


def _selected(metric: str, *, now: bool = False) -> Query:
    """``metric`` per selected partition: its current value for a stat, else a line."""
    return Query(
        max_by(PER_PARTITION, metric, SELECTOR),
        legend="{{topic}}-{{partition}}" if now else PARTITION_LEGEND,
        instant=now,
    )


def _now() -> Section:
    return Section(
        "Selected partitions",
        (
            PanelSpec(
                kind="stat",
                title="LSO lag now",
                shows="Current LastStableOffsetLag (high watermark - last stable offset) of "
                "the selected partitions: records read_committed consumers cannot read yet.",
                when_red="Above 100000 offsets: follow "
                f"{runbook('KafkaLastStableOffsetLagGrowing')}; "
                f"`{CLI} describe-producers --topic T --partition P` shows the open "
                "transaction.",
                unit="short",
                queries=(_selected(PARTITION_LSO_LAG, now=True),),
                width=8,
                height=5,
                steps=LSO_LAG_STAT,
            ),
            PanelSpec(
                kind="stat",
                title="Oldest open transaction now",
                shows="How long the oldest open transaction on the selected partitions has "
                "been open (MaxActiveTransactionDuration). No value: no open transaction.",
                when_red="Red beyond 20 minutes (the default transaction.max.timeout.ms + 5 "
                f"min): follow {runbook('KafkaTransactionsLate')}.",
                unit="s",
                queries=(_selected(MAX_ACTIVE_DURATION, now=True),),
                width=8,
                height=5,
                steps=(("green", None), ("orange", 900.0), ("red", 1200.0)),
            ),
            PanelSpec(
                kind="stat",
                title="Hanging transactions on these partitions",
                shows="Number of confirmed hanging transactions on the selected partitions.",
                when_red=f"Follow {runbook('KafkaTransactionHanging')}; "
                f"`{CLI} find-hanging --topic T --partition P` then `{CLI} abort`.",
                unit="none",
                queries=(
                    Query(
                        f"count({m.HANGING_TRANSACTION_INFO}{{{SELECTOR}}}) or vector(0)",
                        instant=True,
                    ),
                ),
                width=8,
                height=5,
                steps=GREEN_THEN_RED_AT_1,
            ),
        ),
    )


def _history() -> Section:
    return Section(
        "History",
        (
            PanelSpec(
                kind="timeseries",
                title="LastStableOffsetLag",
                shows="LastStableOffsetLag of the selected partitions over time. A sawtooth "
                "is healthy transactional traffic; a line that only grows means one "
                "transaction keeps the LSO in place.",
                when_red="Above 100000 offsets and still growing: follow "
                f"{runbook('KafkaLastStableOffsetLagGrowing')}.",
                unit="short",
                queries=(_selected(PARTITION_LSO_LAG),),
                width=12,
                steps=LSO_LAG_LINE,
            ),
            PanelSpec(
                kind="timeseries",
                title="Max active transaction duration",
                shows="Age of the oldest open transaction on each selected partition "
                "(MaxActiveTransactionDuration, KIP-664) against the largest "
                "transaction.max.timeout.ms of the cluster's brokers (dashed line).",
                when_red="Crosses the max timeout + 5 min: the transaction is late. Follow "
                f"{runbook('KafkaTransactionsLate')}; "
                f"`{CLI} find-hanging --topic T --partition P` tells whether it hangs.",
                unit="s",
                queries=(
                    _selected(MAX_ACTIVE_DURATION),
                    Query(
                        max_by("kafka_cluster", m.BROKER_TRANSACTION_MAX_TIMEOUT),
                        legend="{{kafka_cluster}} transaction.max.timeout.ms",
                    ),
                ),
                width=12,
                steps=(("green", None), ("red", 1200.0)),
            ),
        ),
    )


def _findings() -> Section:
    return Section(
        "Findings",
        (
            findings_table(
                title="Hanging transactions on these partitions",
                shows="Confirmed hanging transactions on the selected partitions: producer, "
                "transactional id, start offset, coordinator epoch and why it is considered "
                "hanging.",
                when_red="Any row: follow "
                f"{runbook('KafkaTransactionHanging')}. Abort with `{CLI} abort --topic T "
                "--partition P --start-offset O` (dry run), then again with --yes.",
                metric=m.HANGING_TRANSACTION_INFO,
                columns=(*FINDING_COLUMNS, "coordinator_epoch", "reason"),
                selector=SELECTOR,
            ),
            findings_table(
                title="Late transactions on these partitions",
                shows="Open transactions on the selected partitions older than "
                "transaction.max.timeout.ms + 5 min, with their class.",
                when_red=f"Any row: follow {runbook('KafkaTransactionsLate')}; "
                f"`{CLI} describe --transactional-id ID` for the coordinator's view.",
                metric=m.LATE_TRANSACTION_INFO,
                columns=(*FINDING_COLUMNS, "class"),
                selector=SELECTOR,
            ),
        ),
    )


def build() -> Dashboard:
    return dashboard(
        uid=PARTITION_UID,
        title="Kafka transactions / Partition drill-down",
        description="LSO lag, open transaction age and hanging or late transaction findings "
        "for selected partitions.",
        variables=(
            datasource_variable(),
            cluster_variable(),
            topic_variable(),
            partition_variable(),
        ),
        sections=(_now(), _history(), _findings()),
    )
