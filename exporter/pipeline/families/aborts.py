"""KIP-588 timeout aborts: transactions the coordinator aborted on timeout, seen from outside
as a transaction Ongoing past its deadline and next seen with a bumped epoch; the Ongoing
transactions watched for the next cycle, and the running totals per coordinator."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exporter.model import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ClusterSnapshot,
    CoordinatorCount,
    CoordinatorMetrics,
    CoordinatorTimeoutAbort,
    PipelineMemory,
    WatchedTransaction,
)
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Input, Output, Parts, Rows
from exporter.pipeline.families.classification import NOT_FOUND_ERRORS
from exporter.pipeline.families.coordinators import described_ok
from exporter.pipeline.tables import CLUSTER, keyed, records_of

#: Coordinator states a KIP-588 timeout abort passes through.
ABORT_STATES = ("PrepareAbort", "CompleteAbort")


def transaction_version(snapshot: ClusterSnapshot) -> int | None:
    """The finalized transaction.version of the cluster (every broker reports the same)."""
    versions = [c.transaction_version for c in snapshot.broker_configs if c.transaction_version >= 0]
    return max(versions) if versions else None


def _watched_frame(ctx: Context) -> DataFrame:
    """KIP-588: every Ongoing transaction with its deadline (start + its own timeout); 2PC
    transactions never time out and are left out."""
    c = F.col
    return (
        described_ok(ctx)
        .where(
            (c("state") == "Ongoing")
            & (c("start_time_ms") >= 0)
            & (c("timeout_ms") >= 0)
            & (c("timeout_ms") != TWO_PHASE_COMMIT_TIMEOUT_MS)
        )
        .select(
            CLUSTER,
            "transactional_id",
            "coordinator_id",
            "producer_id",
            "producer_epoch",
            (c("start_time_ms") + c("timeout_ms")).alias("deadline_ms"),
            ctx.value(lambda run: run.snapshot.taken_at_ms).alias("seen_at_ms"),
        )
    )


def _timeout_abort_frame(ctx: Context) -> DataFrame:
    """KIP-588: last cycle's Ongoing transactions the coordinator has since aborted on timeout.

    The transactional id is next seen with a bumped epoch (or a new producer id), and either
    * in PrepareAbort/CompleteAbort after its deadline passed (the abort itself), or
    * Empty after its deadline passed (the producer re-initialised after the abort), or
    * Ongoing again, when it was already past its deadline when last seen Ongoing (so the
      coordinator aborted it within its cleanup interval) and the epoch moved as only a
      re-initialisation moves it: by 2 or more (abort + InitProducerId) with transactions
      v2, where every commit bumps the epoch by 1; by any step with transactions v1.
    A commit is never counted: a late commit bumps the epoch too (v2). docs/metrics.md says
    what cannot be seen (a timeout abort followed, within one interval, by a re-init and a
    new transaction that was never seen overdue).
    """
    c = F.col
    before = ctx["previous_watched"].select(
        CLUSTER,
        "transactional_id",
        c("producer_id").alias("old_producer_id"),
        c("producer_epoch").alias("old_epoch"),
        "deadline_ms",
        "seen_at_ms",
    )
    now = described_ok(ctx).select(
        CLUSTER, "transactional_id", "coordinator_id", "state", "producer_id", "producer_epoch"
    )
    new_producer = (c("producer_id") != c("old_producer_id")) & (c("producer_id") >= 0)
    same_producer = c("producer_id") == c("old_producer_id")
    bumped = (same_producer & (c("producer_epoch") > c("old_epoch"))) | new_producer
    reinit_step = ctx.value(lambda run: 1 if transaction_version(run.snapshot) == 1 else 2)
    reinitialised = new_producer | (same_producer & (c("producer_epoch") >= c("old_epoch") + reinit_step))
    due = c("deadline_ms") <= ctx.value(lambda run: run.now_ms)
    overdue_when_seen = c("deadline_ms") <= c("seen_at_ms")
    counted = (bumped & due & c("state").isin(*ABORT_STATES, "Empty")) | (
        overdue_when_seen & (c("state") == "Ongoing") & reinitialised
    )
    return (
        before.join(now, keyed("transactional_id"))
        .where(counted)
        .select(
            CLUSTER,
            "transactional_id",
            "coordinator_id",
            c("old_producer_id").alias("producer_id"),
            "old_epoch",
            c("producer_epoch").alias("new_epoch"),
        )
    )


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    out: dict[str, DataFrame] = {}
    if "watched" in selected and ctx.any(_has_ongoing):
        out["watched"] = _watched_frame(ctx)
    if "aborts" in selected and ctx.any(_may_have_aborted):
        out["aborts"] = _timeout_abort_frame(ctx)
    return out


def _next_watched(
    snapshot: ClusterSnapshot,
    mem: PipelineMemory,
    rows: Rows,
    aborts: tuple[CoordinatorTimeoutAbort, ...],
) -> tuple[WatchedTransaction, ...]:
    """This cycle's Ongoing transactions, plus last cycle's whose id could not be read now:
    a coordinator that is unreadable for a cycle does not hide a timeout abort."""
    found = {w.transactional_id: w for w in records_of(WatchedTransaction, rows)}
    counted = {a.transactional_id for a in aborts}
    unreadable = _unreadable_transactional_ids(snapshot)
    for w in mem.watched:
        if w.transactional_id in unreadable and w.transactional_id not in found.keys() | counted:
            found[w.transactional_id] = w
    return tuple(sorted(found.values(), key=lambda w: w.transactional_id))


def _unreadable_transactional_ids(snapshot: ClusterSnapshot) -> set[str]:
    """Ids this cycle listed or tried to describe without getting an answer."""
    failed = {
        t.transactional_id
        for t in snapshot.transactions
        if t.error is not None and t.error not in NOT_FOUND_ERRORS
    }
    described = {t.transactional_id for t in snapshot.transactions}
    listed = {t.transactional_id for t in snapshot.listed_transactions}
    return failed | (listed - described)


def _abort_totals(
    mem: PipelineMemory,
    coordinators: tuple[CoordinatorMetrics, ...],
    aborts: tuple[CoordinatorTimeoutAbort, ...],
) -> tuple[CoordinatorCount, ...]:
    """Running KIP-588 totals per coordinator; every coordinator seen has a total (0 before
    its first abort), so the counter series exist before anything happens."""
    totals = {c.coordinator_id: c.count for c in mem.timeout_aborts_total}
    for c in coordinators:
        totals.setdefault(c.coordinator_id, 0)
    for a in aborts:
        totals[a.coordinator_id] = totals.get(a.coordinator_id, 0) + 1
    return tuple(CoordinatorCount(k, v) for k, v in sorted(totals.items()))


def _assemble(a: Assembly) -> Parts:
    mem = a.run.previous
    aborts = tuple(
        sorted(records_of(CoordinatorTimeoutAbort, a.of("aborts")), key=lambda x: x.transactional_id)
    )
    return Parts(
        result={"timeout_aborts": aborts},
        memory={
            "watched": _next_watched(a.run.snapshot, mem, a.of("watched"), aborts),
            "timeout_aborts_total": _abort_totals(mem, a.result.get("coordinators", ()), aborts),
        },
    )


def _has_ongoing(run: ClusterRun) -> bool:
    return any(d.state == "Ongoing" for d in run.snapshot.transactions)


def _may_have_aborted(run: ClusterRun) -> bool:
    return bool(run.previous.watched) and bool(run.snapshot.transactions)


FAMILY = Family(
    name="aborts",
    reads=("transactions", "previous_watched"),
    outputs=(Output("watched", WatchedTransaction), Output("aborts", CoordinatorTimeoutAbort)),
    inputs={"previous_watched": Input(WatchedTransaction, lambda run: run.previous.watched)},
    carry=("watched", "timeout_aborts_total"),
    frames=_frames,
    assemble=_assemble,
    applies=lambda run: _has_ongoing(run) or _may_have_aborted(run),
    after=("coordinators",),
)
