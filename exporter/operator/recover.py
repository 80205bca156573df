"""``recover``: end everything one application left open, one action per transaction.

An application that died (a cancelled Flink job, a crashed Kafka Streams instance whose
transactional ids are never used again) leaves open transactions that block every
read_committed consumer downstream until they time out, or for ever when they hang. This
command finds them all at once and ends each the way the single-transaction commands do:

* what is open, and how it is classed, comes from one snapshot classified by the pipeline
  (:func:`exporter.operator.hanging.classify`, the daemon's classification, hanging confirmed
  at once), with the consumer-group family for the groups each transaction blocks, and the
  application of each transactional id from the same attribution rules as the daemon (the
  config's ``attribution``, else the built-ins). The pipeline reports every open transaction
  that is not ``ongoing``; an open transaction it leaves out and whose coordinator's open
  transaction includes the partition is ``ongoing``;
* the plan: an ABORT marker (``abort``) for each hanging transaction, InitProducerId without
  keeping a prepared transaction (``force-terminate``, KIP-939) once per transactional id a
  coordinator still owns, two-phase-commit transactions only with ``--include-prepared``;
* it refuses the whole run, before anything is written, on anything ambiguous: a
  transaction it cannot class (``unknown``, e.g. an owner that may be invisible to the
  principal), a principal that may not see every transactional id when selecting by
  application or prefix, a prefix that matches ids of more than one application;
* a dry run unless ``--yes``; then each action runs through the same code as ``abort`` and
  ``force-terminate`` (:func:`~exporter.operator.actions.execute_abort`,
  :func:`~exporter.operator.actions.execute_force_terminate`), with their two-sided
  re-validation right before each write. An action refused there does not stop the others;
* then the effect: the LSO of every partition and whether each blocked group can read on;
  every action (dry runs too) is audited like the single commands' (stderr and the history).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exporter.exitcodes import ExitCode
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaRequestError, KafkaUnavailable
from exporter.model import (
    OPEN_COORDINATOR_STATES,
    BlockedGroupPartition,
    Finding,
    HangingReason,
    ProducerState,
    TransactionDescription,
    TxnClass,
    UnknownReason,
)
from exporter.operator import actions
from exporter.operator.actions import AbortTarget, CannotVerify, Refused, TerminatePlan
from exporter.operator.connection import Target
from exporter.operator.hanging import INVISIBLE_OWNER_ACL_HINT, Classified, classify
from exporter.operator.records import Columns, error_text, reason_text, rows
from exporter.operator.render import emit, human_duration, note
from exporter.operator.requests import AbortRequest, RecoverRequest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How long the effect on the blocked groups' partitions is waited for (LSO past their offset).
UNBLOCK_WAIT_S = 10.0
UNBLOCK_POLL_S = 0.2
#: The classes recover ends through the transaction's coordinator.
OWNED_CLASSES = frozenset({TxnClass.ONGOING, TxnClass.LATE})

Key = tuple[str, int, int, int]


@dataclass(frozen=True)
class OpenTxn:
    """One open partition-level transaction: the partition's side, its class, its owner."""

    producer: ProducerState
    leader: int
    txn_class: TxnClass
    #: The pipeline's finding; None for an ``ongoing`` transaction (the pipeline reports none).
    finding: Finding | None
    #: The coordinator's open transaction that includes the partition, if any.
    owner: TransactionDescription | None
    application: str | None
    blocked: tuple[BlockedGroupPartition, ...] = ()

    @property
    def key(self) -> Key:
        p = self.producer
        return (p.topic, p.partition, p.producer_id, p.current_txn_start_offset)

    @property
    def transactional_id(self) -> str | None:
        if self.finding is not None and self.finding.transactional_id:
            return self.finding.transactional_id
        return self.owner.transactional_id if self.owner is not None else None

    @property
    def where(self) -> str:
        return f"{self.producer.topic}-{self.producer.partition}"

    def record(self, now_ms: int) -> dict[str, Any]:
        f, owner = self.finding, self.owner
        if f is not None:
            age, state, reason = f.duration_ms, f.coordinator_state, reason_text(f)
        else:
            started = owner.start_time_ms if owner is not None else -1
            age = now_ms - started if started >= 0 else -1
            state, reason = (owner.state if owner is not None else None), None
        p = self.producer
        return {
            "topic": p.topic,
            "partition": p.partition,
            "leader": self.leader,
            "producer_id": p.producer_id,
            "producer_epoch": p.producer_epoch,
            "start_offset": p.current_txn_start_offset,
            "class": self.txn_class.value,
            "age_ms": age,
            "transactional_id": self.transactional_id,
            "application": self.application,
            "coordinator_id": owner.coordinator_id if owner is not None else (f.coordinator_id if f else -1),
            "coordinator_state": state,
            "reason": why.value if (why := _why(f)) is not None else None,
            "reason_text": reason,
            "blocked_groups": sorted({b.group for b in self.blocked}),
        }


