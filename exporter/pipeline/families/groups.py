"""The consumer-group family, for now through ``exporter.pipeline.groups`` (its own SQL and
its rows as JSON), in a round of one; it moves onto the family declarations next."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exporter.model import Finding
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Output, Parts
from exporter.pipeline.groups import group_frames, group_input_frames, groups_result
from exporter.pipeline.tables import CLUSTER, frame_of

#: The APIs of the group collection: a failure may leave groups out of the snapshot.
GROUP_APIS = frozenset({"ListGroups", "OffsetFetch"})


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One output row of the consumer-group family (:meth:`GroupFrames.single`)."""

    kind: str
    row: str


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    frames = []
    for index, run in enumerate(ctx.runs):
        if not _applies(run):
            continue
        assert run.groups is not None
        snapshot = run.snapshot
        inputs = group_input_frames(
            ctx.spark, snapshot.group_offsets, snapshot.consumable_checks, run.previous.groups, ctx.handover
        )
        mine = F.col(CLUSTER) == index
        txns = ctx.classified_frame
        family = group_frames(
            inputs,
            ctx["partitions"].where(mine).drop(CLUSTER),
            txns.where(mine).drop(CLUSTER) if txns is not None else frame_of(ctx.spark, Finding, []),
            run.groups,
            run.now_ms,
            run.rules,
            offsets_incomplete=any(e.api in GROUP_APIS for e in snapshot.errors),
        )
        frames.append(family.single().select(F.lit(index).cast("long").alias(CLUSTER), "*"))
    return {"groups": functools.reduce(DataFrame.unionAll, frames)}


def _assemble(a: Assembly) -> Parts:
    if not a.ran:
        return Parts(result={"groups": None}, memory={"groups": a.run.previous.groups})
    family = groups_result(a.of("groups"))
    return Parts(result={"groups": family}, memory={"groups": family.carry})


def _applies(run: ClusterRun) -> bool:
    # A cycle that read no group offsets still runs the family while groups were waiting at
    # an LSO: kept through a lost group collection (their blocked series and page go on), or
    # ended by a complete one that no longer shows them.
    config = run.groups
    return (
        config is not None
        and config.enabled
        and bool(run.snapshot.group_offsets or run.previous.groups.at_lso)
    )


FAMILY = Family(
    name="groups",
    reads=("partitions",),
    classified=True,
    outputs=(Output("groups", GroupRow),),
    carry=("groups",),
    frames=_frames,
    assemble=_assemble,
    applies=_applies,
)
