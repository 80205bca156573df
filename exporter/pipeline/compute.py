"""Snapshots in, metrics and findings out: the orchestrator of the metric families.

A round is every cluster whose snapshot is ready (:class:`ClusterRun`), computed in ONE
plan and ONE Spark action: :func:`collect_round` builds every selected family's lazy frames
over the round's tables (each keyed by cluster) and brings them all back at once
(:mod:`exporter.pipeline.transport`); :func:`assemble_round` turns each cluster's rows into
its :class:`CycleResult` and the :class:`PipelineMemory` its next cycle starts from, family by
family (:mod:`exporter.pipeline.families`: each family's outputs, carry and assembly are
declared in its module, none is listed here). :func:`compute` is the round of one: the
operator CLI's ``find-hanging`` and the daemon's warm-up call it; the daemon's rounds go
through :func:`exporter.pipeline.rounds.compute_round`, which also keeps one cluster's
failure (or one family's) its own.

Everything runs on the DataFrame API only (no RDDs, no SparkContext), so it works on Spark
Connect too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from exporter.config.groups import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory, PipelineSettings
from exporter.pipeline import transport
from exporter.pipeline.families import registry
from exporter.pipeline.families.aborts import transaction_version
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Input
from exporter.pipeline.families.classification import FAMILY as CLASSIFICATION
from exporter.pipeline.families.classification import classified_frame, listing_incomplete
from exporter.pipeline.session import LARGE_ROUND_PARTITIONS, large_round
from exporter.pipeline.tables import Handover

__all__ = [
    "FINDINGS_OUTPUTS",
    "OUTPUT_TABLES",
    "Collected",
    "ComputeStats",
    "assemble_round",
    "collect_round",
    "compute",
    "listing_incomplete",
]

log = logging.getLogger(__name__)

#: Every output table of a cycle, by name: each family's (its module declares them).
OUTPUT_TABLES = frozenset(o.name for f in registry() for o in f.outputs)
#: What the operator CLI reads of a cycle (``find-hanging``, ``abort``): the findings, and
#: the partitions for their LSO lag. The same classification; the daemon's other tables
#: (brokers, coordinators, counts, the memory carried to a next cycle) are not planned.
FINDINGS_OUTPUTS = frozenset({"findings", "partitions"})


@dataclass
class ComputeStats:
    """What one :func:`compute` call (or round) cost: Spark actions and wall time."""

    actions: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Collected:
    """A round's rows (by output, by cluster) and, per family, the clusters it ran for."""

    rows: transport.RoundRows = field(default_factory=dict)
    ran: dict[str, frozenset[int]] = field(default_factory=dict)

    def add(self, other: Collected) -> None:
        self.rows.update(other.rows)
        self.ran.update(other.ran)


def compute(
    spark: SparkSession,
    snapshot: ClusterSnapshot,
    settings: PipelineSettings,
    memory: PipelineMemory | None,
    now_ms: int,
    *,
    stats: ComputeStats | None = None,
    groups: GroupsConfig | None = None,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
    outputs: frozenset[str] = OUTPUT_TABLES,
) -> CycleResult:
    """Classify one cluster's open transactions and compute every metric table: a round of
    one (the same plan as a round of many, with one cluster).

    ``groups``: the cluster's consumer-group family (blast radius), computed in the same
    action when enabled and the snapshot has group offsets; ``rules``: the transactional id
    -> application attribution; ``outputs``: the tables to compute (a subset of
    :data:`OUTPUT_TABLES`; the others are left empty in the result and never planned: the CLI
    asks for :data:`FINDINGS_OUTPUTS`). Only a daemon's cycle, which computes them all, may
    hand ``result.memory`` to the next cycle.

    ``memory`` is what the previous cycle of this cluster returned (``result.memory``), or
    None on the first cycle. Never raises because of what the snapshot lacks: a table whose
    source failed is empty, and transactions whose evidence is missing are ``UNKNOWN``.
    Raises when Spark fails (:func:`~exporter.pipeline.rounds.compute_round` keeps such a
    failure to the family it happened in).
    """
    st = stats if stats is not None else ComputeStats()
    run = ClusterRun(snapshot, memory, now_ms, settings, groups, tuple(rules))
    (result,) = assemble_round([run], collect_round(spark, [run], outputs, st), outputs)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "cluster %s: %d partitions, %d findings, %d Spark action(s) in %.2f s",
            snapshot.cluster,
            len(result.partitions),
            len(result.findings),
            st.actions,
            sum(st.seconds.values()),
        )
    return result


def check_outputs(outputs: frozenset[str]) -> None:
    unknown = outputs - OUTPUT_TABLES
    if unknown:
        raise ValueError(f"no such output table: {', '.join(sorted(unknown))}")


def _chosen(outputs: frozenset[str], only: str | None) -> list[tuple[Family, frozenset[str]]]:
    """The families with a selected output (``only``: that family alone), each with its
    selected outputs."""
    return [
        (f, f.output_names & outputs)
        for f in registry()
        if f.output_names & outputs and (only is None or f.name == only)
    ]


