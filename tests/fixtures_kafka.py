"""pytest plugin: the real Kafka test bed (registered from the root conftest.py).

Fixtures
--------
``kafka_dist``      session: the fetched, verified Kafka distribution (``KAFKA_VERSION``).
``kafka``           session: a single-node cluster, started once.
``kafka_cluster3``  session: a 3-node cluster, started only when a test asks for it.
``kafka_any``       the single node or the 3-node cluster; parametrize it indirectly with
                    ``KAFKA_CLUSTERS`` (``@pytest.mark.parametrize("kafka_any", ...)``).
``topic``           a fresh topic (3 partitions) on ``kafka_any`` when the test uses it,
                    else on ``kafka``.
``transactions_cli`` Kafka's ``kafka-transactions.sh`` on the test's cluster.
``hanging``         creates hanging transactions and aborts them (Kafka's tool) at teardown.
``kafka_acl``       session: a single node with KRaft's StandardAuthorizer, a super user for
                    the test bed's PLAINTEXT listener and a SASL_PLAINTEXT (PLAIN) listener
                    with the users of ``testbed.acls.TEST_SASL_USERS``.
``kafka_2pc``       session: a single node that serves two-phase-commit InitProducerId
                    (Kafka 4.1+; skips the test on older versions).
``kafka_faults``    session: a single node whose ``SLOW`` listener goes through a delay proxy,
                    for fault tests that pause, kill or slow it (each test restores it).
``kafka_markers``   session: 3 nodes where a paused partition leader leaves its transaction's
                    coordinator in PrepareCommit (markers pending) until it is resumed.
"""

from __future__ import annotations

import importlib
import logging
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: kafka-python 3.0.12 loads its protocol schemas with the deprecated
#: ``importlib.resources.read_text``; pytest turns that into an error (filterwarnings).
KAFKA_PYTHON_READ_TEXT_FILTER = (
    r"ignore:(read|open)_text is deprecated:DeprecationWarning:kafka.protocol.schemas.load_json"
)
with warnings.catch_warnings():
    # This plugin is imported while pytest's "error" filter is active already.
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    importlib.import_module("kafka.protocol")

# The imports below pull in kafka-python, which the guarded import above loaded already.
from testbed.acls import TEST_SASL_USERS  # noqa: E402
from testbed.broker import BrokerStartError, KafkaCluster, Listener, lost_port_race  # noqa: E402
from testbed.maven import KafkaDistribution, fetch  # noqa: E402
from testbed.oracles import ToolError, TransactionsCommand  # noqa: E402
from testbed.scenarios import (  # noqa: E402
    TWO_PHASE_COMMIT_BROKER_PROPERTIES,
    HangingTransaction,
    create_hanging_transaction,
)

log = logging.getLogger(__name__)

#: transaction.max.timeout.ms of the test clusters (Kafka's default: 15 min). Late = this
#: + 5 min, which back-dated hanging transactions exceed at once.
TEST_TRANSACTION_MAX_TIMEOUT_MS = 900_000
#: How often the coordinator looks for timed-out transactions (default 10 s).
TEST_ABORT_CLEANUP_INTERVAL_MS = 1_000
TOPIC_PARTITIONS = 3

KAFKA_CLUSTERS = [
    pytest.param("kafka", id="single"),
    pytest.param("kafka_cluster3", id="cluster3", marks=pytest.mark.cluster),
]

HangingFactory = Callable[..., HangingTransaction]
#: The proxied listener of ``kafka_faults`` (``cluster.bootstrap_for(SLOW_LISTENER)``).
SLOW_LISTENER = "SLOW"


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python modules imported later (inside tests) load schemas the same way.
    config.addinivalue_line("filterwarnings", KAFKA_PYTHON_READ_TEXT_FILTER)


def _start_cluster(dist: KafkaDistribution, brokers: int, **options: Any) -> KafkaCluster:
    """A started cluster; a start that lost a port to another process is tried once more
    with new ports (any other failure fails the test with the broker's log)."""
    for attempt in (1, 2):
        cluster = KafkaCluster(
            dist,
            brokers=brokers,
            transaction_max_timeout_ms=TEST_TRANSACTION_MAX_TIMEOUT_MS,
            abort_timed_out_transaction_cleanup_interval_ms=TEST_ABORT_CLEANUP_INTERVAL_MS,
            **options,
        )
        try:
            cluster.start()
        except BrokerStartError as exc:
            if attempt == 1 and lost_port_race(exc):
                continue
            pytest.fail(f"Kafka test cluster ({brokers} node(s)) did not start:\n{exc}")
        return cluster
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def kafka_dist() -> KafkaDistribution:
    return fetch()


