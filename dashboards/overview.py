"""Cluster overview: is any transaction stuck, where, and can we trust the numbers."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import (
    ANY_RATE,
    CLI,
    CLUSTER,
    CLUSTER_LABEL,
    COORDINATOR_LEGEND,
    GREEN_THEN_RED_AT_1,
    GRID_WIDTH,
    LSO_LAG_LINE,
    LSO_LAG_STAT,
    OVERVIEW_UID,
    PARTITION_LEGEND,
    PARTITION_LSO_LAG,
    PER_BROKER,
    PER_COORDINATOR,
    PER_PARTITION,
    RED_BELOW_1,
    TOPIC,
    PanelSpec,
    Query,
    Section,
    cluster_variable,
    dashboard,
    data_age_stat,
    datasource_variable,
    exporter_up_stat,
    findings_table,
    max_by,
    per_broker,
    runbook,
    topic_variable,
)
from exporter.metrics import catalogue as m

SELECTOR = f"{CLUSTER},{TOPIC}"

FINDING_COLUMNS = (
    "kafka_cluster",
    "broker",
    "topic",
    "partition",
    "transactional_id",
    "producer_id",
    "producer_epoch",
    "start_offset",
)


def _total(expr: str) -> Query:
    """The sum of ``expr`` over the selected clusters, now."""
    return Query(f"sum({expr})", instant=True)


def _summary() -> Section:
    return Section(
        "Summary",
        (
            PanelSpec(
                kind="stat",
                title="Hanging transactions",
                shows="Confirmed hanging transactions in the selected clusters: open on a "
                "partition while no coordinator will ever complete them. read_committed "
                "consumers of those partitions are stuck.",
                when_red=f"Follow {runbook('KafkaTransactionHanging')}; list them with "
                f"`{CLI} find-hanging` and abort with `{CLI} abort`.",
                unit="none",
                queries=(_total(max_by(PER_BROKER, m.HANGING_TRANSACTIONS)),),
                width=4,
                height=5,
                steps=GREEN_THEN_RED_AT_1,
            ),
            PanelSpec(
                kind="stat",
                title="Partitions with late transactions",
                shows="Partitions whose oldest open transaction is older than "
                "transaction.max.timeout.ms + 5 minutes (Kafka's "
                "PartitionsWithLateTransactionsCount, summed over brokers).",
                when_red=f"Follow {runbook('KafkaTransactionsLate')}; check each partition "
                f"with `{CLI} describe-producers --topic T --partition P`.",
                unit="none",
                queries=(_total(max_by(PER_BROKER, m.PARTITIONS_WITH_LATE_TRANSACTIONS)),),
                width=4,
                height=5,
                steps=GREEN_THEN_RED_AT_1,
            ),
            PanelSpec(
                kind="stat",
                title="Max LSO lag",
                shows="Largest LastStableOffsetLag (high watermark - last stable offset) "
                "over all brokers: how far read_committed consumers are held back.",
                when_red="Red above 100000 offsets. Find the partition in the partition "
                f"drill-down and follow {runbook('KafkaLastStableOffsetLagGrowing')}.",
                unit="short",
                queries=(Query(f"max({m.MAX_LAST_STABLE_OFFSET_LAG}{{{CLUSTER}}})", instant=True),),
                width=4,
                height=5,
                steps=LSO_LAG_STAT,
            ),
            PanelSpec(
                kind="stat",
                title="Verification disabled brokers",
                shows="Brokers with transaction.partition.verification.enable=false (KIP-890): "
                "they accept transactional writes the coordinator never registered, which is "
                "how hanging transactions are made.",
                when_red=f"Follow {runbook('KafkaTransactionVerificationDisabled')} and "
                "re-enable the setting with kafka-configs.sh.",
                unit="none",
                queries=(_total("1 - " + max_by(PER_BROKER, m.BROKER_TRANSACTION_VERIFICATION_ENABLED)),),
                width=4,
                height=5,
                steps=GREEN_THEN_RED_AT_1,
            ),
            exporter_up_stat(
                title="Exporter up",
                shows="Whether the last collection cycle of the exporter succeeded completely, "
                "per cluster (1 = up). When it is down the other panels may be stale or "
                "partial.",
                when_red=f"Follow {runbook('KafkaTxnExporterDown')}; open the exporter "
                "dashboard for the failing stage and request errors.",
                width=4,
            ),
            data_age_stat(
                shows="Age of the data the exporter serves, per cluster. It normally stays "
                "below the collection interval plus one cycle.",
                when_red=f"Red above 5 minutes: follow {runbook('KafkaTxnExporterDataStale')}.",
                width=4,
            ),
        ),
    )


def _brokers() -> Section:
    return Section(
        "Partition leaders (per broker)",
        (
            PanelSpec(
                kind="timeseries",
                title="Hanging transactions per broker",
                shows="Confirmed hanging transactions on the partitions each broker leads.",
                when_red=f"Any value above 0: follow {runbook('KafkaTransactionHanging')}; "
                f"`{CLI} find-hanging --broker-id B` lists them.",
                unit="none",
                queries=(per_broker(m.HANGING_TRANSACTIONS),),
                steps=GREEN_THEN_RED_AT_1,
            ),
            PanelSpec(
                kind="timeseries",
                title="Partitions with late transactions per broker",
                shows="PartitionsWithLateTransactionsCount per broker: led partitions whose "
                "oldest open transaction is older than transaction.max.timeout.ms + 5 min.",
                when_red=f"Any value above 0: follow {runbook('KafkaTransactionsLate')}; the "
                "late-transactions table below names the partitions.",
                unit="none",
                queries=(per_broker(m.PARTITIONS_WITH_LATE_TRANSACTIONS),),
                steps=GREEN_THEN_RED_AT_1,
            ),
            PanelSpec(
                kind="timeseries",
                title="MaxLastStableOffsetLag per broker",
                shows="Largest LastStableOffsetLag over the partitions each broker leads. "
                "A sawtooth is normal for transactional traffic; a line that only rises "
                "means an open transaction pins the LSO.",
                when_red=f"Above 100000 offsets and rising: follow "
                f"{runbook('KafkaLastStableOffsetLagGrowing')}.",
                unit="short",
                queries=(per_broker(m.MAX_LAST_STABLE_OFFSET_LAG),),
                steps=LSO_LAG_LINE,
            ),
            PanelSpec(
                kind="stat",
                title="Transaction verification per broker",
                shows="transaction.partition.verification.enable on each broker (KIP-890).",
                when_red="A broker shows DISABLED: follow "
                f"{runbook('KafkaTransactionVerificationDisabled')}.",
                unit="none",
                queries=(per_broker(m.BROKER_TRANSACTION_VERIFICATION_ENABLED, instant=True),),
                width=12,
                height=5,
                steps=RED_BELOW_1,
                value_text={"0": ("DISABLED", "red"), "1": ("enabled", "green")},
            ),
            PanelSpec(
                kind="stat",
                title="transaction.max.timeout.ms per broker",
                shows="The broker's transaction.max.timeout.ms: the longest timeout a producer "
                "may ask for. A transaction is late after this plus 5 minutes.",
                when_red="Never red; brokers that disagree make late-ness differ between "
                "partitions: align the setting with kafka-configs.sh.",
                unit="s",
                queries=(per_broker(m.BROKER_TRANSACTION_MAX_TIMEOUT, instant=True),),
                width=12,
                height=5,
            ),
            PanelSpec(
                kind="stat",
                title="Two-phase commit per broker",
                shows="transaction.two.phase.commit.enable on each broker (KIP-939): whether "
                "producers may open two-phase-commit transactions, which Kafka never times out.",
                when_red="Never red. Enabled brokers: opt in to "
                f"{runbook('KafkaTransactionTwoPhaseCommitOpenTimeHigh')} (rules.disabled).",
                unit="none",
                queries=(per_broker(m.BROKER_TWO_PHASE_COMMIT_ENABLED, instant=True),),
                width=12,
                height=5,
                value_text={"0": ("off", "green"), "1": ("2PC enabled", "blue")},
            ),
            PanelSpec(
                kind="stat",
                title="transaction.version",
                shows="The cluster's finalized transaction.version feature level (KIP-890 "
                "transactions v2 from level 2; DescribeFeatures).",
                when_red="Never red; below 2 the brokers run without the KIP-890 server-side "
                "defence against hanging transactions: see "
                f"{runbook('KafkaTransactionVerificationDisabled')}.",
                unit="none",
                queries=(
                    Query(
                        max_by(CLUSTER_LABEL, m.CLUSTER_TRANSACTION_VERSION),
                        legend="{{" + CLUSTER_LABEL + "}}",
                        instant=True,
                    ),
                ),
                width=12,
                height=5,
            ),
        ),
    )


def _coordinators() -> Section:
    return Section(
        "Transaction coordinators",
        (
            PanelSpec(
                kind="timeseries",
                title="ActiveTransactionOpenTimeMax per coordinator",
                shows="Age of the oldest ongoing transaction each coordinator owns (KIP-939 "
                "ActiveTransactionOpenTimeMax). The coordinator aborts a transaction past its "
                "transaction.timeout.ms, so this should stay below transaction.max.timeout.ms.",
                when_red="Above 16 minutes (default max timeout + 1 min): follow "
                f"{runbook('KafkaTransactionCoordinatorOpenTimeHigh')}; `{CLI} list` and "
                f"`{CLI} describe --transactional-id ID` show the transaction.",
                unit="s",
                queries=(
                    Query(
                        max_by(PER_COORDINATOR, m.ACTIVE_TRANSACTION_OPEN_TIME_MAX),
                        legend=COORDINATOR_LEGEND,
                    ),
                ),
                steps=(("green", None), ("red", 960.0)),
            ),
            PanelSpec(
                kind="timeseries",
                title="Two-phase-commit open time max per coordinator",
                shows="Age of the oldest open two-phase-commit transaction (KIP-939) per "
                "coordinator. Kafka never times these out; the external transaction manager "
                "must commit or abort them.",
                when_red="Above 1 hour: follow "
                f"{runbook('KafkaTransactionTwoPhaseCommitOpenTimeHigh')}; "
                f"`{CLI} force-terminate --transactional-id ID` is the last resort.",
                unit="s",
                queries=(
                    Query(
                        max_by(
                            PER_COORDINATOR,
                            m.TWO_PHASE_COMMIT_OPEN_TIME_MAX,
                        ),
                        legend=COORDINATOR_LEGEND,
                    ),
                ),
                steps=(("green", None), ("red", 3600.0)),
            ),
            PanelSpec(
                kind="timeseries",
                title="Coordinator timeout aborts",
                shows="Transactions the coordinators aborted because they outlived their "
                "transaction.timeout.ms (KIP-588), per second. Producers that die or stall "
                "mid-transaction show up here.",
                when_red=f"Sustained non-zero rate: follow "
                f"{runbook('KafkaTransactionCoordinatorTimeoutAbortsRising')}.",
                unit="ops",
                queries=(
                    Query(
                        "max by (kafka_cluster, coordinator) (rate("
                        f"{m.COORDINATOR_TIMEOUT_ABORTS}{{{CLUSTER}}}"
                        "[$__rate_interval]))",
                        legend=COORDINATOR_LEGEND,
                    ),
                ),
                steps=ANY_RATE,
            ),
            PanelSpec(
                kind="timeseries",
                title="Coordinator transactions by state",
                shows="Transactional ids known to the coordinators, by state (Empty, Ongoing, "
                "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead, "
                "PrepareEpochFence).",
                when_red="Never red; Prepare* states that persist mean markers cannot be "
                f"written: check partition leaders and `{CLI} list`.",
                unit="none",
                queries=(
                    Query(
                        "sum by (kafka_cluster, state) (max by (kafka_cluster, coordinator, state) "
                        f"({m.COORDINATOR_TRANSACTIONS}{{{CLUSTER}}}))",
                        legend="{{kafka_cluster}} {{state}}",
                    ),
                ),
                width=12,
                stacked=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Open transactions by class",
                shows="Open partition-level transactions by class: ongoing, late, hanging, "
                "suspected_hanging, two_phase_commit, unknown.",
                when_red="The hanging or late classes are non-zero: follow "
                f"{runbook('KafkaTransactionHanging')} or {runbook('KafkaTransactionsLate')}.",
                unit="none",
                queries=(
                    Query(
                        f"max by (kafka_cluster, class) ({m.OPEN_TRANSACTIONS}{{{CLUSTER}}})",
                        legend="{{kafka_cluster}} {{class}}",
                    ),
                ),
                width=12,
                stacked=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Markers pending per coordinator",
                shows="Longest time a transaction of each coordinator has spent in "
                "PrepareCommit or PrepareAbort: the outcome is decided, the markers are not "
                "all written yet. Normally milliseconds.",
                when_red=f"Above 2 minutes: follow {runbook('KafkaTransactionMarkersPending')}.",
                unit="s",
                queries=(
                    Query(max_by(PER_COORDINATOR, m.COORDINATOR_PREPARE_TIME_MAX), legend=COORDINATOR_LEGEND),
                ),
                steps=(("green", None), ("red", 120.0)),
            ),
            PanelSpec(
                kind="timeseries",
                title="Unknown open transactions by reason",
                shows="Open transactions the exporter could not classify, by reason: "
                "coordinator_unreadable, listing_incomplete, owner_may_be_invisible (the "
                "principal may not Describe every transactional id), unlisted_within_timeout "
                "(listed by no coordinator, but young enough to be a live transaction whose id "
                "a DENY rule hides: a hanging candidate once older than "
                "transaction.max.timeout.ms + 5 min), unverified.",
                when_red="owner_may_be_invisible or listing_incomplete above 0: follow "
                f"{runbook('KafkaTxnExporterBlindSpot')} (ACL Describe on TransactionalId *).",
                unit="none",
                queries=(
                    Query(
                        max_by(f"{CLUSTER_LABEL}, reason", m.OPEN_TRANSACTIONS_UNKNOWN),
                        legend="{{" + CLUSTER_LABEL + "}} {{reason}}",
                    ),
                ),
                stacked=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Open transactions by application",
                shows="Open partition-level transactions per application (derived from the "
                "transactional id) and class: which application holds the LSO back.",
                when_red="An application with hanging or late transactions: follow "
                f"{runbook('KafkaTransactionHanging')} and tell its owners.",
                unit="none",
                queries=(
                    Query(
                        max_by(f"{CLUSTER_LABEL}, application, class", m.OPEN_TRANSACTIONS_BY_APPLICATION),
                        legend="{{" + CLUSTER_LABEL + "}} {{application}} {{class}}",
                    ),
                ),
                stacked=True,
            ),
        ),
    )


BLOCKED_KEY = f"{CLUSTER_LABEL}, group, topic, partition"
BLOCKED_DETAILS = "transactional_id, application, producer_id, start_offset, class"


def _consumers() -> Section:
    group_selector = f"{CLUSTER},{TOPIC}"
    return Section(
        "Consumers (read_committed, filtered by topic)",
        (
            PanelSpec(
                kind="table",
                title="Blocked consumers",
                shows="Consumer groups whose read_committed consumers have read up to the "
                "last stable offset and wait behind an open transaction: group, partition, "
                "how long, and the transaction that blocks them.",
                when_red="Any row blocked for minutes: follow "
                f"{runbook('KafkaConsumerGroupBlockedByTransaction')}; `{CLI} find-hanging "
                "--topic T --partition P`, then `abort` (or `force-terminate` for 2PC).",
                unit="s",
                queries=(
                    Query(
                        f"max by ({BLOCKED_KEY}) "
                        f"({m.CONSUMER_GROUP_BLOCKED_SECONDS}{{{group_selector}}})\n"
                        f"* on ({BLOCKED_KEY}) group_left ({BLOCKED_DETAILS})\n"
                        # One details series per partition even when two exporter replicas
                        # publish different ones (a many-to-many match would fail the query).
                        f"topk by ({BLOCKED_KEY}) (1, max by ({BLOCKED_KEY}, {BLOCKED_DETAILS}) "
                        f"({m.CONSUMER_GROUP_BLOCKED_INFO}{{{group_selector}}}))",
                        table=True,
                    ),
                ),
                width=GRID_WIDTH,
                column_order=(
                    CLUSTER_LABEL,
                    "group",
                    "topic",
                    "partition",
                    "transactional_id",
                    "application",
                    "producer_id",
                    "start_offset",
                    "class",
                ),
                value_column="Blocked for",
                partition_link_columns=("partition",),
            ),
            PanelSpec(
                kind="timeseries",
                title="Consumer lag: consumable vs blocked",
                shows="Per group, records a read_committed consumer can read now "
                "(consumable: up to the LSO) and records stuck behind the LSO (blocked: "
                "between the LSO and the high watermark).",
                when_red="Blocked lag that only grows: follow "
                f"{runbook('KafkaConsumerGroupBlockedByTransaction')}.",
                unit="short",
                queries=(
                    Query(
                        f"sum by ({CLUSTER_LABEL}, group) (max by ({CLUSTER_LABEL}, group, "
                        f"topic) ({m.CONSUMER_GROUP_LAG_CONSUMABLE}{{{group_selector}}}))",
                        legend="{{" + CLUSTER_LABEL + "}} {{group}} consumable",
                    ),
                    Query(
                        f"sum by ({CLUSTER_LABEL}, group) (max by ({CLUSTER_LABEL}, group, "
                        f"topic) ({m.CONSUMER_GROUP_LAG_BLOCKED}{{{group_selector}}}))",
                        legend="{{" + CLUSTER_LABEL + "}} {{group}} blocked",
                    ),
                ),
                width=12,
                stacked=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Blocked partitions and unstable offset commits per group",
                shows="Per group: partitions blocked behind an open transaction, and "
                "partitions whose committed offsets are pending inside a transaction "
                "(UNSTABLE_OFFSET_COMMIT).",
                when_red="Unstable commits for minutes: follow "
                f"{runbook('KafkaConsumerGroupUnstableOffsetCommit')}.",
                unit="none",
                queries=(
                    Query(
                        max_by(f"{CLUSTER_LABEL}, group", m.CONSUMER_GROUP_BLOCKED_PARTITIONS),
                        legend="{{" + CLUSTER_LABEL + "}} {{group}} blocked partitions",
                    ),
                    Query(
                        max_by(f"{CLUSTER_LABEL}, group", m.CONSUMER_GROUP_UNSTABLE_OFFSET_COMMITS),
                        legend="{{" + CLUSTER_LABEL + "}} {{group}} unstable offset commits",
                    ),
                ),
                width=12,
                steps=GREEN_THEN_RED_AT_1,
            ),
        ),
    )


def _findings() -> Section:
    return Section(
        "Findings (filtered by topic)",
        (
            findings_table(
                title="Hanging transactions",
                shows="Every confirmed hanging transaction with the producer, its "
                "transactional id (empty when no coordinator knows one), the start offset to "
                "abort at and the reason. Click a partition to drill down.",
                when_red="Any row: follow "
                f"{runbook('KafkaTransactionHanging')}; abort with `{CLI} abort --topic T "
                "--partition P --start-offset O` (dry run first, then --yes).",
                metric=m.HANGING_TRANSACTION_INFO,
                columns=(*FINDING_COLUMNS, "reason"),
                selector=SELECTOR,
                link_partitions=True,
            ),
            findings_table(
                title="Late transactions",
                shows="Every open transaction older than transaction.max.timeout.ms + 5 min, "
                "with its class (late, hanging, suspected_hanging, two_phase_commit, unknown).",
                when_red=f"Any row: follow {runbook('KafkaTransactionsLate')}; "
                f"`{CLI} describe --transactional-id ID` shows what the coordinator thinks.",
                metric=m.LATE_TRANSACTION_INFO,
                columns=(*FINDING_COLUMNS, "class"),
                selector=SELECTOR,
                link_partitions=True,
            ),
            PanelSpec(
                kind="timeseries",
                title="Top 10 partitions by LSO lag",
                shows="The ten partitions of the selected topics with the largest LastStableOffsetLag.",
                when_red="Above 100000 offsets and rising: open the partition drill-down and "
                f"follow {runbook('KafkaLastStableOffsetLagGrowing')}.",
                unit="short",
                queries=(
                    Query(
                        f"topk(10, {max_by(PER_PARTITION, PARTITION_LSO_LAG, SELECTOR)})",
                        legend=PARTITION_LEGEND,
                    ),
                ),
                width=24,
                steps=LSO_LAG_LINE,
            ),
        ),
    )


def build() -> Dashboard:
    return dashboard(
        uid=OVERVIEW_UID,
        title="Kafka transactions / Cluster overview",
        description="Hanging and late Kafka transactions, LSO lag and coordinator health, "
        "from kafka-txn-exporter.",
        variables=(datasource_variable(), cluster_variable(), topic_variable()),
        sections=(_summary(), _brokers(), _coordinators(), _consumers(), _findings()),
    )