def _why(f: Finding | None) -> HangingReason | UnknownReason | None:
    if f is None:
        return None
    return f.hanging_reason or f.unknown_reason


@dataclass
class Action:
    """One planned action: ``abort`` (one partition), ``force-terminate`` (one transactional
    id, every partition of its transaction) or ``skip`` (listed, not acted on)."""

    kind: str
    transactions: list[OpenTxn]
    plan: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    abort_target: AbortTarget | None = None
    terminate: TerminatePlan | None = None
    result: str = "planned"
    message: str = ""

    def document(self, now_ms: int) -> dict[str, Any]:
        return {
            "action": self.kind,
            "result": self.result,
            "message": self.message or None,
            "transactions": [t.record(now_ms) for t in self.transactions],
            "plan": self.plan,
        }


# --- what is open, and whose ---------------------------------------------------------------------


def applications_of(spark: SparkSession, ids: Iterable[str], target: Target) -> dict[str, str | None]:
    """The application of each transactional id: the attribution rules as one Spark column
    (:func:`exporter.pipeline.families.attribution.application_column`, the daemon's
    attribution)."""
    from exporter.pipeline.families.attribution import application_column

    wanted = sorted(set(ids))
    if not wanted:
        return {}
    frame = spark.createDataFrame([(i,) for i in wanted], "transactional_id string")
    rows_ = frame.select(
        "transactional_id", application_column("transactional_id", target.attribution).alias("application")
    ).collect()
    return {str(r["transactional_id"]): r["application"] for r in rows_}


def _owner(classified: Classified, p: ProducerState) -> TransactionDescription | None:
    for d in classified.snapshot.transactions:
        if (
            d.error is None
            and d.producer_id == p.producer_id
            and d.state in OPEN_COORDINATOR_STATES
            and any(tp.topic == p.topic and tp.partition == p.partition for tp in d.partitions)
        ):
            return d
    return None


def open_transactions(classified: Classified, applications: Mapping[str, str | None]) -> list[OpenTxn]:
    """Every open partition-level transaction of the snapshot with the pipeline's class.

    The pipeline's findings are every open transaction but the ``ongoing`` ones (the CLI
    asks for all of them); one it left out is ``ongoing`` when its coordinator's open
    transaction includes the partition, and closed between the reads otherwise (left out)."""
    snapshot = classified.snapshot
    findings = {(f.topic, f.partition, f.producer_id, f.start_offset): f for f in classified.result.findings}
    blocked: dict[Key, list[BlockedGroupPartition]] = defaultdict(list)
    groups = classified.result.groups
    for b in groups.blocked if groups is not None else ():
        blocked[(b.topic, b.partition, b.producer_id, b.start_offset)].append(b)
    leaders = {(p.topic, p.partition): p.leader for p in snapshot.partitions}
    found: dict[Key, OpenTxn] = {}
    for p in snapshot.producers:
        key = (p.topic, p.partition, p.producer_id, p.current_txn_start_offset)
        if p.current_txn_start_offset < 0 or key in found:
            continue
        finding = findings.get(key)
        owner = _owner(classified, p)
        if finding is None and owner is None:
            continue
        tid = finding.transactional_id if finding is not None else None
        tid = tid or (owner.transactional_id if owner is not None else None)
        found[key] = OpenTxn(
            producer=p,
            leader=leaders.get((p.topic, p.partition), p.broker_id),
            txn_class=finding.txn_class if finding is not None else TxnClass.ONGOING,
            finding=finding,
            owner=owner,
            application=applications.get(tid) if tid else None,
            blocked=tuple(blocked.get(key, ())),
        )
    return sorted(found.values(), key=lambda o: o.key)


