"""What one cycle adds to the history, as row tuples in the datasets' column order. Pure.

:class:`CycleRows` turns each (snapshot, result) into rows; it remembers the transactions it
stored in the previous cycle so it can tell which of them closed, and how, as far as the
coordinator shows it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass

from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass

Row = tuple[object, ...]
Rows = dict[str, list[Row]]
#: (topic, partition, producer id, start offset): one partition-level transaction.
Identity = tuple[str, int, int, int]

#: Coordinator states and what a closed transaction's end was.
_END_BY_STATE = {
    "CompleteCommit": "committed",
    "PrepareCommit": "committed",
    "CompleteAbort": "aborted",
    "PrepareAbort": "aborted",
    "PrepareEpochFence": "fenced",
}


def utc_date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class Tracked:
    finding: Finding
    seen_ms: int


def empty_rows() -> Rows:
    return defaultdict(list)


class CycleRows:
    """Rows of successive cycles of one cluster, with the closed-transaction bookkeeping."""

    def __init__(self) -> None:
        #: Stored transactions seen open in the previous cycle, per cluster.
        self._open: dict[str, dict[Identity, Tracked]] = {}

    @property
    def tracked(self) -> int:
        return sum(len(v) for v in self._open.values())

    def rows(self, snapshot: ClusterSnapshot, result: CycleResult) -> Rows:
        out: Rows = empty_rows()
        cluster = result.cluster
        at = result.computed_at_ms
        date = utc_date(at)
        key = (cluster, date, at)
        by_class = dict(result.open_transactions_by_class)
        lagging = [p for p in result.partitions if p.lso_lag]
        out["cycles"].append(
            (
                *key,
                snapshot.taken_at_ms,
                "complete" if snapshot.complete else "partial",
                len(snapshot.errors),
                len(snapshot.partitions),
                len(lagging),
                max((p.lso_lag or 0 for p in lagging), default=0),
                *(
                    int(by_class.get(c, 0))
                    for c in (
                        TxnClass.ONGOING,
                        TxnClass.LATE,
                        TxnClass.SUSPECTED_HANGING,
                        TxnClass.HANGING,
                        TxnClass.TWO_PHASE_COMMIT,
                        TxnClass.UNKNOWN,
                    )
                ),
            )
        )
        out["errors"].extend(
            (*key, e.api, e.error, e.broker_id, e.topic, e.partition, e.message) for e in snapshot.errors
        )
        out["lso_lag"].extend(
            (*key, p.topic, p.partition, p.leader, p.lso_lag, p.max_active_transaction_duration_ms)
            for p in lagging
        )
        stored: dict[Identity, Tracked] = {}
        for f in result.findings:
            if f.txn_class is TxnClass.ONGOING:
                continue
            stored[(f.topic, f.partition, f.producer_id, f.start_offset)] = Tracked(f, at)
            out["transactions"].append(
                (
                    *key,
                    f.topic,
                    f.partition,
                    f.broker_id,
                    f.producer_id,
                    f.producer_epoch,
                    f.coordinator_epoch,
                    f.start_offset,
                    f.transactional_id,
                    f.application,
                    f.txn_class.value,
                    f.late,
                    (
                        f.hanging_reason.value
                        if f.hanging_reason
                        else f.unknown_reason.value
                        if f.unknown_reason
                        else None
                    ),
                    f.start_time_ms,
                    f.start_time_source.value,
                    f.duration_ms,
                    f.coordinator_id,
                    f.coordinator_state,
                    f.transaction_timeout_ms,
                    f.last_timestamp_ms,
                )
            )
        out["closed"].extend(self._closed(snapshot, cluster, key, stored))
        return out

    def _closed(
        self,
        snapshot: ClusterSnapshot,
        cluster: str,
        key: tuple[str, str, int],
        stored: dict[Identity, Tracked],
    ) -> list[Row]:
        previous = self._open.get(cluster, {})
        open_now = {
            (p.topic, p.partition, p.producer_id, p.current_txn_start_offset)
            for p in snapshot.producers
            if p.current_txn_start_offset >= 0
        }
        unread_brokers = {e.broker_id for e in snapshot.errors if e.first_read_of_producers and not e.topic}
        unread_partitions = snapshot.unread_partitions()
        unread_topics = snapshot.unread_topics()
        rows: list[Row] = []
        still: dict[Identity, Tracked] = {}
        for ident, tracked in previous.items():
            f = tracked.finding
            if ident in stored:
                continue
            if ident in open_now:  # open, but ongoing now or past max_findings: keep watching
                still[ident] = tracked
                continue
            if (
                f.broker_id in unread_brokers
                or (f.topic, f.partition) in unread_partitions
                or f.topic in unread_topics
                or (not snapshot.producers and snapshot.errors)
            ):
                still[ident] = tracked  # not read this cycle: it may still be open
                continue
            end, state = _end(snapshot, f)
            rows.append(
                (
                    *key,
                    f.topic,
                    f.partition,
                    f.producer_id,
                    f.producer_epoch,
                    f.start_offset,
                    f.transactional_id,
                    f.txn_class.value,
                    tracked.seen_ms,
                    end,
                    state,
                )
            )
        self._open[cluster] = {**still, **stored}
        return rows


def _end(snapshot: ClusterSnapshot, f: Finding) -> tuple[str, str | None]:
    """How a closed transaction ended, as far as its coordinator shows it."""
    tid = f.transactional_id
    described = next(
        (
            d
            for d in snapshot.transactions
            if tid is not None and d.transactional_id == tid and d.error is None
        ),
        None,
    )
    listed = next(
        (
            t
            for t in snapshot.listed_transactions
            if (tid is not None and t.transactional_id == tid)
            or (tid is None and t.producer_id == f.producer_id)
        ),
        None,
    )
    state = described.state if described else listed.state if listed else None
    producer_id = described.producer_id if described else listed.producer_id if listed else -1
    if f.txn_class in (TxnClass.HANGING, TxnClass.SUSPECTED_HANGING) and (
        state is None or producer_id != f.producer_id or state in ("Empty", "Dead")
    ):
        return "no_coordinator", state
    if state is None:
        return "unknown", None
    if producer_id >= 0 and producer_id != f.producer_id:
        return "fenced", state
    return _END_BY_STATE.get(state, "ended"), state