def _inputs() -> dict[str, Input]:
    return {name: given for f in registry() for name, given in f.inputs.items()}


def collect_round(
    spark: SparkSession,
    runs: Sequence[ClusterRun],
    outputs: frozenset[str],
    stats: ComputeStats,
    *,
    only: str | None = None,
) -> Collected:
    """The selected outputs of every family (``only``: of that family) for every cluster of
    ``runs``, in one Spark action. A family is planned when it runs for any cluster of the
    round (its ``applies``), over the clusters it runs for. A round of at least
    :data:`~exporter.pipeline.session.LARGE_ROUND_PARTITIONS` partitions is a large round
    (:func:`~exporter.pipeline.session.large_round`)."""
    check_outputs(outputs)
    large = sum(len(run.snapshot.partitions) for run in runs) >= LARGE_ROUND_PARTITIONS
    with large_round(spark, large), Handover(spark) as handover:
        ctx = Context(spark, runs, handover, _inputs(), large=large)
        scopes = {
            f.name: [i for i, run in enumerate(runs) if f.applies(run)] for f, _ in _chosen(outputs, only)
        }
        planned = [(f, selected) for f, selected in _chosen(outputs, only) if scopes[f.name]]
        readers = sum(len(selected) for f, selected in planned if f.classified)
        if readers and any(CLASSIFICATION.applies(run) for run in runs):
            classified = classified_frame(ctx)
            ctx.classified = _shared(ctx, classified, stats) if readers > 1 else classified
        out: dict[str, tuple[Sequence[Any], DataFrame]] = {}
        for family, selected in planned:
            view = ctx.within(scopes[family.name], family.reads)
            columns = {o.name: o.columns for o in family.outputs}
            for name, frame in family.frames(view, selected).items():
                out[name] = (columns[name], frame)
        rows = transport.collect(stats.seconds, out)
        stats.actions += 1 if out else 0
    return Collected(rows, {f.name: frozenset(scopes[f.name]) for f, _ in planned})


def _shared(ctx: Context, frame: DataFrame, st: ComputeStats) -> DataFrame:
    """A frame several outputs of the round read, made one leaf of the round's plan: a lazy
    local checkpoint (``localCheckpoint(eager=False)``), computed once inside the round's one
    action and kept in the driver's block manager until the action has run
    (``Context.checkpoint``).

    A classic session analyses every DataFrame step eagerly over the whole plan beneath it:
    with the classification (nine joins and a window) under each of the dozen output steps,
    and under the final union, that re-analysis was most of a cycle's plan building (the
    union alone: ~0.2 s of analysis at 10k partitions, ~0.03 s over the leaf). Cached with
    ``persist`` instead, the plan stayed whole and was planned once more for the cache.
    Spark Connect sends a plan as a tree, so there a frame read by six outputs travelled and
    was analysed six times with every input table inside each copy (a 512m server ran out of
    heap at 10k partitions): the checkpoint is one relation on the server, read by id.

    The CLI's two outputs (findings and partitions) read the classification too, and the
    checkpoint pays there as well: on a warm Connect engine at 3000 partitions those two
    outputs took 0.9-1.3 s with it and 1.3-1.6 s with the classification in the plan twice.

    Building the leaf plans the classification; the time is recorded as ``checkpoint``."""
    started = time.perf_counter()
    pinned = ctx.checkpoint(frame)
    st.seconds["checkpoint"] = time.perf_counter() - started
    return pinned


def assemble_round(
    runs: Sequence[ClusterRun],
    collected: Collected,
    outputs: frozenset[str],
    failed: frozenset[str] = frozenset(),
) -> list[CycleResult]:
    """Each cluster's :class:`CycleResult` from the round's rows: family by family, each after
    those it reads. A family that ``failed`` leaves its outputs empty and hands on the memory
    it was given, as it was."""
    chosen = dict((f.name, selected) for f, selected in _chosen(outputs, None))
    return [_assemble(index, run, collected, chosen, failed) for index, run in enumerate(runs)]


def _assemble(
    index: int,
    run: ClusterRun,
    collected: Collected,
    chosen: dict[str, frozenset[str]],
    failed: frozenset[str],
) -> CycleResult:
    result: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    for family in registry():
        if family.name in failed:
            memory.update((name, getattr(run.previous, name)) for name in family.carry)
            continue
        ran = index in collected.ran.get(family.name, ())
        rows = (
            {o: collected.rows.get(o, {}).get(index, []) for o in chosen.get(family.name, ())} if ran else {}
        )
        parts = family.assemble(Assembly(run, rows, ran, result))
        result.update(parts.result)
        memory.update(parts.memory)
    snapshot = run.snapshot
    return CycleResult(
        cluster=snapshot.cluster,
        computed_at_ms=run.now_ms,
        transactional_ids_visible=snapshot.transactional_ids_visible,
        transaction_version=transaction_version(snapshot),
        failed_families=tuple(sorted(failed)),
        memory=PipelineMemory(**memory),
        **result,
    )
