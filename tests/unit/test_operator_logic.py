"""The operator's decisions, on fixtures: typed requests, one serialiser per record, the
two-sided re-validation before an abort, the refusal of a transaction whose owner may be
invisible, and the ACL lines doctor prints. (The real-broker paths are in
tests/integration/test_cli.py.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import pytest

from exporter.exitcodes import ExitCode
from exporter.kafka.admin import ClusterAdmin, ClusterMetadata, Collected
from exporter.kafka.probe import Permission, PermissionCheck
from exporter.model import (
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    Finding,
    HangingReason,
    ListedTransaction,
    ProducerState,
    StartTimeSource,
    TopicPartition,
    TransactionDescription,
    TxnClass,
    UnknownReason,
)
from exporter.operator import actions
from exporter.operator.doctor import grant_command
from exporter.operator.hanging import Classified
from exporter.operator.records import FINDING_COLUMNS, finding_record, rows
from exporter.operator.requests import AbortRequest, FindHangingRequest, UsageError

PID = 4000


def producer(epoch: int = 3, start: int = 10, pid: int = PID) -> ProducerState:
    return ProducerState("t", 0, 1, pid, epoch, 5, 1_000, 7, start)


def finding(cls: TxnClass, unknown: UnknownReason | None = None) -> Finding:
    return Finding(
        topic="t",
        partition=0,
        broker_id=1,
        producer_id=PID,
        producer_epoch=3,
        coordinator_epoch=7,
        start_offset=10,
        last_timestamp_ms=1_000,
        start_time_ms=500,
        start_time_source=StartTimeSource.BATCH_TIMESTAMP,
        duration_ms=7_200_000,
        txn_class=cls,
        late=False,
        unknown_reason=unknown,
    )


class FakeAdmin:
    """Answers as a broker would, from fixed rows (the decision logic only)."""

    def __init__(
        self,
        producers: Sequence[ProducerState],
        listed: Sequence[ListedTransaction] = (),
        described: Sequence[TransactionDescription] = (),
        list_errors: Sequence[CollectionError] = (),
    ) -> None:
        self.producers = tuple(producers)
        self.listed = tuple(listed)
        self.described = tuple(described)
        self.list_errors = tuple(list_errors)
        self.calls: list[str] = []

    def metadata(self, _filter: Any = None) -> ClusterMetadata:
        return ClusterMetadata(brokers=(Broker(1, "h", 1), Broker(2, "h", 2)), leaders={("t", 0): 1})

    def describe_producers(
        self, _by_broker: Mapping[int, Iterable[tuple[str, int]]]
    ) -> Collected[ProducerState]:
        self.calls.append("DescribeProducers")
        return Collected(self.producers)

    def list_transactions(
        self, brokers: Iterable[int], *, producer_ids: Sequence[int] = (), **_: Any
    ) -> Collected[ListedTransaction]:
        self.calls.append(f"ListTransactions{sorted(brokers)}{list(producer_ids)}")
        return Collected(self.listed, self.list_errors)

    def describe_transactions(self, ids: Mapping[int, Iterable[str]]) -> Collected[TransactionDescription]:
        self.calls.append(f"DescribeTransactions{dict(ids)}")
        return Collected(self.described)


def target(p: ProducerState | None = None) -> actions.AbortTarget:
    return actions.AbortTarget("t", 0, 1, p or producer())


REQUEST = AbortRequest(topic="t", partition=0, start_offset=10, yes=True)


def test_abort_revalidation_passes_when_both_sides_are_unchanged() -> None:
    admin = FakeAdmin([producer()])
    actions.revalidate_abort(cast(ClusterAdmin, admin), target(), REQUEST)
    assert admin.calls == ["DescribeProducers", f"ListTransactions[1, 2][{PID}]"]


def test_abort_revalidation_refuses_a_changed_partition_naming_the_change() -> None:
    admin = FakeAdmin([producer(epoch=4)])
    with pytest.raises(actions.Refused, match=r"producer epoch 3 -> 4"):
        actions.revalidate_abort(cast(ClusterAdmin, admin), target(), REQUEST)


def test_abort_revalidation_refuses_when_a_coordinator_now_owns_it() -> None:
    owner = TransactionDescription(
        2, "app-1", None, "Ongoing", 60_000, 400, PID, 3, (TopicPartition("t", 0),)
    )
    admin = FakeAdmin([producer()], listed=[ListedTransaction(2, "app-1", PID, "Ongoing")], described=[owner])
    with pytest.raises(actions.Refused, match=r"coordinator broker 2 now owns .*'app-1'.*Ongoing"):
        actions.revalidate_abort(cast(ClusterAdmin, admin), target(), REQUEST)
    assert admin.calls[-1] == "DescribeTransactions{2: ['app-1']}"


def test_abort_revalidation_ignores_a_coordinator_that_no_longer_has_it_open() -> None:
    closed = TransactionDescription(2, "app-1", None, "CompleteCommit", 60_000, -1, PID, 3, ())
    admin = FakeAdmin(
        [producer()], listed=[ListedTransaction(2, "app-1", PID, "CompleteCommit")], described=[closed]
    )
    actions.revalidate_abort(cast(ClusterAdmin, admin), target(), REQUEST)


def test_abort_revalidation_cannot_verify_when_a_coordinator_did_not_answer() -> None:
    admin = FakeAdmin(
        [producer()], list_errors=[CollectionError("ListTransactions", "REQUEST_TIMED_OUT", broker_id=2)]
    )
    with pytest.raises(actions.CannotVerify, match="REQUEST_TIMED_OUT"):
        actions.revalidate_abort(cast(ClusterAdmin, admin), target(), REQUEST)


def classified(f: Finding) -> Classified:
    snapshot = ClusterSnapshot(cluster="c", taken_at_ms=0, producers=(producer(),))
    return Classified(snapshot, CycleResult(cluster="c", computed_at_ms=0, findings=(f,)), 7_200_500)


def test_abort_refuses_with_exit_3_when_the_owner_may_be_invisible() -> None:
    f = finding(TxnClass.UNKNOWN, UnknownReason.OWNER_MAY_BE_INVISIBLE)
    with pytest.raises(actions.CannotVerify) as info:
        actions.judge_abort(classified(f), target())
    message = str(info.value)
    assert "owner may be a live transaction the principal cannot see" in message
    assert "--operation Describe --transactional-id '*'" in message
    assert "nothing was aborted" in message


def test_abort_refuses_with_exit_3_an_unlisted_transaction_a_live_one_could_still_be() -> None:
    f = finding(TxnClass.UNKNOWN, UnknownReason.UNLISTED_WITHIN_TIMEOUT)
    with pytest.raises(actions.CannotVerify) as info:
        actions.judge_abort(classified(f), target())
    message = str(info.value)
    assert "no coordinator lists its producer id, but it has been open only 2h" in message
    assert "a DENY rule or a custom authorizer" in message
    assert "nothing was aborted" in message


def _unlisted_hanging(two_phase_commit: bool | None, elsewhere: bool = False) -> Classified:
    """A no_transactional_id finding led by broker 1 of brokers 1 and 2; broker 1's 2PC
    setting (None: its configs unread), broker 2's ``elsewhere``."""
    f = replace(finding(TxnClass.HANGING), hanging_reason=HangingReason.NO_TRANSACTIONAL_ID, late=True)
    configs = [BrokerConfig(2, two_phase_commit_enabled=elsewhere)]
    if two_phase_commit is not None:
        configs.append(BrokerConfig(1, two_phase_commit_enabled=two_phase_commit))
    snapshot = ClusterSnapshot(
        cluster="c",
        taken_at_ms=0,
        brokers=(Broker(1, "b1", 9092), Broker(2, "b2", 9092)),
        producers=(producer(),),
        broker_configs=tuple(configs),
    )
    return Classified(snapshot, CycleResult(cluster="c", computed_at_ms=0, findings=(f,)), 7_200_500)


