"""A round: one pipeline run over the snapshots of several clusters.

The daemon hands every cluster whose snapshot is ready to :func:`compute_round` and gets each
cluster's :class:`~exporter.model.CycleResult` back, or the reason its own cycle failed. One
cluster is the round of one. A cluster whose input makes the engine fail fails only its own
cycle: the others' results are returned.

This is the contract between the daemon and the pipeline; how a round is planned is the
pipeline's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from exporter.config.groups import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import ClusterSnapshot, CycleResult, PipelineMemory, PipelineSettings
from exporter.pipeline.compute import OUTPUT_TABLES, ComputeStats, compute


@dataclass(frozen=True, slots=True)
class ClusterRun:
    """One cluster's part of a round: its snapshot, the memory its previous cycle handed on
    (None on the first), its clock and its own settings."""

    snapshot: ClusterSnapshot
    memory: PipelineMemory | None
    now_ms: int
    settings: PipelineSettings = field(default_factory=PipelineSettings)
    groups: GroupsConfig | None = None
    rules: tuple[AttributionRule, ...] = BUILTIN_RULES

    @property
    def cluster(self) -> str:
        return self.snapshot.cluster


@dataclass(frozen=True, slots=True)
class RoundResult:
    """Each cluster's result, or why its own cycle failed (one line, no secret)."""

    results: Mapping[str, CycleResult]
    failures: Mapping[str, str]
    stats: ComputeStats


def compute_round(
    spark: SparkSession, runs: Sequence[ClusterRun], *, outputs: frozenset[str] = OUTPUT_TABLES
) -> RoundResult:
    """Every cluster of ``runs`` (distinct cluster names) computed on ``spark``."""
    names = [r.cluster for r in runs]
    if len(set(names)) != len(names):
        raise ValueError("a round holds each cluster once")
    stats = ComputeStats()
    results: dict[str, CycleResult] = {}
    failures: dict[str, str] = {}
    for run in runs:
        try:
            results[run.cluster] = compute(
                spark,
                run.snapshot,
                run.settings,
                run.memory,
                run.now_ms,
                stats=stats,
                groups=run.groups,
                rules=run.rules,
                outputs=outputs,
            )
        except Exception as e:  # one cluster's failure is its own
            failures[run.cluster] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return RoundResult(results=results, failures=failures, stats=stats)
