"""Attribution rules: a transactional id mapped to its application by one Spark Column."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from exporter.groups_config import BUILTIN_RULES, AttributionRule, parse_attribution
from exporter.pipeline.attribution import application_column

pytestmark = pytest.mark.spark

STREAMS_V2 = "order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-1"
STREAMS_V1 = "order-enricher-0_12"
FLINK = "fraud-sink-3-1742"
SPRING = "payments-tx-7"


def attribute(
    spark: SparkSession, ids: list[str | None], rules: tuple[AttributionRule, ...] = BUILTIN_RULES
) -> list[str | None]:
    frame = spark.createDataFrame([(i, tid) for i, tid in enumerate(ids)], "i int, transactional_id string")
    rows = (
        frame.select("i", application_column("transactional_id", rules).alias("app")).orderBy("i").collect()
    )
    return [r["app"] for r in rows]


def test_kafka_streams_exactly_once_v2_id_maps_to_the_application_id(spark: SparkSession) -> None:
    assert attribute(spark, [STREAMS_V2]) == ["order-enricher"]


def test_kafka_streams_exactly_once_v1_task_id_maps_to_the_application_id(spark: SparkSession) -> None:
    assert attribute(spark, [STREAMS_V1]) == ["order-enricher"]


def test_flink_kafka_sink_id_maps_to_its_prefix(spark: SparkSession) -> None:
    assert attribute(spark, [FLINK]) == ["fraud-sink"]


def test_spring_prefix_and_counter_maps_to_the_prefix_without_separator(spark: SparkSession) -> None:
    assert attribute(spark, [SPRING, "billingtx12"]) == ["payments-tx", "billingtx"]


def test_spring_prefix_that_ends_in_a_digit_before_its_separator_keeps_it(spark: SparkSession) -> None:
    """A random or versioned prefix (``-0c312328-``, ``-v2-``) is the application whatever its
    last character; before, a prefix ending in a digit matched no rule."""
    ids: list[str | None] = ["orders-v2-5", "kte-hanging-0c312328-0", "kte-hanging-ba57efcd-0", "x_12_3"]
    assert attribute(spark, ids) == ["orders-v2", "kte-hanging-0c312328", "kte-hanging-ba57efcd", "x_12"]


def test_ids_no_rule_matches_and_null_ids_have_no_application(spark: SparkSession) -> None:
    assert attribute(spark, ["standalone", "12345", None]) == [None, None, None]


def test_user_rule_with_a_named_group_yields_that_group(spark: SparkSession) -> None:
    rules, problems = parse_attribution(
        [{"name": "billing", "pattern": r"^billing-(?P<application>[a-z]+)-tx$"}], "attribution"
    )
    assert problems == []
    assert attribute(spark, ["billing-invoices-tx", FLINK], rules) == ["invoices", "fraud-sink"]


def test_user_rule_accepts_java_named_group_syntax(spark: SparkSession) -> None:
    rules, problems = parse_attribution([{"pattern": r"^(?<application>ledger)/"}], "attribution")
    assert problems == []
    assert attribute(spark, ["ledger/writer"], rules) == ["ledger"]


def test_user_rule_without_group_yields_the_whole_match_or_its_fixed_name(spark: SparkSession) -> None:
    rules, problems = parse_attribution(
        ["builtins", {"pattern": "^inventory"}, {"pattern": "^legacy\\..*", "application": "legacy"}],
        "attribution",
    )
    assert problems == []
    assert attribute(spark, ["inventory.writer", "legacy.x"], rules) == ["inventory", "legacy"]


def test_first_matching_rule_wins_so_user_rules_placed_first_override_builtins(spark: SparkSession) -> None:
    after, _ = parse_attribution([{"pattern": "^orders-tx-\\d+$", "application": "orders"}], "attribution")
    before, _ = parse_attribution(
        [{"pattern": "^orders-tx-\\d+$", "application": "orders"}, "builtins"], "attribution"
    )
    assert attribute(spark, ["orders-tx-4"], after) == ["orders-tx"]  # Spring's rule first
    assert attribute(spark, ["orders-tx-4"], before) == ["orders"]


def test_no_rules_attribute_nothing(spark: SparkSession) -> None:
    rules, _ = parse_attribution([], "attribution")
    assert rules == ()
    assert attribute(spark, [FLINK], rules) == [None]
