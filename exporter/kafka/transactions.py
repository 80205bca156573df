"""The coordinator side (kafka-python protocol): ListTransactions, DescribeTransactions,
FindCoordinator, and the visibility probe.

Visibility probe
----------------
ListTransactions answers only with the transactional ids the principal may **Describe**; the
others are left out *without an error*. A principal granted Describe on its own prefix (the
usual least-privilege ACL) therefore sees an open transaction of another application on a
monitored partition as "listed by no coordinator", which is exactly what a hanging
transaction looks like. The exporter has to know whether it may be blind.

Kafka checks Describe per transactional id, so one request answers the question for all of
them: every cycle, :func:`probe_visibility` sends FindCoordinator(TRANSACTION) and then
DescribeTransactions for :data:`VISIBILITY_PROBE_ID`, an id no producer uses:

* ``TRANSACTIONAL_ID_NOT_FOUND`` (or any state, should someone use the id): the principal may
  Describe an arbitrary transactional id -> it may Describe every one (the grant covers ``*``)
  -> ``ClusterSnapshot.transactional_ids_visible = True``;
* ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` (from either request): the grant does not cover
  an arbitrary id -> ListTransactions may leave ids out -> ``False``;
* anything else (broker down, coordinator loading, timeout): ``None``, and the failure is a
  :class:`~exporter.model.CollectionError` (api ``FindCoordinator`` or
  ``DescribeTransactions``) like any other.

It costs two small requests per cycle and is re-done every cycle, so an ACL change is seen at
the next cycle. Do not grant ACLs that name the probe id (or a prefix of it) specially: the
probe would then report a visibility the other ids do not have. The first probe on a cluster
that never had a transaction makes Kafka create ``__transaction_state`` (as any
transactional producer would) and answers ``COORDINATOR_NOT_AVAILABLE``; the probe asks
again twice, half a second apart, while the cycle's deadline allows, then gives up for
this cycle (``None`` and the error).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from exporter.kafka._protocol import ProtocolClient
from exporter.kafka.errors import NOT_FOUND, KafkaRequestError, error_name_for_code
from exporter.kafka.results import Collected, Gather, remaining_s, timeout_ms
from exporter.model import ListedTransaction, TopicPartition, TransactionDescription

#: The transactional id of the visibility probe: never used by a producer.
VISIBILITY_PROBE_ID = "kafka-txn-exporter.visibility-probe"
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
_TRANSACTION_COORDINATOR = 1  # FindCoordinator key type (CoordinatorType.TRANSACTION)
#: Errors that mean "ask again in a moment": the coordinator is being created or loaded.
COORDINATOR_NOT_READY = frozenset({"COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"})
PROBE_ATTEMPTS = 3
PROBE_BACKOFF_S = 0.5


def list_transactions(
    client: ProtocolClient,
    broker_ids: Sequence[int],
    *,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    min_duration_ms: int | None = None,
    transactional_id_pattern: str | None = None,
    request_timeout_ms: int,
    deadline: float | None = None,
) -> Collected[ListedTransaction]:
    """ListTransactions on every broker (each coordinates some transactional ids)."""
    from kafka.protocol.admin.transactions import ListTransactionsRequest

    gather: Gather[ListedTransaction] = Gather("ListTransactions")
    if not broker_ids:
        return gather.result()
    kwargs: dict[str, Any] = {"state_filters": list(states), "producer_id_filters": list(producer_ids)}
    if min_duration_ms is not None:
        kwargs.update(duration_filter=min_duration_ms, min_version=1)
    if transactional_id_pattern is not None:
        kwargs.update(transactional_id_pattern=transactional_id_pattern, min_version=2)
    requests = [(b, b, ListTransactionsRequest(**kwargs)) for b in broker_ids]
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    for broker_id, _, response in client.run(client.send_all, requests, wait_ms):
        if isinstance(response, BaseException):
            gather.fail(response, broker_id=broker_id)
        elif gather.ok(response.error_code, broker_id=broker_id):
            gather.add(
                *(
                    ListedTransaction(broker_id, t.transactional_id, t.producer_id, t.transaction_state)
                    for t in response.transaction_states
                )
            )
    return gather.result()


def describe_transactions(
    client: ProtocolClient,
    ids_by_coordinator: Mapping[int, Iterable[str]],
    request_timeout_ms: int,
    deadline: float | None = None,
) -> Collected[TransactionDescription]:
    """DescribeTransactions, one request per coordinator, all at once. A transactional id
    the coordinator does not know is a row with ``error=TRANSACTIONAL_ID_NOT_FOUND`` (an
    answer, not a failure); any other per-id error is a row and a CollectionError."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    gather: Gather[TransactionDescription] = Gather("DescribeTransactions")
    requests = [
        (c, c, DescribeTransactionsRequest(transactional_ids=sorted(set(ids))))
        for c, ids in ids_by_coordinator.items()
        if ids
    ]
    if not requests:
        return gather.result()
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    for coordinator, _, response in client.run(client.send_all, requests, wait_ms):
        if isinstance(response, BaseException):
            gather.fail(response, broker_id=coordinator)
            continue
        for t in response.transaction_states:
            error = error_name_for_code(t.error_code) if t.error_code else None
            if error is not None and error != NOT_FOUND:
                gather.fail(error, broker_id=coordinator)
            gather.add(
                TransactionDescription(
                    coordinator_id=coordinator,
                    transactional_id=t.transactional_id,
                    error=error,
                    state=t.transaction_state or "",
                    timeout_ms=t.transaction_timeout_ms,
                    start_time_ms=t.transaction_start_time_ms,
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    partitions=tuple(TopicPartition(tp.topic, p) for tp in t.topics for p in tp.partitions),
                )
            )
    return gather.result()


