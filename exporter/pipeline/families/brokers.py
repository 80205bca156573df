"""Brokers: partitions with late transactions, confirmed hanging transactions and the
largest LSO lag over the partitions each leads, and its transaction settings
(verification, two-phase commit, transaction.max.timeout.ms).

One aggregation over a union of its sources (metadata, configs, partition leaders, hanging
transactions): every known broker appears, zero-filled, without a chain of outer joins.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from exporter.model import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, BrokerMetrics, TxnClass
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Output, Parts
from exporter.pipeline.families.partitions import FAMILY as PARTITIONS
from exporter.pipeline.families.partitions import partition_frame
from exporter.pipeline.tables import CLUSTER, keyed, one_partition, records_of


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    """Every known broker (metadata, configs, partition leaders), zero-filled. A broker whose
    configs were not read has no verification or 2PC value (null, never a guess)."""
    c = F.col
    none_int, none_long = F.lit(None).cast("int"), F.lit(None).cast("long")
    blank = {
        "verification": none_int,
        "two_phase": none_int,
        "transaction_max_timeout_ms": none_long,
        "late": none_int,
        "lso_lag": none_long,
        "hanging": none_int,
    }

    def source(frame: DataFrame, broker: Column, **given: Column) -> DataFrame:
        return frame.select(
            c(CLUSTER),
            broker.alias("broker_id"),
            *((given.get(k, v)).alias(k) for k, v in blank.items()),
        )

    sources = [
        source(ctx["brokers"], c("broker_id")),
        source(
            ctx["broker_configs"],
            c("broker_id"),
            verification=c("verification_enabled").cast("int"),
            two_phase=c("two_phase_commit_enabled").cast("int"),
            transaction_max_timeout_ms=c("transaction_max_timeout_ms"),
        ),
    ]
    classified = ctx.classified_frame
    if ctx.any(PARTITIONS.applies):
        partitions = partition_frame(ctx)
        sources.append(
            source(
                partitions.where(c("leader") >= 0),
                c("leader"),
                late=c("has_late").cast("int"),
                lso_lag=c("lso_lag"),
            )
        )
    if classified is not None:
        sources.append(
            source(
                classified.where(c("txn_class") == TxnClass.HANGING.value), c("broker_id"), hanging=F.lit(1)
            )
        )
    union = sources[0]
    for more in sources[1:]:
        union = union.union(more)
    union = one_partition(union)
    min_verification = F.min("verification")
    max_two_phase = F.max("two_phase")
    brokers = union.groupBy(*keyed("broker_id")).agg(
        F.coalesce(F.sum("late"), F.lit(0)).alias("partitions_with_late_transactions"),
        F.coalesce(F.sum("hanging"), F.lit(0)).alias("hanging_transactions"),
        F.coalesce(F.max("lso_lag"), F.lit(0)).alias("max_last_stable_offset_lag"),
        F.when(min_verification.isNotNull(), min_verification == 1).alias("verification_enabled"),
        F.coalesce(F.max("transaction_max_timeout_ms"), F.lit(DEFAULT_TRANSACTION_MAX_TIMEOUT_MS)).alias(
            "transaction_max_timeout_ms"
        ),
        F.when(max_two_phase.isNotNull(), max_two_phase == 1).alias("two_phase_commit_enabled"),
    )
    return {"brokers": brokers}


def _assemble(a: Assembly) -> Parts:
    brokers = sorted(records_of(BrokerMetrics, a.of("brokers")), key=lambda b: b.broker_id)
    return Parts(result={"brokers": tuple(brokers)})


def _has_brokers(run: ClusterRun) -> bool:
    return PARTITIONS.applies(run) or bool(run.snapshot.brokers or run.snapshot.broker_configs)


FAMILY = Family(
    name="brokers",
    reads=("brokers", "broker_configs", "partitions"),
    classified=True,
    outputs=(Output("brokers", BrokerMetrics),),
    frames=_frames,
    assemble=_assemble,
    applies=_has_brokers,
)
