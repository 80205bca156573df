"""Findings as data: ``GET /api/v1/findings`` renders the published results as the document
docs/findings.schema.json describes, behind the endpoints' basic auth, and the CLI's client
(exporter/operator/exporter_api.py) finds the cluster in it or says why not.

No Kafka and no Spark: the endpoint reads what the cycles published, as the daemon wires it.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import bcrypt
import jsonschema
import pytest
from prometheus_client import CollectorRegistry

from exporter.cli import main
from exporter.config import ClusterConfig, parse_config
from exporter.daemon.findings import FINDINGS_PATH, FindingsApi, FindingsIndex
from exporter.daemon.http import MetricsServer
from exporter.daemon.web import WebSettings
from exporter.metrics.state import ClusterState, StateStore
from exporter.model import (
    BlockedGroupPartition,
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    Finding,
    GroupsResult,
    HangingReason,
    ListedTransaction,
    PartitionMetrics,
    StartTimeSource,
    TxnClass,
    UnknownReason,
)
from exporter.operator import exporter_api
from exporter.operator.exporter_api import ExporterError, find_answer

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "findings.schema.json").read_text())
NOW = 1_800_000_000_000
MIN = 60_000
USER, PASSWORD = "ops", "findings-secret-1"

HANGING = Finding(
    topic="orders",
    partition=1,
    broker_id=1,
    producer_id=4001,
    producer_epoch=0,
    coordinator_epoch=-1,
    start_offset=120,
    last_timestamp_ms=NOW - 31 * MIN,
    start_time_ms=NOW - 31 * MIN,
    start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    duration_ms=31 * MIN,
    txn_class=TxnClass.HANGING,
    late=True,
    hanging_reason=HangingReason.COORDINATOR_NOT_OPEN,
    transactional_id="order-enricher-1",
    coordinator_id=1,
    coordinator_state="Empty",
    transaction_timeout_ms=60_000,
    application="order-enricher",
)
UNKNOWN = replace(
    HANGING,
    partition=2,
    producer_id=4002,
    start_offset=7,
    txn_class=TxnClass.UNKNOWN,
    late=False,
    hanging_reason=None,
    unknown_reason=UnknownReason.LISTING_INCOMPLETE,
    transactional_id=None,
    coordinator_id=-1,
    coordinator_state=None,
    transaction_timeout_ms=-1,
    application=None,
)
BLOCKED = BlockedGroupPartition(
    group="billing",
    topic="orders",
    partition=1,
    committed_offset=120,
    last_stable_offset=120,
    high_watermark=200,
    blocked_since_ms=NOW - 8 * MIN,
    blocked_ms=8 * MIN,
    transactional_id="order-enricher-1",
    producer_id=4001,
    start_offset=120,
    txn_class=TxnClass.HANGING,
    txn_duration_ms=31 * MIN,
    application="order-enricher",
)
RESULT = CycleResult(
    cluster="prod",
    computed_at_ms=NOW,
    partitions=(PartitionMetrics("orders", 1, 1, 80, 31 * MIN), PartitionMetrics("orders", 2, 1, 3, None)),
    findings=(HANGING, UNKNOWN),
    open_transactions_by_class=((TxnClass.HANGING, 1), (TxnClass.UNKNOWN, 1), (TxnClass.ONGOING, 4)),
    transactional_ids_visible=True,
    groups=GroupsResult(blocked=(BLOCKED,)),
)
SNAPSHOT = ClusterSnapshot(
    cluster="prod",
    taken_at_ms=NOW - 500,
    listed_transactions=(ListedTransaction(1, "order-enricher-1", 4001, "Empty"),),
    errors=(CollectionError("ListTransactions", "COORDINATOR_LOAD_IN_PROGRESS", broker_id=2),),
)


def _clusters() -> list[ClusterConfig]:
    config = parse_config(
        {
            "clusters": [
                {"name": "prod", "bootstrap_servers": "kafka-0:9092,kafka-1:9092", "interval": "30s"},
                {"name": "staging", "bootstrap_servers": "staging:9092"},
            ]
        },
        env={},
    )
    return list(config.clusters)


def _published(*, up: bool = True, computed_at_ms: int = NOW) -> tuple[StateStore, FindingsIndex]:
    store = StateStore(["prod", "staging"])
    index = FindingsIndex()
    result = replace(RESULT, computed_at_ms=computed_at_ms)
    index(SNAPSHOT, result)  # listeners run before the cycle publishes its state
    store.put(
        ClusterState(
            "prod", result, SNAPSHOT.taken_at_ms, up=up, last_success_at_ms=computed_at_ms, cycles_complete=3
        )
    )
    return store, index


def _document(api: FindingsApi, query: str = "") -> dict[str, Any]:
    status, headers, body = api(query)
    assert status == 200 and ("Content-Type", "application/json") in headers
    document: dict[str, Any] = json.loads(body)
    return document


def _api(store: StateStore, index: FindingsIndex, now_ms: int = NOW + 4000) -> FindingsApi:
    return FindingsApi(lambda: store, _clusters, index, clock=lambda: now_ms / 1000)


def test_the_document_is_what_the_schema_in_docs_describes() -> None:
    store, index = _published()
    document = _document(_api(store, index))
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(document, SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    _, staging = document["clusters"]
    assert staging["cycle"] is None and staging["findings"] == []  # no cycle yet: still valid


def test_each_finding_carries_its_class_reason_ids_offsets_age_application_and_blocked_groups() -> None:
    store, index = _published()
    prod = _document(_api(store, index), "cluster=prod")["clusters"][0]
    hanging, unknown = prod["findings"]
    assert {
        k: hanging[k] for k in ("class", "reason", "transactional_id", "producer_id", "start_offset")
    } == {
        "class": "hanging",
        "reason": "coordinator_not_open",
        "transactional_id": "order-enricher-1",
        "producer_id": 4001,
        "start_offset": 120,
    }
    assert hanging["age_ms"] == 31 * MIN and hanging["application"] == "order-enricher"
    assert hanging["lso_lag"] == 80 and hanging["blocked_groups"] == ["billing"]
    assert unknown["class"] == "unknown" and unknown["unknown_reason"] == "listing_incomplete"
    assert unknown["blocked_groups"] == []
    assert prod["blocked_groups"][0]["group"] == "billing"
    assert prod["open_transactions"] == {"hanging": 1, "unknown": 1, "ongoing": 4}


def test_the_cycle_says_when_it_was_computed_how_old_it_is_and_what_it_could_not_read() -> None:
    store, index = _published()
    prod = _document(_api(store, index, now_ms=NOW + 4000), "cluster=prod")["clusters"][0]
    assert prod["cycle"]["computed_at_ms"] == NOW and prod["cycle"]["age_s"] == 4.0
    assert prod["cycle"]["complete"] is False  # an error was recorded in its snapshot
    assert prod["cycle"]["errors"][0]["error"] == "COORDINATOR_LOAD_IN_PROGRESS"
    assert prod["transactions"] == [
        {"transactional_id": "order-enricher-1", "coordinator_id": 1, "producer_id": 4001, "state": "Empty"}
    ]
    assert prod["up"] is True and prod["interval_s"] == 30.0


def test_a_result_whose_snapshot_facts_are_gone_has_none_rather_than_another_cycles() -> None:
    store, _ = _published()
    prod = _document(_api(store, FindingsIndex()), "cluster=prod")["clusters"][0]
    assert prod["cycle"]["complete"] is None and prod["transactions"] is None
    jsonschema.validate(
        {"schema_version": 1, "generated_at_ms": 0, "generated_at": "x", "clusters": [prod]}, SCHEMA
    )


def test_an_unknown_cluster_is_a_404_naming_it() -> None:
    store, index = _published()
    status, _, body = _api(store, index)("cluster=nope")
    assert status == 404 and b"nope" in body


@pytest.fixture
def server() -> Iterator[tuple[MetricsServer, FindingsIndex, StateStore]]:
    store, index = _published(computed_at_ms=0)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4))
    server = MetricsServer(
        CollectorRegistry(),
        host="127.0.0.1",
        port=0,
        health=lambda: (True, "ok"),
        ready=lambda: (True, "ready"),
        settings=WebSettings(users={USER: hashed}),
        api={FINDINGS_PATH: FindingsApi(lambda: store, _clusters, index)},
    )
    server.start()
    try:
        yield server, index, store
    finally:
        server.stop()


def _fresh(store: StateStore, index: FindingsIndex, *, up: bool = True, age_ms: int = 0) -> None:
    import time

    result = replace(RESULT, computed_at_ms=int(time.time() * 1000) - age_ms)
    index(SNAPSHOT, result)
    store.put(ClusterState("prod", result, result.computed_at_ms, up=up, cycles_complete=1))


def test_the_endpoint_asks_for_the_same_basic_auth_as_metrics(
    server: tuple[MetricsServer, FindingsIndex, StateStore],
) -> None:
    srv, _, _ = server
    url = f"http://127.0.0.1:{srv.port}{FINDINGS_PATH}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["schema_version"] == 1


def test_the_cli_finds_its_cluster_by_a_bootstrap_server_in_common_or_by_name(
    server: tuple[MetricsServer, FindingsIndex, StateStore],
) -> None:
    srv, index, store = server
    _fresh(store, index)
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{srv.port}"
    by_server = find_answer(given=url, cluster_name=None, bootstrap="kafka-1:9092")
    by_name = find_answer(given=url, cluster_name="prod", bootstrap="elsewhere:9092")
    assert by_server is not None and by_name is not None
    assert by_server.cluster["cluster"] == by_name.cluster["cluster"] == "prod"
    assert by_server.url == f"http://127.0.0.1:{srv.port}"  # never the password
    assert PASSWORD not in by_server.describe() and "ago" in by_server.describe()


def test_a_given_exporter_that_cannot_answer_says_why_without_the_password(
    server: tuple[MetricsServer, FindingsIndex, StateStore],
) -> None:
    srv, index, store = server
    _fresh(store, index)
    url = f"http://{USER}:{PASSWORD}@127.0.0.1:{srv.port}"
    with pytest.raises(ExporterError) as other:
        find_answer(given=url, cluster_name=None, bootstrap="other:9092")
    assert "does not collect a cluster at other:9092; it collects prod (kafka-0:9092,kafka-1:9092)" in str(
        other.value
    )
    with pytest.raises(ExporterError) as staging:
        find_answer(given=url, cluster_name="staging", bootstrap="staging:9092")
    assert "no complete cycle of cluster 'staging' yet" in str(staging.value)
    with pytest.raises(ExporterError) as unauthorized:
        find_answer(given=f"http://{USER}:wrong@127.0.0.1:{srv.port}", cluster_name=None, bootstrap="x:1")
    assert "HTTP 401" in str(unauthorized.value)
    for e in (other, staging, unauthorized):
        assert PASSWORD not in str(e.value) and "wrong" not in str(e.value)


def test_a_looked_for_exporter_answers_only_when_its_last_cycle_is_complete_and_recent(
    server: tuple[MetricsServer, FindingsIndex, StateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, index, store = server
    monkeypatch.setenv(exporter_api.EXPORTER_URL_ENV, f"http://{USER}:{PASSWORD}@127.0.0.1:{srv.port}")
    monkeypatch.setattr(exporter_api, "DEFAULT_EXPORTER_URL", "http://127.0.0.1:9")  # nothing there

    def looked_for() -> exporter_api.Answer | None:
        return find_answer(given=None, cluster_name=None, bootstrap="kafka-0:9092")

    _fresh(store, index, age_ms=5_000)
    assert looked_for() is not None
    _fresh(store, index, up=False, age_ms=5_000)  # the last cycle failed: compute fresh
    assert looked_for() is None
    _fresh(store, index, age_ms=2 * 30_000 + 31_000)  # older than two intervals and 30 s
    assert looked_for() is None


def test_exporters_are_looked_for_in_the_environment_then_the_configs_port_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(exporter_api.EXPORTER_URL_ENV, "https://u:p@exporter.local:9851/")
    assert exporter_api.candidates(None, 9900) == [
        "https://u:p@exporter.local:9851/",
        "http://127.0.0.1:9900",
        "http://127.0.0.1:9851",
    ]
    assert exporter_api.candidates(None, 9851)[1:] == ["http://127.0.0.1:9851"]
    assert exporter_api.candidates("http://given:1", 9900) == ["http://given:1"]
    assert exporter_api.redacted("https://u:p@exporter.local:9851/") == "https://exporter.local:9851"


def test_find_hanging_and_list_answer_from_the_exporter_without_asking_kafka(
    server: tuple[MetricsServer, FindingsIndex, StateStore], capsys: pytest.CaptureFixture[str]
) -> None:
    """The bootstrap server is unreachable: the answer can only come from the exporter."""
    srv, index, store = server
    _fresh(store, index, age_ms=3_000)
    given = [
        "--bootstrap-server",
        "kafka-0:9092",
        "--exporter",
        f"http://{USER}:{PASSWORD}@127.0.0.1:{srv.port}",
    ]
    code = main(["find-hanging", *given, "--max-transaction-timeout", "0", "--output", "json"])
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert code == 1
    assert [(r["topic"], r["partition"], r["start_offset"]) for r in document["hanging"]] == [
        ("orders", 1, 120)
    ]
    assert [r["unknown_reason"] for r in document["unclassified"]] == ["listing_incomplete"]
    assert document["source"]["exporter"] == f"http://127.0.0.1:{srv.port}"
    assert document["source"]["age_s"] >= 3
    assert f"the answer of the exporter at http://127.0.0.1:{srv.port} (cluster prod)" in err

    assert main(["find-hanging", *given, "--topic", "payments"]) == 3  # the cycle's error stands
    out, err = capsys.readouterr()
    assert "orders" not in out and "COORDINATOR_LOAD_IN_PROGRESS" in err

    code = main(["list", *given, "--state", "Empty", "--output", "json"])
    listed = json.loads(capsys.readouterr().out)
    assert code == 3  # ListTransactions failed on broker 2 in that cycle, as a fresh list says
    assert [t["transactional_id"] for t in listed["transactions"]] == ["order-enricher-1"]


def test_what_only_kafka_can_answer_is_a_usage_error_with_a_given_exporter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    given = ["--bootstrap-server", "kafka-0:9092", "--exporter", "http://127.0.0.1:9"]
    with pytest.raises(SystemExit) as replicas:
        main(["find-hanging", *given, "--broker-id", "1"])
    assert replicas.value.code == 2 and "--exporter cannot answer --broker-id" in capsys.readouterr().err
    with pytest.raises(SystemExit) as pattern:
        main(["list", *given, "--transactional-id-pattern", "order-.*"])
    assert pattern.value.code == 2 and "--transactional-id-pattern" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        main(["list", *given, "--fresh"])
    assert both.value.code == 2
