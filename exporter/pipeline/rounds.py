"""A round: one pipeline run over the snapshots of several clusters, in ONE plan and ONE
Spark action.

The daemon hands every cluster whose snapshot is ready to :func:`compute_round` and gets each
cluster's :class:`~exporter.model.CycleResult` back, or the reason its own cycle failed. One
cluster is the round of one. The fixed part of a cycle on Spark (building and analysing the
plan, the JIT, submitting the job, the transfer back) does not shrink with a cluster's size,
so a fleet pays it once per round instead of once per cluster
(:func:`exporter.pipeline.compute.collect_round`: every input table carries the cluster,
every family is keyed by it, the rows are split per cluster on the way out).

One cluster's bad input stays its own. When the round's action fails, each cluster is
computed again alone; when a cluster's own action fails, its families are computed one by
one, and a family that fails costs only its own outputs: they are empty, its memory is the
previous cycle's, and it is named in ``CycleResult.failed_families`` (counted by the daemon
per cluster and family). Only when the classification itself fails (every other result rests
on it) is the cluster's cycle a failure (:attr:`RoundResult.failures`). A round whose jobs were
cancelled (the daemon's deadline interrupts them), or that fails while its caller is stopping
(the session is being torn down under it), is not computed again: it raises, and logs nothing.

This is the contract between the daemon and the pipeline; how a round is planned is the
pipeline's business.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from exporter.model import CycleResult
from exporter.pipeline.compute import (
    OUTPUT_TABLES,
    Collected,
    ComputeStats,
    assemble_round,
    check_outputs,
    collect_round,
)
from exporter.pipeline.families import registry
from exporter.pipeline.families.base import ClusterRun

__all__ = ["ClusterRun", "RoundResult", "compute_round"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoundResult:
    """Each cluster's result, or why its own cycle failed (one line, no secret)."""

    results: Mapping[str, CycleResult]
    failures: Mapping[str, str]
    stats: ComputeStats


class _ClusterFailedError(Exception):
    """A cluster's essential family failed: the cluster's cycle fails (the first error)."""


def compute_round(
    spark: SparkSession,
    runs: Sequence[ClusterRun],
    *,
    outputs: frozenset[str] = OUTPUT_TABLES,
    stopping: Callable[[], bool] = lambda: False,
) -> RoundResult:
    """Every cluster of ``runs`` (distinct cluster names) computed on ``spark``, in one Spark
    action unless the round fails (see the module's doc). ``stopping``: true once the caller
    is stopping; a failure from then on ends the round."""
    ended = _Ended(stopping)
    names = [r.cluster for r in runs]
    if len(set(names)) != len(names):
        raise ValueError("a round holds each cluster once")
    check_outputs(outputs)
    stats = ComputeStats()
    if not runs:
        return RoundResult(results={}, failures={}, stats=stats)
    if len(runs) > 1:
        try:
            together = assemble_round(runs, collect_round(spark, runs, outputs, stats), outputs)
            return RoundResult(
                results={r.cluster: together[i] for i, r in enumerate(runs)}, failures={}, stats=stats
            )
        except Exception as e:
            ended.raise_if(e)
            log.warning(
                "a round of %d clusters failed (%s); computing each cluster alone", len(runs), _line(e)
            )
    results: dict[str, CycleResult] = {}
    failures: dict[str, str] = {}
    for run in runs:
        try:
            results[run.cluster] = _alone(spark, run, outputs, stats, ended)
        except Exception as e:  # one cluster's failure is its own
            ended.raise_if(e)
            failures[run.cluster] = _line(
                e.__cause__ if isinstance(e, _ClusterFailedError) and e.__cause__ else e
            )
            log.warning("pipeline failed for cluster %s: %s", run.cluster, failures[run.cluster])
    return RoundResult(results=results, failures=failures, stats=stats)


def _alone(
    spark: SparkSession, run: ClusterRun, outputs: frozenset[str], stats: ComputeStats, ended: _Ended
) -> CycleResult:
    """One cluster's cycle: in one action, else family by family."""
    try:
        return assemble_round([run], collect_round(spark, [run], outputs, stats), outputs)[0]
    except Exception as e:
        ended.raise_if(e)
        log.warning(
            "cycle of cluster %s failed (%s); computing its families one by one", run.cluster, _line(e)
        )
    collected = Collected()
    failed: set[str] = set()
    # The essential family first: when it fails, the others need not be tried.
    for family in sorted(registry(), key=lambda f: not f.essential):
        if not family.output_names & outputs:
            continue
        try:
            collected.add(collect_round(spark, [run], outputs, stats, only=family.name))
        except Exception as e:
            ended.raise_if(e)
            log.warning("cluster %s: the %s family failed: %s", run.cluster, family.name, _line(e))
            if family.essential:
                raise _ClusterFailedError(family.name) from e
            failed.add(family.name)
    return assemble_round([run], collected, outputs, frozenset(failed))[0]


@dataclass(frozen=True, slots=True)
class _Ended:
    """When a failure ends the round rather than being the failing cluster's or family's own."""

    stopping: Callable[[], bool]

    def raise_if(self, error: Exception) -> None:
        """Raise ``error`` when the caller is stopping (its session torn down under the round:
        every later job would fail too, and say nothing about the clusters), or when the jobs
        were cancelled from outside (the daemon's deadline interrupts a run by its tag:
        computing again would only run past the deadline)."""
        if self.stopping():
            raise error
        text = str(error).lower()
        if "cancelled" in text or "canceled" in text or "interrupted" in text:
            raise error


def _line(error: BaseException) -> str:
    """The error's type and the first line of its message."""
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
