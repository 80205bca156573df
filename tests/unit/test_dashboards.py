"""The Grafana dashboards: deterministic output, complete panels, catalogued metrics only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate
from dashboards.common import SCHEMA_VERSION, substitute_variables
from dashboards.metrics_doc import grouping_labels, referenced_metrics, selector_labels
from exporter.metrics.catalogue import RUNBOOK_BASE_URL, all_series


def documented_metrics() -> dict[str, frozenset[str]]:
    """Every series the exporter (exporter/metrics/catalogue.py) or Prometheus provides."""
    return all_series()


REPO = Path(__file__).resolve().parents[2]
OVERVIEW = "kafka-txn-overview.json"
PARTITION = "kafka-txn-partition.json"
EXPORTER = "kafka-txn-exporter.json"
RUNBOOK_LINK = re.compile(re.escape(RUNBOOK_BASE_URL) + r"([A-Za-z0-9]+)\.md")


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that is not a row."""
    return [p for p in generate.iter_panels(model) if p["type"] != "row"]


MODELS = generate.dashboard_models()
ALL_PANELS = [(name, panel) for name, model in MODELS.items() for panel in panels(model)]


def panel_id(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}:{item[1]['title']}"


# ------------------------------------------------------------------ generation


def test_generation_is_deterministic() -> None:
    assert generate.rendered() == generate.rendered()


def test_generated_files_are_current_and_helm_copy_identical() -> None:
    expected = generate.rendered()
    assert set(expected) == {OVERVIEW, PARTITION, EXPORTER}
    assert generate.differences(expected, generate.OUTPUT_DIRS) == [], "run: python -m dashboards.generate"
    local, helm = generate.OUTPUT_DIRS
    for name in expected:
        assert (local / name).read_bytes() == (helm / name).read_bytes()
    assert generate.main(["--check"]) == 0


def test_check_names_the_file_that_differs(tmp_path: Path) -> None:
    expected = generate.rendered()
    generate.write(expected, [tmp_path])
    (tmp_path / PARTITION).write_text("{}\n", encoding="utf-8")
    (tmp_path / "old.json").write_text("{}\n", encoding="utf-8")
    assert generate.differences(expected, [tmp_path]) == [
        f"{tmp_path / PARTITION}: differs from the generator output",
        f"{tmp_path / 'old.json'}: not produced by the generator (remove it)",
    ]


def test_output_is_sorted_json_with_stable_uids_and_ids() -> None:
    for name, text in generate.rendered().items():
        model = json.loads(text)
        assert text == json.dumps(model, sort_keys=True, indent=2) + "\n", name
        ids = [p["id"] for p in generate.iter_panels(model)]
        assert ids == list(range(1, len(ids) + 1)), f"{name}: panel ids not 1..n in order"
    assert {m["uid"] for m in MODELS.values()} == {"kte-overview", "kte-partition", "kte-exporter"}


# ------------------------------------------------------------------ panels


@pytest.mark.parametrize("item", ALL_PANELS, ids=panel_id)
def test_panel_has_description_unit_and_queries(item: tuple[str, dict[str, Any]]) -> None:
    name, panel = item
    description = panel.get("description") or ""
    assert "When it turns red:" in description, f"{name}: {panel['title']}"
    shows, _, when_red = description.partition("When it turns red:")
    assert shows.strip() and when_red.strip()
    assert (
        RUNBOOK_BASE_URL in when_red or "kafka-txn-exporter" in when_red or ("kafka-configs.sh" in when_red)
    ), f"{panel['title']}: the red case must point at a runbook or a command"
    assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"
    assert panel["targets"] and all(t["expr"] for t in panel["targets"])
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    grid = panel["gridPos"]
    assert grid["x"] + grid["w"] <= 24


def test_runbook_links_in_descriptions_exist() -> None:
    for _, panel in ALL_PANELS:
        for alert in RUNBOOK_LINK.findall(panel["description"]):
            assert (REPO / "docs" / "runbooks" / f"{alert}.md").is_file(), alert


def test_required_panels_exist() -> None:
    def titles(name: str) -> set[str]:
        return {p["title"] for p in panels(MODELS[name])}

    assert {
        "Hanging transactions per broker",
        "Partitions with late transactions per broker",
        "MaxLastStableOffsetLag per broker",
        "ActiveTransactionOpenTimeMax per coordinator",
        "Open transactions by class",
        "Coordinator transactions by state",
        "Transaction verification per broker",
        "Verification disabled brokers",
        "Exporter up",
        "Snapshot age",
    } <= titles(OVERVIEW)
    assert {
        "LastStableOffsetLag",
        "Max active transaction duration",
        "Hanging transactions on these partitions",
        "Late transactions on these partitions",
    } <= titles(PARTITION)
    assert {
        "Up",
        "Cycle duration",
        "Stage durations",
        "Request errors by API and error",
        "Snapshot age",
        "Last successful cycle",
        "Transactional ids visible",
        "Cycles skipped",
    } <= titles(EXPORTER)
    assert {
        "Blocked consumers",
        "Consumer lag: consumable vs blocked",
        "Two-phase commit per broker",
        "transaction.version",
        "Markers pending per coordinator",
        "Open transactions by application",
        "Unknown open transactions by reason",
    } <= titles(OVERVIEW)


def test_no_panel_fixes_max_data_points_and_schema_is_current() -> None:
    for name, model in MODELS.items():
        assert model["schemaVersion"] == SCHEMA_VERSION >= 39, name
        assert "maxDataPoints" not in json.dumps(model), name