def find_coordinators(
    client: ProtocolClient,
    transactional_ids: Iterable[str],
    request_timeout_ms: int,
    deadline: float | None = None,
) -> Collected[tuple[str, int]]:
    """FindCoordinator(TRANSACTION) v4+ for all ids in one request to any broker:
    rows (transactional id, coordinator broker id), an error per id not found."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    gather: Gather[tuple[str, int]] = Gather("FindCoordinator")
    ids = sorted(set(transactional_ids))
    if not ids:
        return gather.result()
    request = FindCoordinatorRequest(key_type=_TRANSACTION_COORDINATOR, coordinator_keys=ids, min_version=4)
    wait_ms = timeout_ms(request_timeout_ms, deadline, gather.api)
    [(_, broker_id, response)] = client.run(client.send_all, [(None, None, request)], wait_ms)
    if isinstance(response, BaseException):
        gather.fail(response, broker_id=broker_id)
        return gather.result()
    for c in response.coordinators:
        if gather.ok(c.error_code, broker_id=broker_id, message=c.error_message):
            gather.add((c.key, c.node_id))
    return gather.result()


def find_coordinator_ids(
    client: ProtocolClient, transactional_ids: Iterable[str], request_timeout_ms: int
) -> dict[str, int]:
    """:func:`find_coordinators` for the CLI: raises KafkaRequestError on the first failure."""
    found = find_coordinators(client, transactional_ids, request_timeout_ms)
    if found.errors:
        e = found.errors[0]
        raise KafkaRequestError(e.api, e.error, broker_id=e.broker_id, message=e.message)
    return dict(found.rows)


def probe_visibility(
    client: ProtocolClient, request_timeout_ms: int, deadline: float | None = None
) -> Collected[bool]:
    """Whether the principal may Describe every transactional id (see the module docstring):
    one row (True / False), or no row and the error that left it unknown.

    A coordinator that is not ready yet (``__transaction_state`` being created or loaded)
    is asked again, up to :data:`PROBE_ATTEMPTS` times, while the deadline allows."""
    probed = _probe_once(client, request_timeout_ms, deadline)
    for _ in range(PROBE_ATTEMPTS - 1):
        left = remaining_s(deadline)
        if probed.rows or not any(e.error in COORDINATOR_NOT_READY for e in probed.errors):
            break
        if left is not None and left < 2 * PROBE_BACKOFF_S:
            break
        time.sleep(PROBE_BACKOFF_S)
        probed = _probe_once(client, request_timeout_ms, deadline)
    return probed


def _probe_once(client: ProtocolClient, request_timeout_ms: int, deadline: float | None) -> Collected[bool]:
    located = find_coordinators(client, [VISIBILITY_PROBE_ID], request_timeout_ms, deadline)
    if located.errors:
        if located.errors[0].error == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return Collected((False,))
        return Collected((), located.errors)
    [(_, coordinator)] = located.rows
    described = describe_transactions(
        client, {coordinator: [VISIBILITY_PROBE_ID]}, request_timeout_ms, deadline
    )
    rows = [d for d in described.rows if d.transactional_id == VISIBILITY_PROBE_ID]
    if rows and rows[0].error == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return Collected((False,))
    if rows and rows[0].error in (None, NOT_FOUND):
        return Collected((True,))
    if described.errors:
        return Collected((), described.errors)
    failed: Gather[bool] = Gather("DescribeTransactions")
    failed.fail("UNKNOWN_SERVER_ERROR", broker_id=coordinator, message="no answer for the visibility probe")
    return failed.result()


__all__ = [
    "VISIBILITY_PROBE_ID",
    "describe_transactions",
    "find_coordinator_ids",
    "find_coordinators",
    "list_transactions",
    "probe_visibility",
]
