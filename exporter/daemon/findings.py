"""``GET /api/v1/findings``: the last cycle's findings of each cluster, as data.

The same records ``/metrics`` renders as label sets (each open transaction that is not
merely ongoing: its class, reason, ids, offsets, age, application, and the consumer groups
it blocks), with the cycle they come from (when it was computed, whether its snapshot was
complete, what failed) and the coordinators' listing of that cycle (what ``list`` shows).
The document is described by ``docs/findings.schema.json``.

Like ``/metrics`` it is served from what the cycles already published (the
:class:`~exporter.metrics.state.StateStore` and, for what the result does not carry, the
snapshot facts :class:`FindingsIndex` keeps as a cycle listener): no Kafka or Spark call on
this path. Behind the same TLS and basic auth as ``/metrics``.

Query: ``?cluster=NAME`` (repeatable) keeps only those clusters; an unknown name is a 404.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from exporter.config import ClusterConfig
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import (
    BlockedGroupPartition,
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    ListedTransaction,
)
from exporter.operator.records import blocked_record, error_record, finding_record, listed_record
from exporter.operator.render import iso_ms

#: Where the document is served.
FINDINGS_PATH = "/api/v1/findings"
#: Bumped when a field changes meaning or goes away (new fields do not bump it).
SCHEMA_VERSION = 1
#: (status, headers, body) of an API answer.
Answer = tuple[int, list[tuple[str, str]], bytes]


@dataclass(frozen=True, slots=True)
class CycleFacts:
    """What a cycle's snapshot adds to its result for the API."""

    result: CycleResult
    complete: bool
    listed: tuple[ListedTransaction, ...]
    errors: tuple[CollectionError, ...]


class FindingsIndex:
    """A cycle listener: the snapshot facts of each cluster's last cycles, found again by
    their result. Listeners run just before the cycle publishes its state, so the last two
    are kept: the published result's facts are one of them."""

    KEPT = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: dict[str, tuple[CycleFacts, ...]] = {}

    def __call__(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        facts = CycleFacts(result, snapshot.complete, snapshot.listed_transactions, snapshot.errors)
        with self._lock:
            kept = self._facts.get(snapshot.cluster, ())
            self._facts[snapshot.cluster] = (facts, *kept)[: self.KEPT]

    def facts(self, cluster: str, result: CycleResult | None) -> CycleFacts | None:
        with self._lock:
            kept = self._facts.get(cluster, ())
        return next((f for f in kept if f.result is result), None)


class FindingsApi:
    """The endpoint: renders the document from the current store and config at each call
    (both change on reload)."""

    def __init__(
        self,
        store: Callable[[], StateStore],
        clusters: Callable[[], Sequence[ClusterConfig]],
        index: FindingsIndex,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._clusters = clusters
        self._index = index
        self._clock = clock

    def __call__(self, query: str) -> Answer:
        wanted = parse_qs(query).get("cluster")
        clusters = list(self._clusters())
        if wanted:
            unknown = sorted(set(wanted) - {c.name for c in clusters})
            if unknown:
                body = {"error": f"no such cluster: {', '.join(unknown)}"}
                return 404, _JSON, json.dumps(body).encode()
            clusters = [c for c in clusters if c.name in wanted]
        store = self._store()
        now_ms = int(self._clock() * 1000)
        document = {
            "schema_version": SCHEMA_VERSION,
            "generated_at_ms": now_ms,
            "generated_at": iso_ms(now_ms),
            "clusters": [self._cluster(c, _state(store, c.name), now_ms) for c in clusters],
        }
        return 200, _JSON, json.dumps(document).encode()

    def _cluster(self, config: ClusterConfig, state: ClusterState, now_ms: int) -> dict[str, Any]:
        result = state.result
        facts = self._index.facts(config.name, result)
        doc: dict[str, Any] = {
            "cluster": config.name,
            "bootstrap_servers": config.bootstrap_servers,
            "interval_s": config.interval_ms / 1000,
            "up": state.up,
            "cycles_complete": state.cycles_complete,
            "last_success_at_ms": state.last_success_at_ms or None,
            "last_success_at": iso_ms(state.last_success_at_ms) if state.last_success_at_ms else None,
            "cycle": None,
            "transactional_ids_visible": None,
            "open_transactions": {},
            "findings": [],
            "blocked_groups": [],
            "transactions": None,
        }
        if result is None:
            return doc
        doc["cycle"] = {
            "computed_at_ms": result.computed_at_ms,
            "computed_at": iso_ms(result.computed_at_ms),
            "age_s": round(max(0, now_ms - result.computed_at_ms) / 1000, 3),
            "snapshot_taken_at_ms": state.snapshot_taken_at_ms,
            "complete": facts.complete if facts is not None else None,
            "errors": [error_record(e) for e in facts.errors] if facts is not None else None,
        }
        doc["transactional_ids_visible"] = result.transactional_ids_visible
        doc["open_transactions"] = {c.value: n for c, n in result.open_transactions_by_class}
        blocked = result.groups.blocked if result.groups is not None else ()
        doc["findings"] = findings_records(result, blocked)
        doc["blocked_groups"] = [blocked_record(b) for b in blocked]
        if facts is not None:
            doc["transactions"] = [
                listed_record(t)
                for t in sorted(facts.listed, key=lambda t: (t.coordinator_id, t.transactional_id))
            ]
        return doc


def _state(store: StateStore, cluster: str) -> ClusterState:
    try:
        return store.get(cluster)
    except KeyError:  # a reload between reading the config and the store: nothing yet
        return ClusterState(cluster=cluster)


def findings_records(result: CycleResult, blocked: Sequence[BlockedGroupPartition]) -> list[dict[str, Any]]:
    """The result's findings as the CLI prints them, each with the groups it blocks."""
    lags: Mapping[tuple[str, int], int | None] = {
        (p.topic, p.partition): p.lso_lag for p in result.partitions
    }
    groups: dict[tuple[str, int, int, int], list[str]] = {}
    for b in blocked:
        groups.setdefault((b.topic, b.partition, b.producer_id, b.start_offset), []).append(b.group)
    records = []
    for f in result.findings:
        record = finding_record(f, lags.get((f.topic, f.partition)))
        key = (f.topic, f.partition, f.producer_id, f.start_offset)
        record["blocked_groups"] = sorted(groups.get(key, []))
        records.append(record)
    return records


_JSON = [("Content-Type", "application/json"), ("Cache-Control", "no-store")]
