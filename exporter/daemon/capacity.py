"""Can this process cycle every configured cluster within its interval?

Two resources are shared by all clusters: the collection workers (``collection.workers``
collections at once) and the pipeline (one round computed at a time). On average a cluster
keeps a worker busy for ``collect_s`` every interval, and the pipeline for its share of a
round. When the sum over the clusters exceeds what there is, some clusters' cycles are
skipped, every interval, whatever the schedule does: the daemon says so at start (from the
costs :data:`ESTIMATED` below) and again when the costs it measures tell otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Costs:
    """What one cluster's cycle costs: its collection (wall seconds on a worker) and its
    part of a round (pipeline seconds: a fixed part per round plus a share per cluster)."""

    collect_s: float
    round_fixed_s: float
    round_per_cluster_s: float

    def describe(self) -> str:
        fixed = f"{self.round_fixed_s:.2f} s a round + " if self.round_fixed_s else ""
        share = f"{self.round_per_cluster_s:.2f} s a cluster"
        return f"collection {self.collect_s:.2f} s, pipeline {fixed}{share}"


#: The start-up estimate, from ``make bench`` on 2 cores (bench/results/fleet.md):
#: a single-broker cluster of 1000-3000 partitions collects in 0.2-0.6 s; a round of five such
#: clusters took about one second per cluster while the pipeline planned each cluster on its
#: own (the fixed part of a round is then part of each cluster's share).
ESTIMATED = Costs(collect_s=0.5, round_fixed_s=0.0, round_per_cluster_s=1.0)


def shortfall(intervals_s: Sequence[float], workers: int, costs: Costs) -> str | None:
    """Why ``len(intervals_s)`` clusters (each with its interval) cannot all be cycled on time
    with ``workers`` collection workers at ``costs``; None when they can."""
    if not intervals_s:
        return None
    per_second = sum(1 / i for i in intervals_s)
    collect = costs.collect_s * per_second
    pipeline = costs.round_per_cluster_s * per_second + costs.round_fixed_s / min(intervals_s)
    problems = []
    if collect > workers:
        problems.append(f"their collections need {collect:.1f} workers (collection.workers: {workers})")
    if pipeline > 1:
        problems.append(f"their rounds need the pipeline {pipeline:.1f} times over")
    return "; ".join(problems) or None
