"""The commands that change the cluster: ``abort`` and ``force-terminate``.

Both follow one discipline: re-read what is there now, refuse when it is not what the
operator named or when someone else is responsible for it, show the plan, act only with
``--yes``, re-validate right before the write, then verify the effect and report it.

* ``abort`` writes an ABORT marker to the partition leader (WriteTxnMarkers, as Kafka's admin
  abort does). It is for *hanging* transactions only, judged by the pipeline's classification
  (the same as ``find-hanging``): a transaction a coordinator still owns is refused, because
  the producer or the coordinator will complete it, and ``force-terminate`` ends it properly.
  A transaction whose owner may be invisible to the principal (``unknown``,
  ``owner_may_be_invisible``) is refused with exit 3 and the ACL that would show it. Right
  before the write both sides are read again: the partition must show the same open
  transaction (producer id, epoch, start offset) and no coordinator may own it
  (ListTransactions filtered by the producer id on every broker, DescribeTransactions of every
  id listed).
* ``force-terminate`` (KIP-939) sends InitProducerId for the transactional id without keeping
  a prepared transaction: the coordinator fences the producer and aborts its open transaction.
  It records the producer id and epoch it showed, describes the id again right before
  InitProducerId, and refuses when either changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exporter.exitcodes import ExitCode
from exporter.kafka.admin import AbortSpec, ClusterAdmin
from exporter.kafka.errors import KafkaRequestError, KafkaUnavailable
from exporter.model import (
    OPEN_COORDINATOR_STATES,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    Finding,
    HangingReason,
    PartitionOffsets,
    ProducerState,
    TransactionDescription,
    TxnClass,
    UnknownReason,
)
from exporter.operator.connection import Target
from exporter.operator.hanging import INVISIBLE_OWNER_ACL_HINT, Classified, classify
from exporter.operator.records import error_text, finding_record, transaction_record
from exporter.operator.render import emit, human_duration, iso_ms, note
from exporter.operator.requests import AbortRequest, ForceTerminateRequest
from exporter.operator.views import (
    VERSION_ERRORS,
    describe_transaction,
    partition_leader,
    producers_of,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How long ``abort`` waits for the LSO to move past the aborted transaction.
LSO_WAIT_S = 10.0
LSO_POLL_S = 0.2


def record_action(action: str, target: Target, plan: dict[str, Any]) -> None:
    """The audit record (exporter.history.audit), imported when an action is recorded: the
    history schema imports pyarrow, half a second every command would pay at start."""
    from exporter.history.audit import record_action

    record_action(action, target, plan)


class Refused(Exception):  # noqa: N818 - reads as an outcome
    """The action was refused after checking the cluster; the message says why and what to do.
    Exit 1: nothing was changed."""


class CannotVerify(Exception):  # noqa: N818 - reads as an outcome
    """The cluster could not be read well enough to prove the action safe. Exit 3: nothing was
    changed."""


@dataclass(frozen=True)
class AbortTarget:
    topic: str
    partition: int
    leader: int
    producer: ProducerState

    @property
    def start_offset(self) -> int:
        return self.producer.current_txn_start_offset

    @property
    def where(self) -> str:
        return f"{self.topic}-{self.partition}"

    def spec(self) -> AbortSpec:
        # As Kafka's tool: a coordinator epoch of -1 (a producer id that never completed a
        # transaction) is sent as 0, which no partition's recorded epoch is below.
        return AbortSpec(
            topic=self.topic,
            partition=self.partition,
            producer_id=self.producer.producer_id,
            producer_epoch=self.producer.producer_epoch,
            coordinator_epoch=max(0, self.producer.coordinator_epoch),
        )


# --- abort -----------------------------------------------------------------------------------


def find_open_transaction(producers: list[ProducerState], request: AbortRequest) -> ProducerState:
    """The open transaction the request names, or Refused (stale or wrong identification)."""
    where = request.where
    open_txns = [p for p in producers if p.current_txn_start_offset >= 0]
    listing = (
        ", ".join(
            f"start offset {p.current_txn_start_offset} (producer id {p.producer_id}, "
            f"epoch {p.producer_epoch})"
            for p in open_txns
        )
        or "none"
    )
    if request.start_offset is not None:
        for p in open_txns:
            if p.current_txn_start_offset == request.start_offset:
                return p
        raise Refused(
            f"no open transaction starts at offset {request.start_offset} on {where} "
            f"(stale start offset? open transactions there now: {listing}); "
            "nothing was aborted"
        )
    for p in open_txns:
        if p.producer_id == request.producer_id:
            if p.producer_epoch != request.producer_epoch:
                raise Refused(
                    f"producer id {p.producer_id} on {where} has epoch "
                    f"{p.producer_epoch}, not {request.producer_epoch} (stale?); "
                    "nothing was aborted"
                )
            given = request.coordinator_epoch
            if (
                given is not None
                and given != p.coordinator_epoch
                and not (given == 0 and p.coordinator_epoch < 0)
            ):  # Kafka's tool sends -1 as 0
                raise Refused(
                    f"producer id {p.producer_id} on {where} has coordinator epoch "
                    f"{p.coordinator_epoch}, not {given} (stale?); nothing was "
                    "aborted"
                )
            return p
    raise Refused(
        f"producer id {request.producer_id} has no open transaction on {where} "
        f"(open transactions there now: {listing}); nothing was aborted"
    )


def abort(admin: ClusterAdmin, spark: SparkSession, target: Target, request: AbortRequest) -> int:
    leader = partition_leader(admin, request.topic, request.partition)
    # Cheap check first: a stale offset is refused before the classification runs.
    producer = find_open_transaction(producers_of(admin, request.topic, request.partition, leader), request)
    classified = classify(target, spark, partitions=[(request.topic, request.partition)])
    aborting = AbortTarget(request.topic, request.partition, leader, producer)
    finding = judge_abort(classified, aborting, owner_checked=request.owner_checked)
    offsets = partition_offsets(classified, request.topic, request.partition)
    plan = abort_plan(aborting, finding, offsets)
    if not request.yes:
        plan["result"] = "dry_run"
        record_action("abort", target, plan)
        emit(
            request.output,
            plan,
            abort_text(plan) + "\nDry run: nothing was changed. Re-run with --yes to write the ABORT marker.",
        )
        return ExitCode.OK
    outcome = execute_abort(admin, aborting, request)
    after, still_open = outcome.after, outcome.still_open
    plan.update(
        result="aborted" if not still_open else "marker_written_but_still_open",
        lso_after=after.last_stable_offset,
        high_watermark_after=after.high_watermark,
    )
    text = abort_text(plan) + (
        f"\nAborted. LSO of {aborting.where} is now {after.last_stable_offset} "
        f"(was {plan['lso_before']}; high watermark {after.high_watermark})."
    )
    record_action("abort", target, plan)
    emit(request.output, plan, text)
    if still_open:
        note(f"abort: the marker was written but {aborting.where} still shows the transaction open")
        return ExitCode.KAFKA
    if not outcome.lso_passed:
        note(
            f"abort: the LSO of {aborting.where} is still {after.last_stable_offset}: another "
            f"open transaction holds it ({outcome.holders or 'none seen'}); check it with find-hanging"
        )
    return ExitCode.OK


@dataclass(frozen=True)
class AbortOutcome:
    """What the partition shows after the ABORT marker: its offsets (the LSO waited for) and
    the open transactions left there."""

    target: AbortTarget
    after: PartitionOffsets
    remaining: tuple[ProducerState, ...]

    @property
    def still_open(self) -> bool:
        seen = self.target.producer
        return any(
            p.producer_id == seen.producer_id and p.current_txn_start_offset == self.target.start_offset
            for p in self.remaining
        )

    @property
    def lso_passed(self) -> bool:
        return self.after.last_stable_offset > self.target.start_offset

    @property
    def holders(self) -> str:
        return ", ".join(
            f"producer id {p.producer_id} from offset {p.current_txn_start_offset}" for p in self.remaining
        )


def execute_abort(admin: ClusterAdmin, aborting: AbortTarget, request: AbortRequest) -> AbortOutcome:
    """Both sides read again right before the write (Refused or CannotVerify when they no
    longer allow it), the ABORT marker, then the LSO waited for and the partition read again.
    The one way every caller (``abort``, ``recover``, the daemon's remediation) writes it."""
    # Re-validate both sides right before acting: the plan may be seconds old.
    revalidate_abort(admin, aborting, request)
    admin.abort_transaction(aborting.spec(), aborting.leader)
    after = _wait_for_lso(admin, aborting)
    remaining = tuple(
        p
        for p in producers_of(admin, aborting.topic, aborting.partition, aborting.leader)
        if p.current_txn_start_offset >= 0
    )
    return AbortOutcome(aborting, after, remaining)


def revalidate_abort(admin: ClusterAdmin, target: AbortTarget, request: AbortRequest) -> None:
    """Both sides again, right before WriteTxnMarkers. Refused (exit 1) naming what changed, or
    CannotVerify (exit 3) when a side could not be read."""
    seen = target.producer
    now_open = find_open_transaction(
        producers_of(admin, target.topic, target.partition, target.leader), request
    )
    changes = [
        f"{name} {before} -> {after}"
        for name, before, after in (
            ("producer id", seen.producer_id, now_open.producer_id),
            ("producer epoch", seen.producer_epoch, now_open.producer_epoch),
            ("start offset", seen.current_txn_start_offset, now_open.current_txn_start_offset),
        )
        if before != after
    ]
    if changes:
        raise Refused(
            f"the open transaction on {target.where} changed while checking "
            f"({', '.join(changes)}); nothing was aborted, run the command again"
        )
    owner = coordinator_owner(admin, seen.producer_id, target.topic, target.partition)
    if owner is not None:
        raise Refused(
            f"coordinator broker {owner.coordinator_id} now owns the transaction of "
            f"producer id {seen.producer_id} on {target.where} (transactional id "
            f"{owner.transactional_id!r}, state {owner.state}): it is not hanging; "
            "nothing was aborted"
        )


def coordinator_owner(
    admin: ClusterAdmin, producer_id: int, topic: str, partition: int
) -> TransactionDescription | None:
    """The coordinator's open transaction of ``producer_id`` that includes the partition, if
    any: ListTransactions filtered by the producer id on every broker, then
    DescribeTransactions of every id listed. CannotVerify when any of them failed."""
    brokers = [b.broker_id for b in admin.metadata(lambda _t: False).brokers]
    listed = admin.list_transactions(brokers, producer_ids=[producer_id])
    if listed.errors:
        raise CannotVerify(
            "cannot verify that no coordinator owns the transaction: "
            + "; ".join(error_text(e) for e in listed.errors)
            + "; nothing was aborted"
        )
    ids: dict[int, list[str]] = {}
    for t in listed.rows:
        if t.producer_id == producer_id:
            ids.setdefault(t.coordinator_id, []).append(t.transactional_id)
    if not ids:
        return None
    described = admin.describe_transactions(ids)
    if described.errors:
        raise CannotVerify(
            "cannot verify that no coordinator owns the transaction: "
            + "; ".join(error_text(e) for e in described.errors)
            + "; nothing was aborted"
        )
    for d in described.rows:
        if (
            d.error is None
            and d.producer_id == producer_id
            and d.state in OPEN_COORDINATOR_STATES
            and any(tp.topic == topic and tp.partition == partition for tp in d.partitions)
        ):
            return d
    return None


def judge_abort(classified: Classified, target: AbortTarget, *, owner_checked: bool = False) -> Finding:
    """The pipeline's verdict on the target; Refused unless it is hanging.

    One hanging transaction is refused all the same (CannotVerify, exit 3) unless the
    operator says the owner was checked: one that no coordinator lists
    (``no_transactional_id``) in a cluster that accepts two-phase-commit transactions. Being
    late is what makes an unlisted transaction hanging, and a prepared 2PC transaction
    (KIP-939) is never late: under a transactional id the principal may not see (a DENY
    rule the visibility probe cannot see), it looks exactly like that, and aborting it
    breaks the atomic commit with the external system it is prepared for."""
    key = (target.topic, target.partition, target.producer.producer_id, target.start_offset)
    still_open = [
        p
        for p in classified.snapshot.producers
        if (p.topic, p.partition, p.producer_id, p.current_txn_start_offset) == key
    ]
    if not still_open:
        raise Refused(
            f"the transaction of producer id {key[2]} starting at offset {key[3]} on "
            f"{key[0]}-{key[1]} is no longer open; nothing was aborted"
        )
    findings = [
        f for f in classified.result.findings if (f.topic, f.partition, f.producer_id, f.start_offset) == key
    ]
    if findings and findings[0].txn_class is TxnClass.HANGING:
        hanging = findings[0]
        if (
            hanging.hanging_reason is HangingReason.NO_TRANSACTIONAL_ID
            and not owner_checked
            and _two_phase_commit_possible(classified)
        ):
            raise CannotVerify(
                f"refusing to abort the transaction of producer id {hanging.producer_id} at "
                f"offset {hanging.start_offset} on {hanging.topic}-{hanging.partition}: no "
                f"coordinator lists its producer id and it has been open "
                f"{human_duration(hanging.duration_ms)}, but the cluster accepts "
                "two-phase-commit transactions (transaction.two.phase.commit.enable on a "
                "broker, or a broker's configs unread), which are never late: it may be a "
                "prepared transaction under a transactional id the principal may not see (a "
                "DENY rule or a custom authorizer). Check the 2PC applications of this topic "
                "(their transactional ids, kafka-transactions.sh describe with a principal "
                "that sees them), then run again with --owner-checked; nothing was aborted"
            )
        return hanging
    if findings and findings[0].txn_class is TxnClass.UNKNOWN:
        raise CannotVerify(_unknown_message(classified, findings[0]))
    raise Refused(_owned_message(classified, target, findings[0] if findings else None))


def _two_phase_commit_possible(classified: Classified) -> bool:
    """Whether a 2PC transaction may be open: a broker accepts them, or a known broker's
    configs were not read. The coordinator enforces it, and the coordinator of an id the
    principal cannot see is unknown, so every broker counts, not the partition's leader."""
    snapshot = classified.snapshot
    configs = {c.broker_id: c for c in snapshot.broker_configs}
    brokers = {b.broker_id for b in snapshot.brokers} | set(configs)
    return not brokers or any(b not in configs or configs[b].two_phase_commit_enabled for b in brokers)


def _unknown_message(classified: Classified, f: Finding) -> str:
    what = (
        f"refusing to abort the transaction of producer id {f.producer_id} at offset "
        f"{f.start_offset} on {f.topic}-{f.partition}: its classification is unknown"
    )
    if f.unknown_reason is UnknownReason.OWNER_MAY_BE_INVISIBLE:
        return (
            f"{what}: no coordinator lists its producer id, but its owner may be a live "
            f"transaction the principal cannot see; {INVISIBLE_OWNER_ACL_HINT}; nothing "
            "was aborted"
        )
    if f.unknown_reason is UnknownReason.UNLISTED_WITHIN_TIMEOUT:
        return (
            f"{what}: no coordinator lists its producer id, but it has been open only "
            f"{human_duration(f.duration_ms)}, not known to be more than its leader's "
            "transaction.max.timeout.ms plus the late padding (pipeline.late_padding, 5 "
            "minutes by default), so it may be a live transaction whose transactional id the "
            "principal may not see (a DENY rule or a custom authorizer); if no coordinator "
            "owns it, it is hanging once older than that; nothing was aborted"
        )
    errors = (
        "; ".join(f"{e.api} {e.error} (broker {e.broker_id})" for e in classified.snapshot.errors)
        or "no answer"
    )
    reason = f" ({f.unknown_reason.value})" if f.unknown_reason else ""
    return (
        f"{what}{reason}: cannot verify that no coordinator owns the transaction "
        f"({errors}); nothing was aborted"
    )


def _owned_message(classified: Classified, target: AbortTarget, finding: Finding | None) -> str:
    pid = target.producer.producer_id
    owner = _owner(classified, pid)
    who = (
        f"coordinator broker {owner.coordinator_id} owns it: transactional id "
        f"{owner.transactional_id!r}, state {owner.state}"
        if owner
        else "a coordinator owns it"
    )
    if owner is not None and owner.start_time_ms >= 0:
        age = classified.now_ms - owner.start_time_ms
        who += f", open for {human_duration(age)}"
        if owner.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS:
            who += ", a two-phase-commit transaction (never timed out by the coordinator)"
        elif owner.timeout_ms >= 0:
            left = owner.start_time_ms + owner.timeout_ms - classified.now_ms
            who += (
                f", the coordinator aborts it on timeout in {human_duration(left)}"
                if left > 0
                else ", past its timeout: the coordinator should be aborting it"
            )
    cls = finding.txn_class.value if finding is not None else TxnClass.ONGOING.value
    tid = owner.transactional_id if owner else "ID"
    return (
        f"refusing to abort the transaction of producer id {pid} at offset "
        f"{target.start_offset} on {target.topic}-{target.partition}: it is not hanging "
        f"(class {cls}); {who}. Let the producer commit or abort it, or end it through its "
        f"coordinator: kafka-txn-exporter force-terminate --transactional-id {tid}"
    )


def _owner(classified: Classified, producer_id: int) -> TransactionDescription | None:
    for d in classified.snapshot.transactions:
        if d.error is None and d.producer_id == producer_id:
            return d
    return None


def partition_offsets(classified: Classified, topic: str, partition: int) -> PartitionOffsets:
    for p in classified.snapshot.partitions:
        if p.topic == topic and p.partition == partition:
            return p
    return PartitionOffsets(topic, partition, -1)


def abort_plan(target: AbortTarget, f: Finding, offsets: PartitionOffsets) -> dict[str, Any]:
    spec = target.spec()
    record = classified_fields(f)
    return {
        "action": "abort",
        "topic": target.topic,
        "partition": target.partition,
        "leader": target.leader,
        "producer_id": spec.producer_id,
        "producer_epoch": spec.producer_epoch,
        "coordinator_epoch": spec.coordinator_epoch,
        "start_offset": target.start_offset,
        **record,
        "lso_before": offsets.last_stable_offset,
        "high_watermark_before": offsets.high_watermark,
    }


def classified_fields(f: Finding) -> dict[str, Any]:
    """What the plan takes from the finding's record (the one serialiser)."""
    record = finding_record(f)
    return {
        k: record[k]
        for k in (
            "start_time_ms",
            "start_time",
            "start_time_source",
            "age_ms",
            "reason",
            "reason_text",
            "transactional_id",
        )
    }


def abort_text(plan: dict[str, Any]) -> str:
    lag = (
        plan["high_watermark_before"] - plan["lso_before"]
        if plan["lso_before"] >= 0 and plan["high_watermark_before"] >= 0
        else "unknown"
    )
    return (
        f"Hanging transaction on {plan['topic']}-{plan['partition']} (leader broker "
        f"{plan['leader']}): producer id {plan['producer_id']}, epoch {plan['producer_epoch']}, "
        f"start offset {plan['start_offset']}, started {plan['start_time']} "
        f"({plan['start_time_source']}), age {human_duration(plan['age_ms'])}.\n"
        f"Why hanging: {plan['reason_text']}.\n"
        f"LSO {plan['lso_before']}, high watermark {plan['high_watermark_before']} "
        f"(lag {lag}): read_committed consumers cannot pass offset {plan['start_offset']}.\n"
        f"Action: WriteTxnMarkers ABORT to broker {plan['leader']} (producer id "
        f"{plan['producer_id']}, epoch {plan['producer_epoch']}, coordinator epoch "
        f"{plan['coordinator_epoch']}), after checking both the partition and the "
        "coordinators again."
    )


def _wait_for_lso(admin: ClusterAdmin, target: AbortTarget) -> PartitionOffsets:
    """Poll ListOffsets (READ_COMMITTED) until the LSO passes the start offset, or time out."""
    key = (target.topic, target.partition)
    deadline = time.monotonic() + LSO_WAIT_S
    while True:
        read = admin.offsets([key], {key: target.leader})
        current = read.rows[0] if read.rows else PartitionOffsets(*key, target.leader)
        if current.last_stable_offset > target.start_offset or time.monotonic() >= deadline:
            return current
        time.sleep(LSO_POLL_S)


# --- force-terminate -------------------------------------------------------------------------


def _describe_known(admin: ClusterAdmin, tid: str) -> TransactionDescription:
    try:
        return describe_transaction(admin, tid)
    except KafkaRequestError as e:
        if e.error == "TRANSACTIONAL_ID_NOT_FOUND":
            # InitProducerId would create the id: never do that by accident.
            raise Refused(
                f"transactional id {tid!r} is not known to its coordinator (broker "
                f"{e.broker_id}): nothing to terminate"
            ) from e
        raise


def _refuse_unless_ongoing(tid: str, d: TransactionDescription) -> None:
    if d.state != "Ongoing":
        hint = (
            "the coordinator is already completing it; if it stays there, its partitions' "
            "leaders cannot take the markers"
            if d.state.startswith("Prepare")
            else "there is no open transaction to abort"
        )
        raise Refused(
            f"transactional id {tid!r} is in state {d.state} on coordinator "
            f"broker {d.coordinator_id}: {hint}; nothing was changed"
        )


@dataclass
class TerminatePlan:
    """What ``force-terminate`` showed: the id's description, the plan (its JSON) and text."""

    transactional_id: str
    before: TransactionDescription
    plan: dict[str, Any]
    text: str


def plan_force_terminate(
    admin: ClusterAdmin, transactional_id: str, expected_epoch: int | None = None
) -> TerminatePlan:
    """Describe the id and plan InitProducerId(keepPreparedTxn=false); Refused unless the
    coordinator knows it and it is Ongoing (and has ``expected_epoch`` when given)."""
    tid = transactional_id
    before = _describe_known(admin, tid)
    now = int(time.time() * 1000)
    plan: dict[str, Any] = {
        "action": "force-terminate",
        "before": transaction_record(before, now),
        "expected_producer_id": before.producer_id,
        "expected_producer_epoch": before.producer_epoch,
    }
    _refuse_unless_ongoing(tid, before)
    if expected_epoch is not None and expected_epoch != before.producer_epoch:
        raise Refused(
            f"transactional id {tid!r} has producer epoch {before.producer_epoch}, not "
            f"{expected_epoch} (--producer-epoch): its producer re-initialised "
            "since you looked; nothing was changed"
        )
    partitions = ", ".join(plan["before"]["partitions"]) or "none"
    text = (
        f"Transaction {tid!r} on coordinator broker {before.coordinator_id}: producer id "
        f"{before.producer_id}, epoch {before.producer_epoch}, state {before.state}, started "
        f"{iso_ms(before.start_time_ms)} (age {human_duration(now - before.start_time_ms)}), "
        f"partitions {partitions}.\n"
        f"Action: InitProducerId(keepPreparedTxn=false) at broker {before.coordinator_id}: "
        "fences the producer (its next request fails with an epoch error) and aborts this "
        "transaction on every partition; refused if the producer id or epoch changes first."
    )
    if before.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS:
        text += (
            "\nWarning: a two-phase-commit (KIP-939) transaction; abort it only when its "
            "external transaction manager has decided to abort."
        )
    return TerminatePlan(tid, before, plan, text)


def execute_force_terminate(admin: ClusterAdmin, planned: TerminatePlan) -> TransactionDescription:
    """The epoch guard (the id described again right before InitProducerId: Refused when its
    producer id, epoch or coordinator changed, or it is no longer Ongoing), InitProducerId,
    then the id's state once settled. ``planned.plan`` gains the result and the LSOs. The one
    way every caller (``force-terminate``, ``recover``) ends a transaction."""
    tid, before, plan = planned.transactional_id, planned.before, planned.plan
    now_described = _describe_known(admin, tid)
    changes = [
        f"{name} {seen} -> {current}"
        for name, seen, current in (
            ("producer id", before.producer_id, now_described.producer_id),
            ("producer epoch", before.producer_epoch, now_described.producer_epoch),
            ("coordinator", before.coordinator_id, now_described.coordinator_id),
        )
        if seen != current
    ]
    if changes:
        raise Refused(
            f"transactional id {tid!r} changed while checking ({', '.join(changes)}): "
            "its producer re-initialised or the coordinator moved; nothing was "
            "changed, run the command again"
        )
    _refuse_unless_ongoing(tid, now_described)
    plan["lso_before"] = _last_stable_offsets(admin, now_described)
    try:
        producer_id, epoch = admin.force_terminate(tid, before.coordinator_id)
    except KafkaRequestError as e:
        if e.error in VERSION_ERRORS:
            raise KafkaRequestError(
                e.api,
                e.error,
                broker_id=e.broker_id,
                message="the coordinator does not support the InitProducerId version force-terminate sends",
            ) from e
        raise
    after = _settled(admin, tid)
    plan.update(
        result="terminated",
        new_producer_id=producer_id,
        new_producer_epoch=epoch,
        after=transaction_record(after, int(time.time() * 1000)),
        lso_after=_last_stable_offsets(admin, now_described),
    )
    return after


def force_terminate(admin: ClusterAdmin, target: Target, request: ForceTerminateRequest) -> int:
    planned = plan_force_terminate(admin, request.transactional_id, request.expected_epoch)
    plan, text = planned.plan, planned.text
    if not request.yes:
        plan["result"] = "dry_run"
        record_action("force-terminate", target, plan)
        emit(
            request.output, plan, text + "\nDry run: nothing was changed. Re-run with --yes to terminate it."
        )
        return ExitCode.OK
    after = execute_force_terminate(admin, planned)
    record_action("force-terminate", target, plan)
    emit(
        request.output,
        plan,
        text + f"\nTerminated: producer id {plan['new_producer_id']} now has epoch "
        f"{plan['new_producer_epoch']}; the transaction is {after.state}.",
    )
    return ExitCode.OK


def _last_stable_offsets(admin: ClusterAdmin, d: TransactionDescription) -> dict[str, int]:
    """``topic-partition`` -> LSO of each partition of the transaction, for the audit (-1 where
    it could not be read: the audit records what was seen, it never blocks the action)."""
    wanted = {(tp.topic, tp.partition) for tp in d.partitions}
    if not wanted:
        return {}
    try:
        topics = {t for t, _ in wanted}
        leaders = admin.metadata(lambda t: t in topics).leaders
        read = admin.offsets(sorted(wanted), leaders).rows
    except (KafkaRequestError, KafkaUnavailable):
        read = ()
    found = {(o.topic, o.partition): o.last_stable_offset for o in read}
    return {f"{t}-{p}": found.get((t, p), -1) for t, p in sorted(wanted)}


def _settled(admin: ClusterAdmin, tid: str) -> TransactionDescription:
    """The id's state once the coordinator finished aborting (or after a few seconds)."""
    deadline = time.monotonic() + LSO_WAIT_S
    while True:
        d = describe_transaction(admin, tid)
        if not d.state.startswith("Prepare") or time.monotonic() >= deadline:
            return d
        time.sleep(LSO_POLL_S)
