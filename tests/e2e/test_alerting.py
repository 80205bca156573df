"""The alerting path end to end, deployed the way the Prometheus Operator would deploy the
chart: a hanging transaction on a real broker pages PagerDuty, the operator CLI aborts it,
the page resolves; every dashboard query returns data meanwhile.

    Kafka (test bed) -> daemon (in-process, shared Spark session) -> /metrics
      -> Prometheus: the chart's PrometheusRule (rendered by helm, short ``for:`` through
         rules.thresholds), the exporter scraped with the target labels a ServiceMonitor adds
         (namespace, service, pod, container, endpoint, job) plus ``cluster``, the label
         kube-prometheus setups reserve for the Kubernetes cluster, also an external label
      -> Alertmanager: the configuration the Operator generates from the chart's
         AlertmanagerConfig (its route gets the namespace="<namespace>" matcher, receiver
         <namespace>/<name>/pagerduty, the routing key from its Secret, short group timers)
      -> PagerDuty Events API v2 stand-in (records every event)

The alerts must keep ``namespace`` through aggregation, or the Operator's route never
matches and nothing pages.

The states on the test topic, one per partition:

* 0: a hanging transaction back-dated by an hour, so it is late too; it pages, and the test
  aborts it with ``kafka-txn-exporter abort`` built from the command the page itself names;
* 1: a long legitimate open transaction with plain writes behind it (LSO lag); it stays
  open through the abort of the hanging one.

A consumer group (read_committed, offsets committed at the LSO of partition 0) is blocked by
the hanging transaction: that pages too (KafkaConsumerGroupBlockedByTransaction, naming the
transaction), and resolves once the abort moves the LSO.

The states are made before the daemon starts, so its first cycle already sees them.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from pyspark.sql import SparkSession

from alerts.rules import Thresholds
from dashboards.generate import prometheus_expressions
from exporter import cli
from exporter.config import parse_config
from exporter.daemon import Daemon, PipelineRunner
from testbed.broker import KafkaCluster, free_port
from testbed.scenarios import (
    DEFAULT_LATE_BACKDATE_MS,
    HangingTransaction,
    OpenTransaction,
    produce_plain,
)
from tests.e2e import operator
from tests.e2e.stack import (
    LOOPBACK,
    PagerDutyStandIn,
    Server,
    describe_json,
    prometheus_config,
    query,
    running,
    start_alertmanager,
    start_prometheus,
    wait_until,
)
from tests.fixtures_kafka import HangingFactory

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.kafka, pytest.mark.spark]

CLUSTER = "e2e"
HANGING_PARTITION = 0
LEGIT_PARTITION = 1
#: Plain records written behind the legitimate open transaction: its partition's LSO lag.
PLAIN_RECORDS = 50
#: The ``for:`` of every alert in the test's rule file.
ALERT_FOR = "2s"
#: Upper bound of the wait for the page. It includes the daemon's first, cold Spark pipeline
#: run: 40-45 s on a busy 2-CPU runner (later cycles ~13 s), and more than 120 s on a runner
#: shared by several Spark jobs (load average above 20 on 2 CPUs).
PAGE_WAIT_S = 300.0
#: Upper bound of the wait for the resolution after the abort (seen: ~25 s).
ALERT_WAIT_S = 90.0
#: Upper bound of the wait for every dashboard query to return data.
DASHBOARD_WAIT_S = 60.0
#: Upper bound of committing the blocked group's offset until Kafka answers it back.
COMMIT_WAIT_S = 60.0
#: Upper bound of the wait, at teardown, for a cycle the daemon's stop() abandoned.
CYCLE_DRAIN_S = 90.0
ROUTING_KEY = "e2e0routing0key0000000000000000a"
HANGING_ALERT = "KafkaTransactionHanging"
BLOCKED_ALERT = "KafkaConsumerGroupBlockedByTransaction"
#: The read_committed group that waits at the hanging transaction's LSO.
BLOCKED_GROUP = "kte-e2e-reader"
#: Where the chart is "installed", and what the ServiceMonitor's targets are called.
RELEASE = "kte"
NAMESPACE = "kafka-monitoring"
SERVICE = f"{RELEASE}-kafka-txn-exporter"
POD = f"{SERVICE}-6d9c8b7f5-x2x4z"
ROUTING_SECRET = ("kte-pagerduty", "routing-key")
#: The Kubernetes cluster label of kube-prometheus setups: a target and an external label.
K8S_CLUSTER = {"cluster": "k8s-e2e"}

#: Dashboard queries that may legitimately return nothing in this test, with the reason.
#: Every other dashboard query must return data from the real Prometheus.
ALLOWED_EMPTY: dict[str, str] = {
    "sum by (kafka_cluster, api, error) (rate(kafka_txn_exporter_request_errors_total"
    '{kafka_cluster=~".*"}[1m]))': "the request-error counter has series only once a Kafka "
    "request failed; against a healthy broker none fails (tests/integration/test_daemon.py "
    "covers them)",
}


def chart_values(stand_in: PagerDutyStandIn) -> dict[str, Any]:
    """The chart's values for this test: short ``for:``s, short group timers, the stand-in."""
    short: dict[str, object] = {f.name: ALERT_FOR for f in fields(Thresholds) if f.name.endswith("_for")}
    short["consumer_blocked_seconds"] = 1
    return {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "rules": {"thresholds": short},
        "alertmanagerConfig": {
            "enabled": True,
            "pagerduty": {"routingKeySecret": {"name": ROUTING_SECRET[0],
                                               "key": ROUTING_SECRET[1]},
                          "url": stand_in.pagerduty_url},
            "groupWait": "1s",
            "groupInterval": "2s",
            "repeatInterval": "1h",
        },
    }  # fmt: skip