def is_selected(o: OpenTxn, request: RecoverRequest) -> bool:
    if request.producer_id is not None:
        return o.producer.producer_id == request.producer_id
    tid = o.transactional_id
    if request.transactional_id_prefix is not None:
        return tid is not None and tid.startswith(request.transactional_id_prefix)
    return o.application is not None and o.application == request.application


# --- refusals before anything is written ---------------------------------------------------------


def refuse_ambiguity(classified: Classified, opens: Sequence[OpenTxn], request: RecoverRequest) -> None:
    """Refused (exit 1) or CannotVerify (exit 3) when the selection is not clear-cut; nothing
    is written then."""
    chosen = [o for o in opens if is_selected(o, request)]
    if request.transactional_id_prefix is not None:
        by_app: dict[str, list[str]] = defaultdict(list)
        for o in chosen:
            by_app[o.application or "(no application)"].append(o.transactional_id or "?")
        if len(by_app) > 1:
            listing = "; ".join(
                f"{app}: {', '.join(sorted(set(ids))[:3])}" for app, ids in sorted(by_app.items())
            )
            raise Refused(
                f"--transactional-id-prefix {request.transactional_id_prefix!r} matches the "
                f"transactional ids of {len(by_app)} applications ({listing}): name one with "
                "--application or a longer prefix; nothing was changed"
            )
    by_id = request.producer_id is None
    if by_id and classified.snapshot.transactional_ids_visible is not True:
        raise CannotVerify(
            f"refusing to recover {request.described}: the principal may not see every "
            "transactional id (the visibility probe did not answer 'visible'), so some of the "
            f"application's transactions, or their owners, may be invisible; "
            f"{INVISIBLE_OWNER_ACL_HINT}; nothing was changed"
        )
    topics = {o.producer.topic for o in chosen}
    doubtful = [
        o
        for o in opens
        if o.txn_class in (TxnClass.UNKNOWN, TxnClass.SUSPECTED_HANGING)
        and (is_selected(o, request) or (o.transactional_id is None and o.producer.topic in topics))
    ]
    if doubtful:
        listing = "; ".join(
            f"{o.where} start offset {o.producer.current_txn_start_offset} (producer id "
            f"{o.producer.producer_id}): {reason_text(o.finding) if o.finding else o.txn_class.value}"
            for o in doubtful[:5]
        )
        raise CannotVerify(
            f"refusing to recover {request.described}: {len(doubtful)} open transaction(s) "
            f"that may be the application's cannot be classed: {listing}; "
            f"{INVISIBLE_OWNER_ACL_HINT}; nothing was changed"
        )


# --- the plan ------------------------------------------------------------------------------------


def plan_actions(
    admin: ClusterAdmin, classified: Classified, chosen: Sequence[OpenTxn], request: RecoverRequest
) -> list[Action]:
    """Aborts first (one per hanging partition), then one force-terminate per transactional
    id a coordinator owns, then what is only listed."""
    aborts: list[Action] = []
    owned: dict[str, list[OpenTxn]] = defaultdict(list)
    skipped: list[Action] = []
    for o in chosen:
        if o.txn_class is TxnClass.HANGING:
            target = AbortTarget(o.producer.topic, o.producer.partition, o.leader, o.producer)
            finding = actions.judge_abort(classified, target)  # 2PC-possible refusals stand
            offsets = actions.partition_offsets(classified, target.topic, target.partition)
            plan = actions.abort_plan(target, finding, offsets)
            aborts.append(Action("abort", [o], plan, actions.abort_text(plan), abort_target=target))
        elif o.txn_class in OWNED_CLASSES or (
            o.txn_class is TxnClass.TWO_PHASE_COMMIT and request.include_prepared
        ):
            if o.transactional_id is None:
                skipped.append(Action("skip", [o], message="no transactional id to terminate"))
            else:
                owned[o.transactional_id].append(o)
        elif o.txn_class is TxnClass.TWO_PHASE_COMMIT:
            skipped.append(
                Action(
                    "skip",
                    [o],
                    message="a two-phase-commit transaction: its external transaction manager "
                    "decides it; add --include-prepared to terminate it",
                )
            )
        else:
            skipped.append(Action("skip", [o], message=f"class {o.txn_class.value}"))
    terminations = [_plan_termination(admin, tid, txns) for tid, txns in sorted(owned.items())]
    return [*aborts, *terminations, *skipped]