@pytest.mark.parametrize(
    ("leader", "elsewhere"),
    [(True, False), (None, False), (False, True)],
    ids=["leader-2pc", "leader-configs-unread", "another-broker-2pc"],
)
def test_abort_refuses_with_exit_3_an_unlisted_transaction_a_prepared_2pc_one_could_be(
    leader: bool | None, elsewhere: bool
) -> None:
    """A prepared 2PC transaction (KIP-939) is never late, so under an id the principal may
    not see it looks hanging once old; the operator must say the owner was checked. The
    coordinator enforces 2PC, and the hidden id's coordinator is unknown: any broker counts."""
    with pytest.raises(actions.CannotVerify) as info:
        actions.judge_abort(_unlisted_hanging(leader, elsewhere), target())
    message = str(info.value)
    assert "the cluster accepts two-phase-commit transactions" in message
    assert "--owner-checked; nothing was aborted" in message
    assert actions.judge_abort(_unlisted_hanging(leader, elsewhere), target(), owner_checked=True).hanging


def test_abort_accepts_an_unlisted_hanging_transaction_where_2pc_is_off() -> None:
    assert actions.judge_abort(_unlisted_hanging(False), target()).hanging


def test_abort_accepts_only_hanging() -> None:
    assert actions.judge_abort(classified(finding(TxnClass.HANGING)), target()).hanging
    with pytest.raises(actions.Refused, match="not hanging"):
        actions.judge_abort(classified(finding(TxnClass.SUSPECTED_HANGING)), target())


def test_one_record_feeds_json_and_the_table() -> None:
    f = finding(TxnClass.UNKNOWN, UnknownReason.OWNER_MAY_BE_INVISIBLE)
    record = finding_record(f, lso_lag=5)
    assert record["class"] == "unknown" and record["unknown_reason"] == "owner_may_be_invisible"
    assert record["age_min"] == 120 and record["lso_lag"] == 5
    header, line = rows(FINDING_COLUMNS, [record]).splitlines()
    assert header.split()[:3] == ["Topic", "Partition", "ProducerId"]
    assert line.split()[:3] == ["t", "0", str(PID)]


def test_requests_validate_their_flags() -> None:
    with pytest.raises(UsageError, match="--partition requires --topic"):
        FindHangingRequest(partition=1)
    with pytest.raises(UsageError, match="--producer-id needs --coordinator-epoch"):
        AbortRequest(topic="t", partition=0, producer_id=1, producer_epoch=1)


def test_doctor_prints_the_acl_that_grants_a_missing_permission() -> None:
    check = PermissionCheck("TransactionalId", "*", "Describe", "cycle", Permission.MISSING)
    assert grant_command(check, "User:exporter", "b:9092") == (
        "kafka-acls.sh --bootstrap-server b:9092 --add --allow-principal User:exporter "
        "--operation Describe --transactional-id '*'"
    )
    check = PermissionCheck("Cluster", "kafka-cluster", "ClusterAction", "abort", Permission.NOT_PROBED)
    assert grant_command(check, "User:x", "b:1").endswith("--operation ClusterAction --cluster")


def test_exit_codes_are_one_enum() -> None:
    assert [
        int(c)
        for c in (
            ExitCode.OK,
            ExitCode.FINDINGS,
            ExitCode.USAGE,
            ExitCode.KAFKA,
            ExitCode.INTERNAL,
            ExitCode.INTERRUPTED,
        )
    ] == [0, 1, 2, 3, 4, 130]
    assert int(ExitCode.REFUSED) == int(ExitCode.FINDINGS) == 1