@pytest.fixture
def chart(stand_in: PagerDutyStandIn) -> list[operator.Manifest]:
    return operator.render_chart(RELEASE, NAMESPACE, chart_values(stand_in))


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def stand_in() -> Iterator[PagerDutyStandIn]:
    with PagerDutyStandIn() as server:
        yield server


@pytest.fixture
def alertmanager(tmp_path: Path, chart: list[operator.Manifest]) -> Iterator[Server]:
    directory = tmp_path / "alertmanager"
    directory.mkdir()
    config = operator.alertmanager_config(operator.one(chart, "AlertmanagerConfig"),
                                          {ROUTING_SECRET: ROUTING_KEY})  # fmt: skip
    server = start_alertmanager(directory, yaml.safe_dump(config, sort_keys=False), free_port())
    try:
        yield server
    finally:
        server.process.stop()


@dataclass(frozen=True)
class TransactionStates:
    hanging: HangingTransaction
    legit: OpenTransaction


@pytest.fixture
def states(kafka: KafkaCluster, topic: str, hanging: HangingFactory
           ) -> Iterator[TransactionStates]:  # fmt: skip
    """The legitimate open transaction with plain writes behind it, and the hanging one
    (aborted at teardown by the ``hanging`` fixture if the test did not)."""
    with OpenTransaction(kafka.bootstrap_servers, topic, partition=LEGIT_PARTITION,
                         transaction_timeout_ms=600_000) as legit:  # fmt: skip
        legit.begin(records=1)
        produce_plain(kafka.bootstrap_servers, topic, partition=LEGIT_PARTITION,
                      records=PLAIN_RECORDS)  # fmt: skip
        txn = hanging(topic, partition=HANGING_PARTITION, backdate_ms=DEFAULT_LATE_BACKDATE_MS)
        commit_group_offset(kafka, BLOCKED_GROUP, topic, HANGING_PARTITION, txn.start_offset)
        yield TransactionStates(hanging=txn, legit=legit)


