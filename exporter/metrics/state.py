"""What the scheduled jobs publish and the scrape renders: one immutable record per cluster.

Jobs replace a cluster's :class:`ClusterState` in one assignment; the collector reads a
reference, so a scrape never sees half a cycle and never waits for one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from exporter.model import CycleResult


@dataclass(frozen=True, slots=True)
class ClusterState:
    cluster: str
    #: The latest result computed from a snapshot (complete or partial). Kept when a later
    #: cycle fails entirely, so alerts do not resolve because the exporter lost the cluster;
    #: the snapshot age says how old it is.
    result: CycleResult | None = None
    snapshot_taken_at_ms: int = 0
    #: 1 when the last cycle was complete, 0 when any part of it failed.
    up: bool = False
    last_success_at_ms: int = 0
    cycles_complete: int = 0
    stage_seconds: tuple[tuple[str, float], ...] = field(default=())


class StateStore:
    """The latest :class:`ClusterState` of each cluster."""

    def __init__(self, clusters: list[str]) -> None:
        self._lock = threading.Lock()
        self._states: Mapping[str, ClusterState] = MappingProxyType(
            {c: ClusterState(cluster=c) for c in clusters}
        )

    def get(self, cluster: str) -> ClusterState:
        return self._states[cluster]

    def all(self) -> list[ClusterState]:
        return list(self._states.values())

    def put(self, state: ClusterState) -> None:
        with self._lock:
            states = dict(self._states)
            states[state.cluster] = state
            self._states = MappingProxyType(states)

    @property
    def ready(self) -> bool:
        """True once any cluster has completed a cycle (see docs/operations.md)."""
        return any(s.cycles_complete > 0 for s in self._states.values())
