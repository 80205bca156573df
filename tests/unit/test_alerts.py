"""The alert rules, their promtool unit tests, runbooks and the example Alertmanager config.

promtool and amtool are required: CI installs them, and a missing tool fails the test with a
message instead of skipping it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import generate
from alerts.alertmanager import (
    EXAMPLE,
    PAGERDUTY_RECEIVER,
    TICKET_RECEIVER,
    load_example,
    render_example,
)
from alerts.rules import (
    ALERT_NAMES,
    DISABLED_BY_DEFAULT,
    PLACEHOLDER,
    RUNBOOK_BASE_URL,
    TUNABLE_FIELDS,
    Thresholds,
    ThresholdsError,
    alerts,
    helm_rules_template,
    rules_document,
    thresholds_from_mapping,
)
from dashboards.common import runbook
from dashboards.metrics_doc import grouping_labels, referenced_metrics, selector_labels
from exporter.metrics.catalogue import all_series

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alerts" / generate.RULES_FILE
HELM_RULES = generate.HELM_TEMPLATE_PATH
PROMTOOL_TESTS = sorted((REPO / "alerts" / "tests").glob("*.yml"))
TUNED_TESTS = REPO / "alerts" / "tests" / "tuned"
TUNED_RULES_FILE = "kafka-txn-exporter.tuned.rules.yml"
RUNBOOKS = REPO / "docs" / "runbooks"
THRESHOLDS_EXAMPLE = REPO / "alerts" / "thresholds.example.yml"
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")
REQUIRED_ALERTS = {
    "KafkaTransactionHanging",
    "KafkaTransactionsLate",
    "KafkaLastStableOffsetLagGrowing",
    "KafkaTransactionCoordinatorOpenTimeHigh",
    "KafkaTransactionTwoPhaseCommitOpenTimeHigh",
    "KafkaTransactionMarkersPending",
    "KafkaTransactionVerificationDisabled",
    "KafkaTransactionalIdsGrowing",
    "KafkaConsumerGroupBlockedByTransaction",
    "KafkaConsumerGroupUnstableOffsetCommit",
    "KafkaTxnExporterDown",
    "KafkaTxnExporterDataStale",
    "KafkaTxnExporterBlindSpot",
    "KafkaTxnExporterCyclesSkipped",
    "KafkaTransactionCoordinatorTimeoutAbortsRising",
    "KafkaTransactionRemediated",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not on PATH. Install it (Debian: apt-get install prometheus "
            "prometheus-alertmanager) or put it in $KTE_CACHE/bin; CI does.",
            pytrace=False,
        )
    return path


def run(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)


def rule_file() -> dict[str, Any]:
    loaded: Any = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_file()["groups"] for rule in group["rules"]]


# ------------------------------------------------------------------ generated files


def test_generated_rules_and_helm_template_are_current() -> None:
    assert RULES.read_text(encoding="utf-8") == generate.render(), "run: python -m alerts.generate"
    assert HELM_RULES.read_text(encoding="utf-8") == generate.render_helm_template()
    assert generate.main(["--check"]) == 0


def test_check_names_the_file_that_differs(tmp_path: Path) -> None:
    stale = tmp_path / generate.RULES_FILE
    stale.write_text("groups: []\n", encoding="utf-8")
    missing = tmp_path / "missing.yml"
    problems = generate.differences({stale: generate.render(), missing: "x"})
    assert problems == [f"{stale}: differs from the generator output", f"{missing}: missing"]


def test_required_alerts_are_all_defined() -> None:
    assert len(ALERT_NAMES) == len(set(ALERT_NAMES)), "duplicate alert names"
    assert set(ALERT_NAMES) == REQUIRED_ALERTS
    written = {rule["alert"] for rule in rules()}
    assert written == REQUIRED_ALERTS - set(DISABLED_BY_DEFAULT)


def test_two_phase_commit_alert_is_opt_in() -> None:
    assert "KafkaTransactionTwoPhaseCommitOpenTimeHigh" in DISABLED_BY_DEFAULT
    enabled = thresholds_from_mapping({"disabled": {"KafkaTransactionTwoPhaseCommitOpenTimeHigh": False}})
    assert "KafkaTransactionTwoPhaseCommitOpenTimeHigh" in {a.name for a in alerts(enabled)}
    # Disabling another alert keeps the opt-in one off.
    other = thresholds_from_mapping({"disabled": {"KafkaTransactionsLate": True}})
    names = {a.name for a in alerts(other)}
    assert "KafkaTransactionsLate" not in names
    assert "KafkaTransactionTwoPhaseCommitOpenTimeHigh" not in names


def test_helm_template_has_every_alert_and_only_placeholders_for_tunables() -> None:
    template = helm_rules_template()
    names = [rule["alert"] for group in template["groups"] for rule in group["rules"]]
    assert names == list(ALERT_NAMES)
    text = HELM_RULES.read_text(encoding="utf-8")
    assert "kafka_cluster" not in text, "the cluster label must be a placeholder"
    for name in TUNABLE_FIELDS:
        if name not in ("exporter_namespace",):
            assert PLACEHOLDER.format(name) in text, f"{name} is not tunable in the chart"


def test_helm_template_filled_with_the_defaults_is_the_rule_file() -> None:
    """What the chart's template does with its default values, done in Python: replace every
    placeholder, drop disabled alerts. tests/unit/test_helm.py checks the chart itself.
    The chart always sets exporter_namespace (to its release namespace)."""
    defaults = replace(Thresholds(), exporter_namespace="kafka-monitoring")
    text = HELM_RULES.read_text(encoding="utf-8")
    for name in TUNABLE_FIELDS:
        text = text.replace(PLACEHOLDER.format(name), str(getattr(defaults, name)))
    filled: Any = yaml.safe_load(text)
    for group in filled["groups"]:
        group["rules"] = [r for r in group["rules"] if not defaults.is_disabled(r["alert"])]
    expected = rules_document(defaults)
    assert filled == expected


# ------------------------------------------------------------------ promtool


def test_promtool_check_rules() -> None:
    result = run([tool("promtool"), "check", "rules", str(RULES)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    assert PROMTOOL_TESTS, "no promtool unit tests under alerts/tests/"
    result = run([tool("promtool"), "test", "rules", *map(str, PROMTOOL_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def tuned_copy(tmp_path: Path) -> Path:
    """alerts/tests/tuned/ with its rule file generated from its thresholds.yml."""
    directory = tmp_path / "tuned"
    shutil.copytree(TUNED_TESTS, directory)
    assert (
        generate.main(
            ["--thresholds", str(directory / "thresholds.yml"), "--output", str(directory / TUNED_RULES_FILE)]
        )
        == 0
    )
    return directory


def test_promtool_unit_tests_of_a_tuned_variant_pass(tmp_path: Path) -> None:
    directory = tuned_copy(tmp_path)
    result = run([tool("promtool"), "test", "rules", "tuned.test.yml"], cwd=directory)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in [*PROMTOOL_TESTS, TUNED_TESTS / "tuned.test.yml"]:
        document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert document["rule_files"] in ([f"../{generate.RULES_FILE}"], [TUNED_RULES_FILE])
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(ALERT_NAMES)
    assert names - firing == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"


# ------------------------------------------------------------------ rule content


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_has_severity_annotations_and_runbook(rule: Mapping[str, Any]) -> None:
    name = rule["alert"]
    assert rule["labels"]["severity"] in ("critical", "warning", "info")
    annotations = rule["annotations"]
    for key in ("summary", "description", "runbook_url"):
        assert str(annotations.get(key, "")).strip(), f"{name}: {key} missing"
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE_URL}{name}.md"
    assert "for" in rule, f"{name}: no `for` duration"


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: str(rule["alert"]))
def test_every_aggregation_keeps_namespace_and_the_kafka_cluster(rule: Mapping[str, Any]) -> None:
    """The Operator's AlertmanagerConfig routes on namespace: no aggregation may drop it."""
    expr = rule["expr"]
    clauses = [c.strip() for c in re.findall(r"\b(?:by|on) \(([^)]*)\)", expr)]
    if rule["alert"] == "KafkaTxnExporterDown":
        # Its third branch, absent(), has no labels unless exporter_namespace is set.
        assert "absent(kafka_txn_exporter_up)" in expr
    assert clauses, f"{rule['alert']}: no aggregation"
    for clause in clauses:
        labels = [label.strip() for label in clause.split(",")]
        assert labels[0] == "namespace", f"{rule['alert']}: `{clause}` drops namespace"
        if "instance" not in labels:
            assert "kafka_cluster" in labels, f"{rule['alert']}: `{clause}` drops the cluster"


