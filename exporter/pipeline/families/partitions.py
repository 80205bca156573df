"""Partitions: each one's LSO lag (high watermark minus last stable offset) and the age of
its oldest open transaction (MaxActiveTransactionDuration, KIP-664).

The partition frame (:func:`partition_frame`, every partition of the round) is read by the
brokers too; this family publishes the part of it a series or a reader of the result needs.
Each table here is one aggregation over a union of its sources (one shuffle), not a chain of
outer joins: the zero-filling and the "appears in any source" rule come for free.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exporter.model import PartitionMetrics
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Output, Parts
from exporter.pipeline.families.classification import FAMILY as CLASSIFICATION
from exporter.pipeline.tables import CLUSTER, keyed, one_partition, records_of


def partition_frame(ctx: Context) -> DataFrame:
    """Every partition (offsets read, or an open transaction seen), with its leader, LSO lag,
    the age of its oldest open transaction and whether any open transaction is late.

    Three outputs read it (the partitions, the topics' and the brokers' aggregations). In a
    cycle's plan each computes it again in the one task that runs them all, which costs less
    than keeping it; in a large round (``ctx.large``) it is a lazy local checkpoint, computed
    once inside the round's action (bench/results/fleet.md, "large rounds")."""
    return ctx.shared("partition_frame", _kept_if_large)


def _kept_if_large(ctx: Context) -> DataFrame:
    frame = _partition_frame(ctx)
    return ctx.checkpoint(frame) if ctx.large else frame


def _partition_frame(ctx: Context) -> DataFrame:
    c = F.col
    offsets = ctx["partitions"].select(
        CLUSTER,
        "topic",
        "partition",
        c("leader").alias("offsets_leader"),
        # The two ListOffsets calls are not atomic: an LSO read after the high watermark moved
        # on can pass it; the lag is then 0, never negative.
        F.when(
            (c("high_watermark") >= 0) & (c("last_stable_offset") >= 0),
            F.greatest(F.lit(0), c("high_watermark") - c("last_stable_offset")),
        ).alias("lso_lag"),
    )
    classified = ctx.classified_frame
    if classified is not None:
        offsets = one_partition(
            offsets.unionByName(
                classified.select(
                    CLUSTER,
                    "topic",
                    "partition",
                    c("broker_id").alias("txn_leader"),
                    "duration_ms",
                    c("late").cast("int").alias("late"),
                ),
                allowMissingColumns=True,
            )
        )
    else:
        offsets = offsets.select(
            "*",
            F.lit(None).cast("long").alias("txn_leader"),
            F.lit(None).cast("long").alias("duration_ms"),
            F.lit(None).cast("int").alias("late"),
        )
    return offsets.groupBy(*keyed("topic", "partition")).agg(
        F.coalesce(F.max("offsets_leader"), F.max("txn_leader"), F.lit(-1)).alias("leader"),
        F.max("lso_lag").alias("lso_lag"),
        F.max("duration_ms").alias("max_active_transaction_duration_ms"),
        F.coalesce(F.max("late"), F.lit(0)).alias("has_late"),
    )


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    """The partitions a series or a reader of the result needs: those with an LSO lag, an
    open transaction, or offsets that could not be read. A caught-up partition without an
    open transaction is left out unless every partition gets a LastStableOffsetLag series
    (``lso_lag_series: all``): on a large cluster that is most of them, and bringing each back
    to Python only to drop it cost more than the rest of the table (at 100k partitions,
    ~0.5 s of a cycle on the driver and in Python). The brokers' aggregates read the whole
    table, before this cut."""
    c = F.col
    every = ctx.value(lambda run: run.settings.lso_lag_series == "all", "boolean")
    published = partition_frame(ctx).where(
        every
        | c("lso_lag").isNull()
        | (c("lso_lag") > 0)
        | c("max_active_transaction_duration_ms").isNotNull()
    )
    return {"partitions": published}


def _assemble(a: Assembly) -> Parts:
    partitions = sorted(
        records_of(PartitionMetrics, a.of("partitions")), key=lambda p: (p.topic, p.partition)
    )
    return Parts(result={"partitions": tuple(partitions)})


def _has_partitions(run: ClusterRun) -> bool:
    return bool(run.snapshot.partitions) or CLASSIFICATION.applies(run)


FAMILY = Family(
    name="partitions",
    reads=("partitions",),
    classified=True,
    outputs=(Output("partitions", PartitionMetrics),),
    frames=_frames,
    assemble=_assemble,
    applies=_has_partitions,
)
