"""Coordinators: the age of each one's oldest open transaction (ActiveTransactionOpenTimeMaxMs,
two-phase-commit ones apart), how long an id has been waiting for its markers (PrepareCommit /
PrepareAbort), and its transactional ids by state; what it remembers for a cycle that cannot
read a coordinator (its oldest open start) and the ids seen preparing since when."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from exporter.model import (
    COORDINATOR_OPEN_CARRY_MS,
    COORDINATOR_STATES,
    OPEN_COORDINATOR_STATES,
    PREPARE_STATES,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    ClusterSnapshot,
    CoordinatorMetrics,
    CoordinatorOpenSince,
    CoordinatorStateCount,
    PreparingTransaction,
)
from exporter.pipeline.families.base import Assembly, ClusterRun, Context, Family, Input, Output, Parts
from exporter.pipeline.tables import (
    CLUSTER,
    BrokerRow,
    build_side,
    keyed,
    one_partition,
    record_of,
    records_of,
)


def described_ok(ctx: Context) -> DataFrame:
    """The transactions DescribeTransactions read without an error."""
    return ctx["transactions"].where(F.col("error").isNull())


def _unread_coordinators(run: ClusterRun) -> list[BrokerRow]:
    """Coordinators whose transactions this cycle could not read: not answering
    ListTransactions, or with a DescribeTransactions error; every known broker when a
    describe stage was cut by the deadline, or failed with no broker named."""
    snapshot: ClusterSnapshot = run.snapshot
    failed = {
        e.broker_id for e in snapshot.errors if e.api == "DescribeTransactions" and not e.of_visibility_probe
    }
    known = {b.broker_id for b in snapshot.brokers}
    unread = known if -1 in failed else (known - set(snapshot.coordinators_listed)) | failed
    return [BrokerRow(b) for b in sorted(unread)]


def _open_since_frame(ctx: Context) -> DataFrame:
    """Each coordinator's oldest open transaction start (:class:`CoordinatorOpenSince`):
    this cycle's, and for a coordinator this cycle could not read the remembered one too,
    while it is still a known broker and for :data:`COORDINATOR_OPEN_CARRY_MS` at most."""
    c = F.col
    is_2pc = c("timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS
    seen_at = ctx.value(lambda run: run.snapshot.taken_at_ms)
    current = (
        described_ok(ctx)
        .where(c("state").isin(*OPEN_COORDINATOR_STATES) & (c("start_time_ms") >= 0))
        .select(
            CLUSTER,
            "coordinator_id",
            F.when(~is_2pc, c("start_time_ms")).alias("open_since_ms"),
            F.when(is_2pc, c("start_time_ms")).alias("two_phase_since_ms"),
            seen_at.cast("long").alias("read_at_ms"),
        )
    )
    if ctx.any(lambda run: bool(run.previous.coordinator_open)):
        known = build_side(ctx["brokers"].select(CLUSTER, c("broker_id").alias("coordinator_id")))
        unread = build_side(
            ctx["unread_coordinators"].select(CLUSTER, c("broker_id").alias("coordinator_id"))
        )
        carried = (
            ctx["previous_coordinator_open"]
            .where(c("read_at_ms") >= seen_at - COORDINATOR_OPEN_CARRY_MS)
            .join(known, keyed("coordinator_id"), "left_semi")
            .join(unread, keyed("coordinator_id"), "left_semi")
        )
        current = one_partition(current.unionByName(carried))
    return current.groupBy(*keyed("coordinator_id")).agg(
        F.min("open_since_ms").alias("open_since_ms"),
        F.min("two_phase_since_ms").alias("two_phase_since_ms"),
        F.min("read_at_ms").alias("read_at_ms"),
    )


def _preparing_frame(ctx: Context) -> DataFrame:
    """Markers pending: every id listed in PrepareCommit/PrepareAbort, since the first cycle
    that listed it in the same state with the same producer id (a new sighting starts at
    this snapshot's time). The coordinator is no part of the sighting: when
    ``__transaction_state`` leadership moves, the new coordinator loads the id in the same
    state and writes the same markers, so the wait goes on. A remembered id whose coordinator
    did not answer ListTransactions this cycle, and that no coordinator lists now, is kept as
    it was while its coordinator is still a broker of the cluster: no evidence either way."""
    c = F.col
    sighting = keyed("transactional_id", "producer_id", "state")
    previous = ctx["previous_preparing"]
    listed = (
        ctx["listed_transactions"]
        .where(c("state").isin(*PREPARE_STATES))
        .select("coordinator_id", *sighting)
        .dropDuplicates()
    )
    first_seen = previous.groupBy(*sighting).agg(F.min("since_ms").alias("previous_since_ms"))
    seen_at = ctx.value(lambda run: run.snapshot.taken_at_ms)
    current = listed.join(build_side(first_seen), sighting, "left").select(
        "coordinator_id",
        *sighting,
        F.coalesce(c("previous_since_ms"), seen_at.cast("long")).alias("since_ms"),
    )
    answered = ctx["coordinators_listed"].select(CLUSTER, c("broker_id").alias("coordinator_id"))
    known = ctx["brokers"].select(CLUSTER, c("broker_id").alias("coordinator_id"))
    unanswered = (
        previous.join(build_side(answered), keyed("coordinator_id"), "left_anti")
        .join(build_side(known), keyed("coordinator_id"), "left_semi")
        .join(build_side(listed.select(*sighting)), sighting, "left_anti")
    )
    return one_partition(current.unionByName(unanswered.select("coordinator_id", *sighting, "since_ms")))


def _coordinator_frame(ctx: Context, preparing: DataFrame | None, open_since: DataFrame) -> DataFrame:
    """Every coordinator that answered ListTransactions (or appears in a result, or is kept
    from the previous cycle while unread), zero-filled. The open-time gauge leaves
    two-phase-commit transactions out: they get their own."""
    c = F.col
    now = ctx.value(lambda run: run.now_ms)

    def age(since: str) -> Column:
        return F.greatest(F.lit(0), now - c(since))

    union = (
        ctx["coordinators_listed"]
        .select(CLUSTER, c("broker_id").alias("coordinator_id"))
        .unionByName(ctx["listed_transactions"].select(CLUSTER, "coordinator_id"))
        .unionByName(
            open_since.select(
                CLUSTER,
                "coordinator_id",
                age("open_since_ms").alias("open_age"),
                age("two_phase_since_ms").alias("two_phase_age"),
            ),
            allowMissingColumns=True,
        )
    )
    if preparing is not None:
        union = union.unionByName(
            preparing.select(CLUSTER, "coordinator_id", age("since_ms").alias("prepare_age")),
            allowMissingColumns=True,
        )
    else:
        union = union.select("*", F.lit(None).cast("long").alias("prepare_age"))
    return (
        one_partition(union)
        .groupBy(*keyed("coordinator_id"))
        .agg(
            F.coalesce(F.max("open_age"), F.lit(0)).alias("active_transaction_open_time_max_ms"),
            F.coalesce(F.max("two_phase_age"), F.lit(0)).alias("two_phase_commit_open_time_max_ms"),
            F.coalesce(F.max("prepare_age"), F.lit(0)).alias("prepare_time_max_ms"),
        )
    )


def _is_preparing(run: ClusterRun) -> bool:
    return bool(run.previous.preparing) or any(
        x.state in PREPARE_STATES for x in run.snapshot.listed_transactions
    )


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    out: dict[str, DataFrame] = {}
    preparing = None
    if ({"preparing", "coordinators"} & selected) and ctx.any(_is_preparing):
        preparing = _preparing_frame(ctx)
        if "preparing" in selected:
            out["preparing"] = preparing
    if not {"coordinators", "coordinator_states", "coordinator_open"} & selected:
        return out
    open_since = _open_since_frame(ctx)
    if "coordinators" in selected:
        out["coordinators"] = _coordinator_frame(ctx, preparing, open_since)
    if "coordinator_states" in selected:
        out["coordinator_states"] = (
            ctx["listed_transactions"].groupBy(*keyed("coordinator_id", "state")).count()
        )
    if "coordinator_open" in selected:
        out["coordinator_open"] = open_since
    return out


def _assemble(a: Assembly) -> Parts:
    states: dict[int, dict[str, int]] = {}
    for s in records_of(CoordinatorStateCount, a.of("coordinator_states")):
        states.setdefault(s.coordinator_id, {})[s.state] = s.count
    coordinators = sorted(
        (
            record_of(
                CoordinatorMetrics,
                r,
                transactions_by_state=tuple(
                    (state, states.get(r["coordinator_id"], {}).get(state, 0)) for state in COORDINATOR_STATES
                ),
            )
            for r in a.of("coordinators")
        ),
        key=lambda c: c.coordinator_id,
    )
    preparing = sorted(
        records_of(PreparingTransaction, a.of("preparing")),
        key=lambda p: (p.coordinator_id, p.transactional_id),
    )
    open_since = sorted(
        (
            o
            for o in records_of(CoordinatorOpenSince, a.of("coordinator_open"))
            if o.open_since_ms is not None or o.two_phase_since_ms is not None
        ),
        key=lambda o: o.coordinator_id,
    )
    return Parts(
        result={"coordinators": tuple(coordinators)},
        memory={"preparing": tuple(preparing), "coordinator_open": tuple(open_since)},
    )


def _has_coordinators(run: ClusterRun) -> bool:
    s = run.snapshot
    return bool(
        s.coordinators_listed
        or s.transactions
        or s.listed_transactions
        or run.previous.coordinator_open
        or _is_preparing(run)
    )


FAMILY = Family(
    name="coordinators",
    reads=(
        "transactions",
        "brokers",
        "coordinators_listed",
        "listed_transactions",
        "unread_coordinators",
        "previous_preparing",
        "previous_coordinator_open",
    ),
    outputs=(
        Output("coordinators", CoordinatorMetrics),
        Output("coordinator_states", CoordinatorStateCount),
        Output("coordinator_open", CoordinatorOpenSince),
        Output("preparing", PreparingTransaction),
    ),
    inputs={
        "unread_coordinators": Input(BrokerRow, _unread_coordinators),
        "previous_preparing": Input(PreparingTransaction, lambda run: run.previous.preparing),
        "previous_coordinator_open": Input(CoordinatorOpenSince, lambda run: run.previous.coordinator_open),
    },
    carry=("preparing", "coordinator_open"),
    frames=_frames,
    assemble=_assemble,
    applies=_has_coordinators,
)