def _plan_termination(admin: ClusterAdmin, tid: str, txns: list[OpenTxn]) -> Action:
    try:
        planned = actions.plan_force_terminate(admin, tid)
    except Refused as e:  # e.g. PrepareCommit: its coordinator is completing it
        return Action("skip", txns, message=str(e))
    pids = {o.producer.producer_id for o in txns}
    if pids != {planned.before.producer_id}:
        return Action(
            "skip",
            txns,
            message=f"transactional id {tid!r} now has producer id {planned.before.producer_id}, "
            f"not {', '.join(map(str, sorted(pids)))}: its producer re-initialised; run again",
        )
    return Action("force-terminate", txns, planned.plan, planned.text, terminate=planned)


# --- acting and verifying --------------------------------------------------------------------------


def _record(target: Target, action: Action, request: RecoverRequest) -> None:
    action.plan["selection"] = request.selection
    action.plan["blocked_groups"] = sorted({b.group for t in action.transactions for b in t.blocked})
    actions.record_action(action.kind, target, action.plan)


def execute(admin: ClusterAdmin, target: Target, action: Action, request: RecoverRequest) -> None:
    """One action, its result in ``action.result``; a refusal or a failure never stops the
    others (each was checked again right before its own write)."""
    try:
        if action.abort_target is not None:
            t = action.abort_target
            outcome = actions.execute_abort(
                admin, t, AbortRequest(topic=t.topic, partition=t.partition, start_offset=t.start_offset)
            )
            action.plan.update(
                lso_after=outcome.after.last_stable_offset, high_watermark_after=outcome.after.high_watermark
            )
            action.result = "marker_written_but_still_open" if outcome.still_open else "aborted"
        elif action.terminate is not None:
            after = actions.execute_force_terminate(admin, action.terminate)
            action.result = "terminated"
            action.message = f"the transaction is {after.state}"
    except Refused as e:
        action.result, action.message = "refused", str(e)
    except CannotVerify as e:
        action.result, action.message = "cannot_verify", str(e)
    except (KafkaRequestError, KafkaUnavailable) as e:
        action.result, action.message = "failed", str(e)
    action.plan["result"] = action.result
    _record(target, action, request)


def verify(admin: ClusterAdmin, done: Sequence[Action]) -> dict[str, Any]:
    """The partitions' LSO now, and each blocked group: it can read on once the LSO passed the
    offset it waits at. Waits a few seconds for the markers still being written."""
    waiting = [(b, a) for a in done for t in a.transactions for b in t.blocked]
    keys = sorted({(t.producer.topic, t.producer.partition) for a in done for t in a.transactions})
    leaders = {(t.producer.topic, t.producer.partition): t.leader for a in done for t in a.transactions}
    deadline = time.monotonic() + UNBLOCK_WAIT_S
    while True:
        read = admin.offsets(keys, leaders).rows if keys else ()
        lso = {(o.topic, o.partition): o.last_stable_offset for o in read}
        blocked = [b for b, _ in waiting if lso.get((b.topic, b.partition), -1) <= b.committed_offset]
        if not blocked or time.monotonic() >= deadline:
            break
        time.sleep(UNBLOCK_POLL_S)
    return {
        "lso_after": {f"{t}-{p}": lso.get((t, p), -1) for t, p in keys},
        "groups_unblocked": sorted(
            {(b.group, f"{b.topic}-{b.partition}") for b, _ in waiting if b not in blocked}
        ),
        "groups_still_blocked": sorted({(b.group, f"{b.topic}-{b.partition}") for b in blocked}),
    }


# --- the command ---------------------------------------------------------------------------------