def commit_group_offset(kafka: KafkaCluster, group: str, topic: str, partition: int, offset: int) -> None:
    """What a read_committed consumer commits once it has read everything up to the LSO,
    committed until Kafka answers it back (OffsetFetch): on a fresh broker a commit can
    succeed and still be lost (a partition error in the result, or, as bench/groups_bench.py
    found on Kafka 4.4, a group committed without error and later listed by no broker). A
    CI run lost it once and waited 300 s for a page about a group Kafka did not have."""
    admin = kafka.admin()
    deadline = time.monotonic() + COMMIT_WAIT_S
    while True:
        [future] = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, offset)])]
        ).values()
        try:
            errors = [tp.error for tp in future.result(timeout=30).topic_partitions or [] if tp.error]
            [fetched] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
            committed = {
                (tp.topic, tp.partition): tp.offset
                for tp in fetched.result(timeout=30).topic_partitions or []
            }
        except KafkaException as e:
            errors, committed = [e], {}
        if not errors and committed.get((topic, partition)) == offset:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"group {group} did not keep offset {offset} on {topic}-{partition}: "
                f"errors {errors}, committed {committed}"
            )
        time.sleep(0.5)


@pytest.fixture
def exporter(kafka: KafkaCluster, topic: str, spark: SparkSession, states: TransactionStates
             ) -> Iterator[Daemon]:  # fmt: skip
    """The daemon in-process on the shared Spark session, watching only the test topic."""
    config = parse_config(
        {
            "clusters": [
                {
                    "name": CLUSTER,
                    "bootstrap_servers": kafka.bootstrap_servers,
                    "interval": "2s",
                    "request_timeout": "1s",
                    "topics": {"allow": [re.escape(topic)]},
                    "groups": {"allow": [re.escape(BLOCKED_GROUP)], "blocked_after_cycles": 1},
                }
            ],
            "web": {"listen_address": f"{LOOPBACK}:0"},
            "pipeline": {"hanging_confirm_cycles": 1},
        },
        env={},
    )
    daemon = Daemon(config, pipeline=PipelineRunner(config.spark, config.pipeline, session=spark))
    with running(daemon, CYCLE_DRAIN_S):
        yield daemon


@pytest.fixture
def prometheus(tmp_path: Path, exporter: Daemon, alertmanager: Server,
               chart: list[operator.Manifest]) -> Iterator[Server]:  # fmt: skip
    directory = tmp_path / "prometheus"
    directory.mkdir()
    rules = directory / "kafka-txn-exporter.rules.yml"
    target = f"{LOOPBACK}:{exporter.port}"
    scrape = operator.service_monitor_scrape(operator.one(chart, "ServiceMonitor"),
                                             target=target, namespace=NAMESPACE,
                                             service=SERVICE, pod=POD,
                                             extra_labels=K8S_CLUSTER)  # fmt: skip
    config = prometheus_config(exporter_target=target,
                               alertmanager_target=f"{LOOPBACK}:{alertmanager.port}",
                               rule_file=rules, scrape_configs=[scrape],
                               external_labels=K8S_CLUSTER)  # fmt: skip
    server = start_prometheus(directory, config,
                              operator.rule_file(operator.one(chart, "PrometheusRule")),
                              free_port())  # fmt: skip
    try:
        yield server
    finally:
        server.process.stop()


# -- helpers --------------------------------------------------------------------------------


#: The exporter's own series printed when a wait fails.
GROUP_DIAGNOSTICS = re.compile(
    r"^kafka_txn_(exporter_(cycles_total|request_errors_total|up)|consumer_group_|hanging_transaction_info)"
)


def exporter_lines(exporter: Daemon, pattern: re.Pattern[str]) -> str:
    url = f"http://{LOOPBACK}:{exporter.port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError as e:
        return f"<cannot read {url}: {e}>"
    return "\n".join(line for line in text.splitlines() if pattern.match(line))


