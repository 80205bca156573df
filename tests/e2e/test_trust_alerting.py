"""A page survives the crash of the brokers that hold its evidence (issue 10), seen from a
real Prometheus evaluating the generated rules.

On the 3-node cluster a hanging transaction is confirmed; then its coordinator broker and,
separately, its partition's leader are killed (SIGKILL) and restarted while the daemon runs
on its schedule (interval 2 s). ``KafkaTransactionHanging`` must fire, and stay firing in
every evaluation through both crashes and restarts (a resolve would page again later: the
on-call person would see the incident flap). The exporter's own view agrees: the finding
stays ``hanging`` and is never re-suspected.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.model import TxnClass
from testbed.broker import KafkaCluster, free_port
from testbed.faults import killed
from tests.e2e.stack import (
    LOOPBACK,
    Server,
    describe_json,
    prometheus_config,
    query,
    render_rules,
    running,
    short_thresholds,
    start_prometheus,
    wait_until,
)
from tests.fixtures_kafka import HangingFactory

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.kafka, pytest.mark.spark, pytest.mark.cluster]

CLUSTER = "e2e-trust"
ALERT = "KafkaTransactionHanging"
#: How long each crash is watched, and the restart after it (in Prometheus evaluations of 1 s).
CRASH_WATCH_S = 15.0
RESTART_WATCH_S = 10.0
FIRING_WAIT_S = 300.0
CYCLE_DRAIN_S = 90.0


@pytest.fixture
def scheduled_daemon(kafka_any: KafkaCluster, topic: str, spark: SparkSession) -> Iterator[Daemon]:
    config = parse_config({
        "web": {"listen_address": f"{LOOPBACK}:0"},
        "clusters": [{
            "name": CLUSTER, "bootstrap_servers": kafka_any.bootstrap_servers,
            "interval": "2s", "request_timeout": "1500ms", "topics": {"allow": [re.escape(topic)]},
        }],
    }, env={})  # fmt: skip
    daemon = Daemon(config, pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))
    with running(daemon, CYCLE_DRAIN_S):
        yield daemon


@pytest.fixture
def prometheus(tmp_path: Path, scheduled_daemon: Daemon) -> Iterator[Server]:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    config = prometheus_config(
        exporter_target=f"{LOOPBACK}:{scheduled_daemon.port}",
        alertmanager_target=f"{LOOPBACK}:{free_port()}",  # nobody: the alert's state is the subject
        rule_file=directory / "kafka-txn-exporter.rules.yml",
    )
    server = start_prometheus(directory, config, render_rules(short_thresholds("2s")), free_port())
    try:
        yield server
    finally:
        server.process.stop()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kafka_any", ["kafka_cluster3"], indirect=True)
def test_hanging_page_never_resolves_while_its_coordinator_and_leader_crash(
    kafka_any: KafkaCluster,
    topic: str,
    hanging: HangingFactory,
    scheduled_daemon: Daemon,
    prometheus: Server,
) -> None:
    cluster = kafka_any
    stuck = hanging(topic, partition=0)
    key = (stuck.partition, stuck.producer_id, stuck.start_offset)
    firing_expr = f'ALERTS{{alertname="{ALERT}",alertstate="firing",topic="{topic}",partition="0"}}'

    def firing() -> bool:
        return bool(query(prometheus, firing_expr))

    def exporter_class() -> TxnClass | None:
        result = scheduled_daemon.store.get(CLUSTER).result
        if result is None:
            return None
        found = [f for f in result.findings if (f.partition, f.producer_id, f.start_offset) == key]
        return found[0].txn_class if found else None

    def diagnostics() -> str:
        return (
            f"--- Prometheus /api/v1/alerts:\n{describe_json(prometheus.url + '/api/v1/alerts')}\n"
            f"--- exporter's class of the transaction: {exporter_class()}\n" + prometheus.process.describe()
        )

    wait_until(
        lambda: firing() or None, timeout_s=FIRING_WAIT_S, what=f"{ALERT} firing", diagnostics=diagnostics
    )

    def watch(seconds: float, what: str) -> list[tuple[str, bool, TxnClass | None]]:
        seen = []
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            seen.append((what, firing(), exporter_class()))
            time.sleep(1.0)
        return seen

    seen: list[tuple[str, bool, TxnClass | None]] = []
    for role, victim in (
        ("coordinator", cluster.coordinator_of(stuck.transactional_id)),
        ("leader", stuck.leader),
    ):
        log.info("killing the %s, broker %d", role, victim)
        with killed(cluster, victim):
            seen += watch(CRASH_WATCH_S, f"{role} {victim} down")
        seen += watch(RESTART_WATCH_S, f"{role} {victim} restarted")

    not_firing = [s for s in seen if not s[1]]
    re_suspected = [s for s in seen if s[2] not in (TxnClass.HANGING, None)]
    assert not_firing == [], f"{ALERT} resolved during: {not_firing}\n{diagnostics()}"
    assert re_suspected == [], f"the finding changed class: {re_suspected}"
    assert any(s[2] is TxnClass.HANGING for s in seen)
