"""The alert rules, their promtool unit tests, runbooks and the example Alertmanager config.

promtool and amtool are required: CI installs them, and a missing tool fails the test with a
message instead of skipping it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
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
    RUNBOOK_BASE_URL,
    Thresholds,
    ThresholdsError,
    alerts,
    thresholds_from_mapping,
)
from dashboards.common import runbook
from dashboards.metrics_doc import (
    PROMETHEUS_SERIES,
    documented_metrics,
    grouping_labels,
    referenced_metrics,
    selector_labels,
)

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "alerts" / generate.RULES_FILE
HELM_RULES = REPO / "deploy" / "helm" / "kafka-txn-exporter" / "files" / "alerts" / generate.RULES_FILE
PROMTOOL_TESTS = sorted((REPO / "alerts" / "tests").glob("*.yml"))
RUNBOOKS = REPO / "docs" / "runbooks"
THRESHOLDS_EXAMPLE = REPO / "alerts" / "thresholds.example.yml"
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")
REQUIRED_ALERTS = {
    "KafkaTransactionHanging",
    "KafkaTransactionsLate",
    "KafkaLastStableOffsetLagGrowing",
    "KafkaTransactionCoordinatorOpenTimeHigh",
    "KafkaTwoPhaseCommitTransactionOpenTooLong",
    "KafkaTransactionVerificationDisabled",
    "KafkaTxnExporterDown",
    "KafkaTxnExporterDataStale",
    "KafkaTransactionCoordinatorTimeoutAbortsRising",
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


def test_generated_rules_equal_generator_output_and_helm_copy() -> None:
    expected = generate.render()
    assert RULES.read_text(encoding="utf-8") == expected, "run: python -m alerts.generate"
    assert HELM_RULES.read_bytes() == RULES.read_bytes()
    assert generate.main(["--check"]) == 0


def test_check_names_the_file_that_differs(tmp_path: Path) -> None:
    stale = tmp_path / generate.RULES_FILE
    stale.write_text("groups: []\n", encoding="utf-8")
    problems = generate.differences(generate.render(), [stale, tmp_path / "missing.yml"])
    assert problems == [
        f"{stale}: differs from the generator output",
        f"{tmp_path / 'missing.yml'}: missing",
    ]


def test_required_alerts_are_all_defined() -> None:
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names)), "duplicate alert names"
    assert set(names) >= REQUIRED_ALERTS


# ------------------------------------------------------------------ promtool


def test_promtool_check_rules() -> None:
    result = run([tool("promtool"), "check", "rules", str(RULES)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    assert PROMTOOL_TESTS, "no promtool unit tests under alerts/tests/"
    result = run([tool("promtool"), "test", "rules", *map(str, PROMTOOL_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in PROMTOOL_TESTS:
        document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert document["rule_files"] == [f"../{generate.RULES_FILE}"], path
        for case in document["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in rules()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested staying quiet"


# ------------------------------------------------------------------ rule content


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: str(rule["alert"]))
def test_alert_has_severity_annotations_and_runbook(rule: Mapping[str, Any]) -> None:
    name = rule["alert"]
    assert rule["labels"]["severity"] in ("critical", "warning")
    annotations = rule["annotations"]
    for key in ("summary", "description", "runbook_url"):
        assert str(annotations.get(key, "")).strip(), f"{name}: {key} missing"
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE_URL}{name}.md"
    assert "for" in rule, f"{name}: no `for` duration"


def test_runbook_base_url_is_one_constant() -> None:
    assert runbook("KafkaTransactionHanging") == f"{RUNBOOK_BASE_URL}KafkaTransactionHanging.md"
    assert RUNBOOK_BASE_URL.startswith("https://")
    assert RUNBOOK_BASE_URL.endswith("/docs/runbooks/")


def test_partition_alerts_name_topic_partition_and_transactional_id() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    for name in ("KafkaTransactionHanging", "KafkaTransactionsLate"):
        text = by_name[name]["annotations"]["description"]
        for label in ("topic", "partition", "broker", "transactional_id", "cluster"):
            assert f"$labels.{label}" in text, f"{name}: description lacks {label}"
    assert "kafka_txn_hanging_transaction_info" in by_name["KafkaTransactionHanging"]["expr"]
    assert by_name["KafkaTransactionHanging"]["labels"]["severity"] == "critical"


def test_rule_expressions_use_documented_metrics_and_labels() -> None:
    catalogue = {**documented_metrics(), **PROMETHEUS_SERIES}
    for rule in rules():
        expr = rule["expr"]
        metrics = referenced_metrics(expr)
        assert metrics, rule["alert"]
        unknown = metrics - set(catalogue)
        assert not unknown, f"{rule['alert']}: undocumented metrics {unknown}"
        for metric, labels in selector_labels(expr).items():
            assert labels <= catalogue[metric], f"{rule['alert']}: {metric} has no {labels}"
        available = set().union(*(catalogue[m] for m in metrics))
        missing = grouping_labels(expr) - available
        assert not missing, f"{rule['alert']}: grouping by unknown labels {missing}"


# ------------------------------------------------------------------ runbooks


@pytest.mark.parametrize("name", sorted(a.name for a in alerts()))
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
    for alert in alerts():
        assert f"({alert.name}.md)" in index


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
        thresholds_from_mapping({"hanging_for": "5 minutes", "data_stale_seconds": -1})
    assert "hanging_for" in str(raised.value)
    assert "data_stale_seconds" in str(raised.value)
    with pytest.raises(ThresholdsError, match=r"valid: .*late_for"):
        thresholds_from_mapping({"hanging_fro": "5m"})


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
    assert {"cluster", "alertname", "topic", "partition"} <= set(route["group_by"])
    by_matcher = {tuple(r["matchers"]): r["receiver"] for r in route["routes"]}
    assert by_matcher[('severity="critical"',)] == PAGERDUTY_RECEIVER
    assert by_matcher[('severity="warning"',)] == TICKET_RECEIVER
    pager = next(r for r in config["receivers"] if r["name"] == PAGERDUTY_RECEIVER)
    pd = pager["pagerduty_configs"][0]
    assert "routing_key_file" in pd and "routing_key" not in pd
    assert pd["url"] == "https://events.pagerduty.com/v2/enqueue"
    inhibit = config["inhibit_rules"][0]
    assert inhibit["source_matchers"] == ['severity="critical"']
    assert inhibit["target_matchers"] == ['severity="warning"']
    assert set(inhibit["equal"]) == {"cluster", "topic", "partition"}
