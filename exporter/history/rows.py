"""What one cycle adds to the history, as rows of the datasets' records
(``exporter.history.schema``), built by column name. Pure.

:class:`CycleRows` turns each (snapshot, result) into rows; it remembers the transactions it
stored in the previous cycle so it can tell which of them closed, and how, as far as the
coordinator shows it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass
from typing import TypedDict

from exporter.history.schema import (
    ClosedRow,
    CycleRow,
    ErrorRow,
    LsoLagRow,
    Row,
    TransactionRow,
)
from exporter.model import ClusterSnapshot, CycleResult, Finding, TxnClass

#: Dataset name -> its rows.
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


class _Key(TypedDict):
    """The columns every row of a cycle starts with."""

    cluster: str
    date: str
    cycle_ms: int


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
        key = _Key(cluster=cluster, date=date, cycle_ms=at)
        by_class = dict(result.open_transactions_by_class)
        lagging = [p for p in result.partitions if p.lso_lag]
        out["cycles"].append(
            CycleRow(
                **key,
                snapshot_ms=snapshot.taken_at_ms,
                outcome="complete" if snapshot.complete else "partial",
                errors=len(snapshot.errors),
                partitions=len(snapshot.partitions),
                lagging_partitions=len(lagging),
                max_lso_lag=max((p.lso_lag or 0 for p in lagging), default=0),
                open_ongoing=int(by_class.get(TxnClass.ONGOING, 0)),
                open_late=int(by_class.get(TxnClass.LATE, 0)),
                open_suspected_hanging=int(by_class.get(TxnClass.SUSPECTED_HANGING, 0)),
                open_hanging=int(by_class.get(TxnClass.HANGING, 0)),
                open_two_phase_commit=int(by_class.get(TxnClass.TWO_PHASE_COMMIT, 0)),
                open_unknown=int(by_class.get(TxnClass.UNKNOWN, 0)),
            )
        )
        out["errors"].extend(
            ErrorRow(
                **key,
                api=e.api,
                error=e.error,
                broker_id=e.broker_id,
                topic=e.topic,
                partition=e.partition,
                message=e.message,
            )
            for e in snapshot.errors
        )
        out["lso_lag"].extend(
            LsoLagRow(
                **key,
                topic=p.topic,
                partition=p.partition,
                leader=p.leader,
                lso_lag=p.lso_lag or 0,  # lagging: never None or 0
                max_active_transaction_duration_ms=p.max_active_transaction_duration_ms,
            )
            for p in lagging
        )
        stored: dict[Identity, Tracked] = {}
        for f in result.findings:
            if f.txn_class is TxnClass.ONGOING:
                continue
            stored[(f.topic, f.partition, f.producer_id, f.start_offset)] = Tracked(f, at)
            out["transactions"].append(_transaction_row(key, f))
        out["closed"].extend(self._closed(snapshot, cluster, key, stored))
        return out

    def _closed(
        self,
        snapshot: ClusterSnapshot,
        cluster: str,
        key: _Key,
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
                ClosedRow(
                    **key,
                    topic=f.topic,
                    partition=f.partition,
                    producer_id=f.producer_id,
                    producer_epoch=f.producer_epoch,
                    start_offset=f.start_offset,
                    transactional_id=f.transactional_id,
                    last_class=f.txn_class.value,
                    last_seen_ms=tracked.seen_ms,
                    end=end,
                    coordinator_state=state,
                )
            )
        self._open[cluster] = {**still, **stored}
        return rows


def _transaction_row(key: _Key, f: Finding) -> TransactionRow:
    if f.hanging_reason:
        reason: str | None = f.hanging_reason.value
    else:
        reason = f.unknown_reason.value if f.unknown_reason else None
    return TransactionRow(
        **key,
        topic=f.topic,
        partition=f.partition,
        broker_id=f.broker_id,
        producer_id=f.producer_id,
        producer_epoch=f.producer_epoch,
        coordinator_epoch=f.coordinator_epoch,
        start_offset=f.start_offset,
        transactional_id=f.transactional_id,
        application=f.application,
        txn_class=f.txn_class.value,
        late=f.late,
        reason=reason,
        start_time_ms=f.start_time_ms,
        start_time_source=f.start_time_source.value,
        duration_ms=f.duration_ms,
        coordinator_id=f.coordinator_id,
        coordinator_state=f.coordinator_state,
        transaction_timeout_ms=f.transaction_timeout_ms,
        last_timestamp_ms=f.last_timestamp_ms,
    )


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
