"""Topics: each topic's largest LSO lag, the age of its oldest open transaction and how many
of its partitions have one open.

The partition series are bounded (``lso_lag_series``: caught-up partitions are left out by
default) and a dashboard or an alert that asks "which topic's read_committed consumers are
held back, and since when" had to aggregate them; one series per topic answers it with the
topic count for its cardinality, every topic of the partition table included (zero when
nothing is open), whatever ``lso_lag_series`` says. Read off the round's partition frame
(every partition, before the published cut), so it costs one aggregation.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exporter.model import TopicMetrics
from exporter.pipeline.families.base import Assembly, Context, Family, Output, Parts
from exporter.pipeline.families.partitions import FAMILY as PARTITIONS
from exporter.pipeline.families.partitions import partition_frame
from exporter.pipeline.tables import keyed, records_of


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    c = F.col
    topics = (
        partition_frame(ctx)
        .groupBy(*keyed("topic"))
        .agg(
            F.count(c("max_active_transaction_duration_ms")).alias("partitions_with_open_transactions"),
            F.coalesce(F.max("lso_lag"), F.lit(0)).alias("max_last_stable_offset_lag"),
            F.max("max_active_transaction_duration_ms").alias("max_active_transaction_duration_ms"),
        )
    )
    return {"topics": topics}


def _assemble(a: Assembly) -> Parts:
    return Parts(
        result={"topics": tuple(sorted(records_of(TopicMetrics, a.of("topics")), key=lambda t: t.topic))}
    )


FAMILY = Family(
    name="topics",
    reads=("partitions",),
    classified=True,
    outputs=(Output("topics", TopicMetrics),),
    frames=_frames,
    assemble=_assemble,
    applies=PARTITIONS.applies,
)