@pytest.fixture(scope="session")
def kafka(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    cluster = _start_cluster(kafka_dist, 1)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_cluster3(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    cluster = _start_cluster(kafka_dist, 3)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_acl(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    cluster = _start_cluster(kafka_dist, 1, authorizer=True, sasl_users=TEST_SASL_USERS)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_2pc(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    if (kafka_dist.major, _minor(kafka_dist.version)) < (4, 1):
        pytest.skip(f"two-phase commit needs Kafka 4.1+, not {kafka_dist.version}")
    cluster = _start_cluster(kafka_dist, 1, server_properties=TWO_PHASE_COMMIT_BROKER_PROPERTIES)
    yield cluster
    cluster.stop()


#: ``kafka_markers``: the controller does not fence a silent broker for two minutes, and each
#: ``__transaction_state`` partition has one replica, so a paused partition leader holds its
#: transaction's markers (the coordinator stays in PrepareCommit) without holding the commit
#: itself (logging PrepareCommit needs no acknowledgement from the paused node).
MARKERS_BROKER_PROPERTIES = {
    "broker.session.timeout.ms": "120000",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}


@pytest.fixture(scope="session")
def kafka_markers(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    cluster = _start_cluster(kafka_dist, 3, server_properties=MARKERS_BROKER_PROPERTIES)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kafka_faults(kafka_dist: KafkaDistribution) -> Iterator[KafkaCluster]:
    cluster = _start_cluster(
        kafka_dist, 1, extra_listeners={SLOW_LISTENER: Listener("PLAINTEXT", via_proxy=True)}
    )
    yield cluster
    cluster.stop()


def _minor(version: str) -> int:
    parts = version.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@pytest.fixture
def kafka_any(request: pytest.FixtureRequest) -> KafkaCluster:
    """The cluster named by the (indirect) parameter: ``kafka`` or ``kafka_cluster3``."""
    name = getattr(request, "param", "kafka")
    cluster: KafkaCluster = request.getfixturevalue(name)
    return cluster


def _test_cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    name = "kafka"
    for candidate in ("kafka_any", "kafka_acl", "kafka_2pc", "kafka_faults"):
        if candidate in request.fixturenames:
            name = candidate
            break
    cluster: KafkaCluster = request.getfixturevalue(name)
    return cluster


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh, uniquely named topic with 3 partitions, fully replicated."""
    cluster = _test_cluster(request)
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:80]
    return cluster.create_topic(f"{stem}-{uuid.uuid4().hex[:8]}", partitions=TOPIC_PARTITIONS)


@pytest.fixture
def transactions_cli(request: pytest.FixtureRequest, kafka_dist: KafkaDistribution
                     ) -> TransactionsCommand:  # fmt: skip
    return TransactionsCommand(kafka_dist, _test_cluster(request).bootstrap_servers)


@pytest.fixture
def hanging(
    request: pytest.FixtureRequest, transactions_cli: TransactionsCommand
) -> Iterator[HangingFactory]:
    """``hanging(topic, partition=..., backdate_ms=...)`` makes a hanging transaction;
    every one still open at teardown is aborted with Kafka's own tool, so the
    broker-wide late-transaction gauge is clean for the next test."""
    cluster = _test_cluster(request)
    made: list[HangingTransaction] = []

    def factory(topic: str, *, partition: int = 0, backdate_ms: int = 0) -> HangingTransaction:
        txn = create_hanging_transaction(cluster, topic, partition=partition,
                                         backdate_ms=backdate_ms)  # fmt: skip
        made.append(txn)
        return txn

    yield factory
    for txn in made:
        try:
            transactions_cli.abort(txn.topic, txn.partition, txn.start_offset)
        except ToolError as exc:
            # Already aborted by the test itself: the tool finds no such transaction.
            log.info("abort of %s at teardown: %s", txn.transactional_id, exc)