def test_cluster_label_is_a_parameter() -> None:
    renamed = rules_document(thresholds_from_mapping({"cluster_label": "kafka_name"}))
    text = yaml.safe_dump(renamed)
    assert "kafka_cluster" not in text
    assert "$labels.kafka_name" in text
    assert "max by (namespace, job, kafka_name, broker)" in text


def test_additional_labels_and_annotations_never_override_the_alerts_own() -> None:
    tuned = thresholds_from_mapping(
        {
            "additional_rule_labels": {"team": "kafka", "severity": "info"},
            "additional_rule_annotations": {"summary": "x", "dashboard": "https://g/d"},
            "runbook_url": "https://wiki.example/rb/",
        }
    )
    for group in rules_document(tuned)["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["team"] == "kafka"
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert rule["annotations"]["summary"] != "x"
            assert rule["annotations"]["dashboard"] == "https://g/d"
            assert rule["annotations"]["runbook_url"] == f"https://wiki.example/rb/{rule['alert']}.md"


def test_runbook_base_url_is_one_constant() -> None:
    assert runbook("KafkaTransactionHanging") == f"{RUNBOOK_BASE_URL}KafkaTransactionHanging.md"
    assert Thresholds().runbook_url == RUNBOOK_BASE_URL
    assert RUNBOOK_BASE_URL.startswith("https://")
    assert RUNBOOK_BASE_URL.endswith("/docs/runbooks/")


def test_partition_alerts_name_topic_partition_and_transactional_id() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    for name in ("KafkaTransactionHanging", "KafkaTransactionsLate"):
        text = by_name[name]["annotations"]["description"]
        for label in ("topic", "partition", "kafka_cluster"):
            assert f"$labels.{label}" in text, f"{name}: description lacks {label}"
        # Details that can change while the transaction hangs are read at notification time.
        for label in ("broker", "transactional_id"):
            assert f".Labels.{label}" in text, f"{name}: description lacks {label}"


def test_a_finding_alert_is_the_transaction_not_its_leader_or_reason() -> None:
    """A label that changes while the transaction hangs (the leader fails over, a coordinator
    restart changes the reason) would make a new alert: the page would resolve and fire."""
    by_name = {rule["alert"]: rule for rule in rules()}
    for name in ("KafkaTransactionHanging", "KafkaTransactionsLate"):
        finding_branch = by_name[name]["expr"].split("\nor\n")[0]
        grouping = finding_branch.split("max by (", 1)[1].split(")", 1)[0]
        assert [g.strip() for g in grouping.split(",")] == [
            "namespace",
            "job",
            "kafka_cluster",
            "topic",
            "partition",
            "producer_id",
            "start_offset",
        ], name
    assert "kafka_txn_hanging_transaction_info" in by_name["KafkaTransactionHanging"]["expr"]
    assert by_name["KafkaTransactionHanging"]["labels"]["severity"] == "critical"


def test_a_blocked_alert_is_the_group_partition_not_its_transaction() -> None:
    """The blocking transaction's details change between cycles (a partial cycle publishes no
    transactional id) and differ between two targets of one cluster: as labels they made a new
    alert (the page resolved and fired again) or a many-to-many join error. They are read
    into the description instead."""
    blocked = next(r for r in rules() if r["alert"] == "KafkaConsumerGroupBlockedByTransaction")
    grouping = blocked["expr"].split("max by (", 1)[1].split(")", 1)[0]
    assert [g.strip() for g in grouping.split(",")] == [
        "namespace",
        "job",
        "kafka_cluster",
        "group",
        "topic",
        "partition",
    ]
    assert "group_left" not in blocked["expr"]
    assert "kafka_txn_consumer_group_blocked_info" not in blocked["expr"]
    description = blocked["annotations"]["description"]
    assert "query (printf `topk(1, kafka_txn_consumer_group_blocked_info{" in description
    for label in ("transactional_id", "producer_id", "start_offset", "application"):
        assert f".Labels.{label}" in description, label
        assert f"$labels.{label}" not in description, label
    assert "producer id unknown (transactional id unknown) starting at offset unknown" in description


def test_only_the_two_pages_keep_firing_for() -> None:
    kept = {rule["alert"]: rule.get("keep_firing_for") for rule in rules() if "keep_firing_for" in rule}
    assert kept == {
        "KafkaTransactionHanging": Thresholds().keep_firing_for,
        "KafkaConsumerGroupBlockedByTransaction": Thresholds().keep_firing_for,
    }
    assert Thresholds().keep_firing_for == "5m"
    for rule in rules():
        # Prometheus' own order: alert, expr, for, keep_firing_for, labels, annotations.
        assert list(rule)[:3] == ["alert", "expr", "for"], rule["alert"]


@pytest.mark.parametrize("zero", ["0s", "0m", "0h0m"])
def test_a_zero_keep_firing_for_leaves_the_field_out_for_older_prometheus(zero: str, tmp_path: Path) -> None:
    document = rules_document(thresholds_from_mapping({"keep_firing_for": zero}))
    assert all("keep_firing_for" not in r for g in document["groups"] for r in g["rules"])
    output = tmp_path / "rules.yml"
    output.write_text(yaml.safe_dump(document), encoding="utf-8")
    result = run([tool("promtool"), "check", "rules", str(output)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_for_set_short_as_the_e2e_tests_do_shortens_keep_firing_for_too() -> None:
    """tests/e2e/stack.py's short_thresholds sets every field ending in _for."""
    short = thresholds_from_mapping({f.name: "2s" for f in fields(Thresholds) if f.name.endswith("_for")})
    kept = [
        r["keep_firing_for"]
        for g in rules_document(short)["groups"]
        for r in g["rules"]
        if "keep_firing_for" in r
    ]
    assert kept == ["2s", "2s"]


def test_rule_expressions_use_catalogued_metrics_and_labels() -> None:
    catalogue = all_series()
    routing = {"namespace", "job", "instance"}
    every_rule = [
        r
        for group in rules_document(
            thresholds_from_mapping({"disabled": dict.fromkeys(DISABLED_BY_DEFAULT, False)})
        )["groups"]
        for r in group["rules"]
    ]
    for rule in every_rule:
        expr = rule["expr"]
        metrics = referenced_metrics(expr)
        assert metrics, rule["alert"]
        unknown = metrics - set(catalogue)
        assert not unknown, f"{rule['alert']}: undocumented metrics {unknown}"
        for metric, labels in selector_labels(expr).items():
            assert labels <= catalogue[metric], f"{rule['alert']}: {metric} has no {labels}"
        available = set().union(*(catalogue[m] for m in metrics)) | routing
        missing = grouping_labels(expr) - available
        assert not missing, f"{rule['alert']}: grouping by unknown labels {missing}"


# ------------------------------------------------------------------ runbooks


@pytest.mark.parametrize("name", sorted(ALERT_NAMES))
def test_runbook_exists_with_the_four_sections(name: str) -> None:
    path = RUNBOOKS / f"{name}.md"
    assert path.is_file(), f"missing runbook {path}"
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"# {name}\n")
    positions = [text.find(section + "\n") for section in RUNBOOK_SECTIONS]
    assert all(p >= 0 for p in positions), f"{name}: needs sections {RUNBOOK_SECTIONS}"
    assert positions == sorted(positions), f"{name}: sections out of order"
    assert "kafka-txn-exporter " in text, f"{name}: no CLI command"


def test_runbook_index_lists_every_alert() -> None:
    index = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    for name in ALERT_NAMES:
        assert f"({name}.md)" in index


# ------------------------------------------------------------------ thresholds


def test_thresholds_example_equals_the_defaults() -> None:
    loaded: Any = yaml.safe_load(THRESHOLDS_EXAMPLE.read_text(encoding="utf-8"))
    assert thresholds_from_mapping(loaded) == Thresholds()
    assert set(loaded) == set(Thresholds.__dataclass_fields__)


def test_tuned_thresholds_generate_valid_rules(tmp_path: Path) -> None:
    tuning = tmp_path / "thresholds.yml"
    tuning.write_text("coordinator_open_time_seconds: 3660\nhanging_for: 2m\n", encoding="utf-8")
    output = tmp_path / "tuned.rules.yml"
    assert generate.main(["--thresholds", str(tuning), "--output", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    assert "(kafka_txn_active_transaction_open_time_max_seconds) > 3660" in text
    tuned: Any = yaml.safe_load(text)
    hanging = tuned["groups"][0]["rules"][0]
    assert (hanging["alert"], hanging["for"]) == ("KafkaTransactionHanging", "2m")
    result = run([tool("promtool"), "check", "rules", str(output)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_invalid_thresholds_are_all_reported() -> None:
    with pytest.raises(ThresholdsError) as raised:
        thresholds_from_mapping(
            {"hanging_for": "5 minutes", "data_stale_seconds": -1, "keep_firing_for": "-5m"}
        )
    for problem in ("hanging_for", "data_stale_seconds", "keep_firing_for"):
        assert problem in str(raised.value)
    with pytest.raises(ThresholdsError, match=r"valid: .*late_for"):
        thresholds_from_mapping({"hanging_fro": "5m"})
    with pytest.raises(ThresholdsError) as raised:
        thresholds_from_mapping(
            {
                "cluster_label": "kafka-cluster",
                "disabled": {"KafkaNoSuchAlert": True},
                "additional_rule_labels": {"bad-name": "x"},
            }
        )
    for problem in ("cluster_label", "disabled.KafkaNoSuchAlert", "bad-name"):
        assert problem in str(raised.value)


# ------------------------------------------------------------------ Alertmanager


def test_amtool_accepts_the_example() -> None:
    result = run([tool("amtool"), "check-config", str(EXAMPLE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_amtool_accepts_the_example_with_test_endpoints(tmp_path: Path) -> None:
    key = tmp_path / "routing-key"
    key.write_text("0123456789abcdef0123456789abcdef\n", encoding="utf-8")
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        render_example(
            pagerduty_url="http://127.0.0.1:8080/v2/enqueue",
            routing_key_file=key,
            ticket_webhook_url="http://127.0.0.1:8081/",
        ),
        encoding="utf-8",
    )
    result = run([tool("amtool"), "check-config", str(config)])
    assert result.returncode == 0, result.stdout + result.stderr
    loaded: Any = yaml.safe_load(config.read_text(encoding="utf-8"))
    receivers = {r["name"]: r for r in loaded["receivers"]}
    pager = receivers[PAGERDUTY_RECEIVER]["pagerduty_configs"][0]
    assert pager["url"] == "http://127.0.0.1:8080/v2/enqueue"
    assert pager["routing_key_file"] == str(key)
    assert receivers[TICKET_RECEIVER]["webhook_configs"][0]["url"] == "http://127.0.0.1:8081/"


def test_example_routes_pages_groups_per_incident_and_inhibits() -> None:
    config = load_example()
    route = config["route"]
    assert {"namespace", "kafka_cluster", "alertname", "topic", "partition"} <= set(route["group_by"])
    by_matcher = {tuple(r["matchers"]): r["receiver"] for r in route["routes"]}
    assert by_matcher[('severity="critical"',)] == PAGERDUTY_RECEIVER
    assert by_matcher[('severity="warning"',)] == TICKET_RECEIVER
    pager = next(r for r in config["receivers"] if r["name"] == PAGERDUTY_RECEIVER)
    pd = pager["pagerduty_configs"][0]
    assert "routing_key_file" in pd and "routing_key" not in pd
    assert pd["url"] == "https://events.pagerduty.com/v2/enqueue"
    same_alert = config["inhibit_rules"][0]
    assert same_alert["source_matchers"] == ['severity="critical"']
    assert same_alert["target_matchers"] == ['severity="warning"']
    assert {"alertname", "namespace", "kafka_cluster", "broker", "topic", "partition"} <= set(
        same_alert["equal"]
    )
    for rule in config["inhibit_rules"]:
        assert "namespace" in rule["equal"] and "kafka_cluster" in rule["equal"], rule
        # Nothing may mute the alert that says the exporter itself is down.
        assert "KafkaTxnExporterDown" not in " ".join(rule["target_matchers"]), rule
