"""Inhibition on a real Alertmanager: only the same object is muted.

Alerts are posted to Alertmanager's API as Prometheus would send them; Alertmanager's own
``inhibitedBy`` status is the verdict. Two configurations are checked: the example
(alerts/alertmanager.example.yml) and the one the Prometheus Operator generates from the
chart's AlertmanagerConfig (tests/e2e/operator.py).
"""

from __future__ import annotations

import datetime
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.alertmanager import render_example
from testbed.broker import free_port
from tests.e2e import operator
from tests.e2e.stack import (
    PagerDutyStandIn,
    Server,
    describe_json,
    get_json,
    start_alertmanager,
    wait_until,
)

pytestmark = [pytest.mark.e2e]

NAMESPACE = "kafka-monitoring"
RELEASE = "kte"
ROUTING_KEY = "e2e0routing0key0000000000000000b"


def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC)
    return {
        "labels": {"alertname": name, "severity": severity, "namespace": NAMESPACE,
                   "job": "kte-kafka-txn-exporter", "kafka_cluster": "prod", **labels},
        "annotations": {"summary": name},
        "startsAt": now.isoformat(),
        "endsAt": (now + datetime.timedelta(minutes=10)).isoformat(),
    }  # fmt: skip


#: id -> (alert, muted?). The sources fire too and are never muted.
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "hanging-finding": (alert("KafkaTransactionHanging", "critical", broker="1", topic="orders",
                              partition="0", producer_id="7"), False),
    "late-same-partition": (alert("KafkaTransactionsLate", "warning", broker="1",
                                  topic="orders", partition="0", producer_id="7"), True),
    "lso-lag-same-partition": (alert("KafkaLastStableOffsetLagGrowing", "warning",
                                     topic="orders", partition="0"), True),
    "late-other-partition": (alert("KafkaTransactionsLate", "warning", broker="1",
                                   topic="orders", partition="1", producer_id="8"), False),
    "hanging-broker-fallback": (alert("KafkaTransactionHanging", "critical", broker="2"), False),
    "late-broker-fallback-same-broker": (alert("KafkaTransactionsLate", "warning",
                                               broker="2"), True),
    "late-broker-fallback-other-broker": (alert("KafkaTransactionsLate", "warning",
                                                broker="3"), False),
    "late-finding-on-the-fallback-broker": (alert("KafkaTransactionsLate", "warning",
                                                  broker="2", topic="payments", partition="5",
                                                  producer_id="9"), False),
    "exporter-down": (alert("KafkaTxnExporterDown", "warning"), False),
    "verification-other-broker": (alert("KafkaTransactionVerificationDisabled", "warning",
                                        broker="2"), False),
    # The same alert at two severities (e.g. a user's extra warning threshold).
    "coordinator-critical": (alert("KafkaTransactionCoordinatorOpenTimeHigh", "critical",
                                   coordinator="1"), False),
    "coordinator-warning-same": (alert("KafkaTransactionCoordinatorOpenTimeHigh", "warning",
                                       coordinator="1"), True),
    "coordinator-warning-other": (alert("KafkaTransactionCoordinatorOpenTimeHigh", "warning",
                                        coordinator="2"), False),
}  # fmt: skip


def example_config(stand_in: PagerDutyStandIn, directory: Path) -> str:
    key = directory / "routing-key"
    key.write_text(ROUTING_KEY)
    return render_example(pagerduty_url=stand_in.pagerduty_url, routing_key_file=key,
                          ticket_webhook_url=stand_in.tickets_url)  # fmt: skip


def operator_config(stand_in: PagerDutyStandIn, directory: Path) -> str:
    docs = operator.render_chart(RELEASE, NAMESPACE, {
        "prometheusRule": {"enabled": True},
        "alertmanagerConfig": {"enabled": True, "pagerduty": {
            "routingKeySecret": {"name": "pd", "key": "routing-key"},
            "url": stand_in.pagerduty_url}},
    })  # fmt: skip
    config = operator.alertmanager_config(operator.one(docs, "AlertmanagerConfig"),
                                          {("pd", "routing-key"): ROUTING_KEY})  # fmt: skip
    return str(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture(params=["example", "operator"])
def alertmanager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    with PagerDutyStandIn() as stand_in:
        directory = tmp_path / "alertmanager"
        directory.mkdir()
        build = example_config if request.param == "example" else operator_config
        server = start_alertmanager(directory, build(stand_in, directory), free_port())
        try:
            yield server
        finally:
            server.process.stop()


def post_alerts(server: Server, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"{server.url}/api/v2/alerts", data=json.dumps(alerts).encode(), method="POST",
        headers={"Content-Type": "application/json"})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=5) as response:
        assert response.status == 200


def key(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True)


@pytest.mark.timeout(120)
def test_inhibition_mutes_only_the_same_object(alertmanager: Server) -> None:
    post_alerts(alertmanager, [a for a, _ in CASES.values()])
    expected = {key(a["labels"]): (name, muted) for name, (a, muted) in CASES.items()}

    def verdict() -> dict[str, bool] | None:
        found = {key(a["labels"]): bool(a["status"]["inhibitedBy"])
                 for a in get_json(f"{alertmanager.url}/api/v2/alerts")}  # fmt: skip
        if set(found) != set(expected):
            return None
        if any(found[k] != muted for k, (_, muted) in expected.items()):
            return None  # inhibition is applied as groups are flushed: wait for it
        return found

    wait_until(verdict, timeout_s=30, what="Alertmanager's inhibition to match the expected",
               diagnostics=lambda: describe_json(f"{alertmanager.url}/api/v2/alerts")
               + "\n" + alertmanager.process.describe())  # fmt: skip