RECOVER_COLUMNS: Columns = (
    ("Topic", "topic"),
    ("Partition", "partition"),
    ("ProducerId", "producer_id"),
    ("StartOffset", "start_offset"),
    ("Class", "class"),
    ("Age", "age"),
    ("TransactionalId", "transactional_id"),
    ("Application", "application"),
    ("CoordinatorState", "coordinator_state"),
    ("BlockedGroups", "groups"),
    ("Action", "action"),
)


def recover(admin: ClusterAdmin, spark: SparkSession, target: Target, request: RecoverRequest) -> int:
    from exporter.config.groups import GroupsConfig

    # Blocked at once: the operator asks now, there is no earlier cycle to compare with.
    groups = GroupsConfig(enabled=True, blocked_after_cycles=1)
    classified = classify(target, spark, partitions=None, groups=groups)
    tids = {f.transactional_id for f in classified.result.findings if f.transactional_id}
    tids |= {d.transactional_id for d in classified.snapshot.transactions if d.error is None}
    opens = open_transactions(classified, applications_of(spark, tids, target))
    refuse_ambiguity(classified, opens, request)
    chosen = [o for o in opens if is_selected(o, request)]
    planned = plan_actions(admin, classified, chosen, request)
    now = classified.now_ms
    acting = [a for a in planned if a.kind != "skip"]
    if request.yes:
        for action in acting:
            execute(admin, target, action, request)
        verified = verify(admin, acting)
    else:
        for action in acting:
            action.result = action.plan["result"] = "dry_run"
            _record(target, action, request)
        verified = {}
    for a in planned:
        if a.kind == "skip":
            a.result = "skipped"
    document = {
        "selection": request.selection,
        "dry_run": not request.yes,
        "transactions": len(chosen),
        "actions": [a.document(now) for a in planned],
        **verified,
    }
    emit(request.output, document, _text(request, planned, chosen, verified, now))
    for error in classified.snapshot.errors:
        note(f"recover: {error_text(error)}")
    results = {a.result for a in acting}
    if results & {"failed", "cannot_verify", "marker_written_but_still_open"}:
        return ExitCode.KAFKA
    if "refused" in results:
        return ExitCode.REFUSED
    return ExitCode.OK


def _text(
    request: RecoverRequest,
    planned: Sequence[Action],
    chosen: Sequence[OpenTxn],
    verified: Mapping[str, Any],
    now_ms: int,
) -> str:
    if not chosen:
        return f"No open transaction matches {request.described}: nothing to recover."
    action_of = {t.key: a.kind for a in planned for t in a.transactions}
    records = []
    for o in chosen:
        r = o.record(now_ms)
        r["age"] = human_duration(r["age_ms"]) if r["age_ms"] >= 0 else "unknown"
        r["groups"] = ",".join(r["blocked_groups"]) or "-"
        r["action"] = action_of.get(o.key, "-")
        records.append(r)
    lines = [
        f"{len(chosen)} open transaction(s) match {request.described}:",
        rows(RECOVER_COLUMNS, records),
        "",
        "Plan:",
    ]
    for n, a in enumerate(planned, start=1):
        if a.kind == "skip":
            lines.append(f"{n}. skip {', '.join(t.where for t in a.transactions)}: {a.message}")
            continue
        lines.append(f"{n}. {a.text}")
        if a.result not in ("planned", "dry_run"):
            lines.append(f"   -> {a.result}" + (f": {a.message}" if a.message else ""))
    if not request.yes:
        lines.append("Dry run: nothing was changed. Re-run with --yes to act on every transaction above.")
    else:
        lsos = ", ".join(f"{k} {v}" for k, v in verified.get("lso_after", {}).items())
        lines.append(f"LSO now: {lsos or 'nothing read'}.")
        unblocked = verified.get("groups_unblocked", [])
        still = verified.get("groups_still_blocked", [])
        if unblocked:
            lines.append("Groups that can read on: " + ", ".join(f"{g} ({tp})" for g, tp in unblocked) + ".")
        if still:
            lines.append("Groups still blocked: " + ", ".join(f"{g} ({tp})" for g, tp in still) + ".")
    return "\n".join(lines)