def test_firing_alerts_are_annotations_filtered_by_cluster() -> None:
    for name, model in MODELS.items():
        (annotation,) = model["annotations"]["list"]
        assert annotation["expr"].startswith('ALERTS{alertstate="firing"'), name
        assert 'kafka_cluster=~"$kafka_cluster"' in annotation["expr"]
        assert annotation["enable"] is True
    # The annotation's alert name regex matches every alert of alerts/rules.py.
    from alerts.rules import ALERT_NAMES
    from dashboards.common import ALERT_NAME_REGEX

    for alert in ALERT_NAMES:
        assert re.fullmatch(ALERT_NAME_REGEX, alert), alert


def test_blocked_consumers_table_shows_group_partition_duration_and_transaction() -> None:
    (table,) = [p for p in panels(MODELS[OVERVIEW]) if p["title"] == "Blocked consumers"]
    organize = table["transformations"][0]["options"]
    assert organize["renameByName"] == {"Value": "Blocked for"}
    assert "Value" not in organize["excludeByName"]
    order = organize["indexByName"]
    for column in ("group", "topic", "partition", "transactional_id", "application", "Value"):
        assert column in order, column
    assert table["fieldConfig"]["defaults"]["unit"] == "s"


def test_other_cluster_label_renames_every_use() -> None:
    text = generate.rendered()[OVERVIEW]
    renamed = generate.for_cluster_label(text, "kafka_name")
    assert "kafka_cluster" not in renamed
    assert 'kafka_name=~"$kafka_name"' in json.loads(renamed)["annotations"]["list"][0]["expr"]
    with pytest.raises(ValueError, match="label name"):
        generate.for_cluster_label(text, "kafka-name")


def test_findings_tables_show_the_transactional_id() -> None:
    for name in (OVERVIEW, PARTITION):
        tables = [p for p in panels(MODELS[name]) if p["type"] == "table"]
        assert tables, name
        for table in tables:
            if table["title"] == "Blocked consumers":
                continue
            expr = table["targets"][0]["expr"]
            assert "transactional_id" in expr and "_info" in expr
            assert table["targets"][0]["format"] == "table"


# ------------------------------------------------------------------ variables


def test_variables_exist() -> None:
    def variables(name: str) -> dict[str, dict[str, Any]]:
        return {v["name"]: v for v in MODELS[name]["templating"]["list"]}

    assert set(variables(OVERVIEW)) == {"datasource", "kafka_cluster", "topic"}
    assert set(variables(PARTITION)) == {"datasource", "kafka_cluster", "topic", "partition"}
    assert set(variables(EXPORTER)) == {"datasource", "kafka_cluster"}
    for name in MODELS:
        found = variables(name)
        assert found["datasource"]["type"] == "datasource"
        assert found["datasource"]["query"] == "prometheus"
        for var in ("kafka_cluster", "topic", "partition"):
            if var in found:
                assert found[var]["allValue"] == ".*"
                assert found[var]["includeAll"] is True
                assert found[var]["query"].startswith("label_values(")


def test_expressions_filter_by_the_variables() -> None:
    catalogue = documented_metrics()
    for name, title, expr in generate.panel_expressions():
        for metric in referenced_metrics(expr):
            if "kafka_cluster" in catalogue[metric]:
                assert 'kafka_cluster=~"$kafka_cluster"' in expr, f"{name}: {title}"
        if name == PARTITION and "topic" in grouping_labels(expr):
            assert 'partition=~"$partition"' in expr, f"{name}: {title}"


# ------------------------------------------------------------------ metrics


def test_documented_metrics_are_parsed() -> None:
    catalogue = documented_metrics()
    assert "kafka_txn_hanging_transaction_info" in catalogue
    assert "transactional_id" in catalogue["kafka_txn_hanging_transaction_info"]
    assert "le" in catalogue["kafka_txn_exporter_cycle_duration_seconds_bucket"]


@pytest.mark.parametrize("expr", generate.all_expressions())
def test_expression_uses_documented_metrics_and_labels(expr: str) -> None:
    catalogue = documented_metrics()
    metrics = referenced_metrics(expr)
    assert metrics, expr
    assert metrics <= set(catalogue), f"undocumented: {metrics - set(catalogue)}"
    for metric, labels in selector_labels(expr).items():
        assert labels <= catalogue[metric], f"{metric} has no label(s) {labels - catalogue[metric]}"
    available = set().union(*(catalogue[m] for m in metrics))
    assert grouping_labels(expr) <= available, grouping_labels(expr) - available


def test_variable_queries_use_documented_metrics() -> None:
    catalogue = documented_metrics()
    for queries in generate.variable_queries().values():
        for query in queries.values():
            assert referenced_metrics(query) <= set(catalogue), query


# ------------------------------------------------------------------ substitution


def test_substitute_variables() -> None:
    expr = 'rate(x{cluster=~"$cluster",topic=~"${topic}"}[$__rate_interval])'
    assert substitute_variables(expr) == 'rate(x{cluster=~".*",topic=~".*"}[1m])'
    assert (
        substitute_variables(expr, {"cluster": "prod"}, rate_interval="5m")
        == 'rate(x{cluster=~"prod",topic=~".*"}[5m])'
    )


def test_substituted_expressions_are_valid_promql(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH (Debian: apt-get install prometheus)", pytrace=False)
    expressions = generate.prometheus_expressions()
    assert expressions and all("$" not in expr for expr in expressions)
    rule_file = tmp_path / "dashboard-expressions.yml"
    rules = [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(expressions)]
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rule_file)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