def describe_group(kafka: KafkaCluster, group: str) -> str:
    """What Kafka itself lists and returns for ``group`` (ListGroups, OffsetFetch)."""
    admin = kafka.admin()
    try:
        listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        listing = [
            (g.group_id, str(g.state), str(getattr(g, "type", "")))
            for g in listed.valid
            if g.group_id == group
        ]
        [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        offsets = future.result(timeout=15).topic_partitions
    except Exception as e:  # a dump must not fail the dump
        return f"<cannot describe group {group}: {e!r}>"
    committed = [(tp.topic, tp.partition, tp.offset) for tp in offsets or []]
    return f"listed: {listing} (errors: {listed.errors}); committed: {committed}"


def payload(event: dict[str, Any]) -> dict[str, Any]:
    value = event.get("payload")
    return value if isinstance(value, dict) else {}


def custom_details(event: dict[str, Any]) -> dict[str, Any]:
    value = payload(event).get("custom_details")
    return value if isinstance(value, dict) else {}


def hanging_page(stand_in: PagerDutyStandIn, txn: HangingTransaction) -> dict[str, Any] | None:
    """The first ``trigger`` event for the hanging alert on ``txn``'s partition, if any."""
    where = f"{txn.topic}-{txn.partition} "
    for event in stand_in.pagerduty_events():
        if (
            event.get("event_action") == "trigger"
            and payload(event).get("class") == HANGING_ALERT
            and where in str(payload(event).get("summary", ""))
        ):
            return event
    return None


def blocked_page(stand_in: PagerDutyStandIn, txn: HangingTransaction) -> dict[str, Any] | None:
    """The first ``trigger`` event for the blocked-group alert on ``txn``'s partition."""
    for event in stand_in.pagerduty_events():
        if (
            event.get("event_action") == "trigger"
            and payload(event).get("class") == BLOCKED_ALERT
            and f"{txn.topic}-{txn.partition} " in str(payload(event).get("summary", ""))
        ):
            return event
    return None


def resolution(stand_in: PagerDutyStandIn, dedup_key: str) -> dict[str, Any] | None:
    for event in stand_in.pagerduty_events():
        if event.get("event_action") == "resolve" and event.get("dedup_key") == dedup_key:
            return event
    return None


def abort_arguments(description: str) -> list[str]:
    """The ``abort`` flags of the command the page's description tells the operator to run."""
    match = re.search(
        r"kafka-txn-exporter abort (--topic \S+ --partition \d+ "
        r"--start-offset \d+)",
        description,
    )
    assert match, f"the page does not name the abort command:\n{description}"
    return match.group(1).split()


class DashboardQueries:
    """Runs every dashboard expression against Prometheus; remembers the last answer."""

    def __init__(self, prometheus: Server) -> None:
        self._prometheus = prometheus
        self.expressions = prometheus_expressions()
        self.series: dict[str, int] = {}

    def missing(self) -> list[str]:
        return [e for e in self.expressions if self.series.get(e, 0) == 0 and e not in ALLOWED_EMPTY]

    def all_have_data(self) -> bool | None:
        self.series = {expr: len(query(self._prometheus, expr)) for expr in self.expressions}
        return True if not self.missing() else None

    def describe(self) -> str:
        lines = ["--- dashboard queries (series returned):"]
        for expr in self.expressions:
            note = " (allowed empty)" if expr in ALLOWED_EMPTY else ""
            lines.append(f"{self.series.get(expr, '?')!s:>4}  {expr}{note}")
        return "\n".join(lines)


# -- the test -------------------------------------------------------------------------------


@pytest.mark.timeout(720)
def test_hanging_transaction_pages_and_resolves_after_cli_abort(
    kafka: KafkaCluster,
    states: TransactionStates,
    exporter: Daemon,
    alertmanager: Server,
    prometheus: Server,
    stand_in: PagerDutyStandIn,
) -> None:
    txn = states.hanging
    started = time.monotonic()
    dashboards = DashboardQueries(prometheus)
    stale = sorted(set(ALLOWED_EMPTY) - set(dashboards.expressions))
    assert not stale, f"ALLOWED_EMPTY names queries no dashboard uses any more: {stale}"

    def diagnostics() -> str:
        state = exporter.store.get(CLUSTER)
        return "\n\n".join(
            [
                f"--- Prometheus /api/v1/alerts:\n{describe_json(prometheus.url + '/api/v1/alerts')}",
                f"--- Alertmanager /api/v2/alerts:\n{describe_json(alertmanager.url + '/api/v2/alerts')}",
                stand_in.describe(),
                f"--- Prometheus targets:\n{describe_json(prometheus.url + '/api/v1/targets')}",
                dashboards.describe(),
                f"--- exporter: up {state.up}, {state.cycles_complete} complete cycle(s), last "
                f"stages (s): {dict(state.stage_seconds)}, group lags in the last result: "
                f"{len(state.result.groups.lags) if state.result and state.result.groups else None}",
                f"--- exporter /metrics:\n{exporter_lines(exporter, GROUP_DIAGNOSTICS)}",
                f"--- Kafka's view of {BLOCKED_GROUP}:\n{describe_group(kafka, BLOCKED_GROUP)}",
                prometheus.process.describe(),
                alertmanager.process.describe(),
            ]
        )

    # 1. The hanging transaction pages, naming topic, partition and producer id.
    page = wait_until(
        lambda: hanging_page(stand_in, txn),
        timeout_s=PAGE_WAIT_S,
        what=f"a PagerDuty trigger for {HANGING_ALERT} on {txn.topic}-{txn.partition}",
        diagnostics=diagnostics,
    )
    log.info("paged after %.1f s: %s", time.monotonic() - started, page)
    details = custom_details(page)
    description = str(details.get("description", ""))
    assert page["routing_key"] == ROUTING_KEY, page
    assert page["dedup_key"], page
    assert payload(page)["severity"] == "critical", page
    assert payload(page)["group"] == CLUSTER, page  # kafka_cluster, not the Kubernetes cluster
    assert details.get("namespace") == NAMESPACE, page  # kept through the rule's aggregation
    assert payload(page)["summary"] == (
        f"Hanging transaction on {txn.topic}-{txn.partition} in cluster {CLUSTER}"
    ), page
    assert f"Partition {txn.topic}-{txn.partition} " in description, page
    assert f"producer id {txn.producer_id} " in description, page
    assert f"'{txn.transactional_id}'" in description, page
    assert str(details.get("runbook_url", "")).endswith(f"/{HANGING_ALERT}.md"), page

    # 1b. The read_committed group waiting at the hanging transaction's LSO pages too,
    # naming the transaction that blocks it.
    blocked = wait_until(
        lambda: blocked_page(stand_in, txn),
        timeout_s=PAGE_WAIT_S,
        what=f"a PagerDuty trigger for {BLOCKED_ALERT} on {txn.topic}-{txn.partition}",
        diagnostics=diagnostics,
    )
    blocked_description = str(custom_details(blocked).get("description", ""))
    assert f"group {BLOCKED_GROUP} " in blocked_description, blocked
    assert f"producer id {txn.producer_id} " in blocked_description, blocked
    assert f"starting at offset {txn.start_offset}." in blocked_description, blocked

    # 2. Every dashboard query returns data while hanging, late, LSO lag and an open
    # legitimate transaction are all present, with a `cluster` target label on every series.
    wait_until(
        dashboards.all_have_data,
        timeout_s=DASHBOARD_WAIT_S,
        what="every dashboard query to return data (0 = no series, below)",
        diagnostics=diagnostics,
    )
    log.info("every dashboard query has data after %.1f s", time.monotonic() - started)

    # 3. The operator runs the abort the page names; the legitimate transaction stays open.
    flags = abort_arguments(description)
    assert flags == [
        "--topic",
        txn.topic,
        "--partition",
        str(txn.partition),
        "--start-offset",
        str(txn.start_offset),
    ], description
    assert SparkSession.getActiveSession() is not None, (
        "no active Spark session in the test thread: the CLI would start and stop one of its "
        "own, stopping the session the daemon uses"
    )
    assert cli.main(["abort", "--bootstrap-server", kafka.bootstrap_servers, *flags, "--yes"]) == 0
    log.info("aborted with the CLI after %.1f s", time.monotonic() - started)

    # 4. The page resolves: same dedup key, event_action resolve.
    wait_until(
        lambda: resolution(stand_in, str(page["dedup_key"])),
        timeout_s=ALERT_WAIT_S,
        what=f"the PagerDuty resolve for dedup_key {page['dedup_key']}",
        diagnostics=diagnostics,
    )
    log.info("resolved after %.1f s", time.monotonic() - started)
    wait_until(
        lambda: resolution(stand_in, str(blocked["dedup_key"])),
        timeout_s=ALERT_WAIT_S,
        what=f"the PagerDuty resolve of {BLOCKED_ALERT} (dedup_key {blocked['dedup_key']})",
        diagnostics=diagnostics,
    )
    assert states.legit.is_open
