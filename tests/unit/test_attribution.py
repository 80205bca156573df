"""Attribution rules: a transactional id mapped to its application by one Spark Column.

The built-in rules match only the shape each framework gives its ids (docs/groups.md): the
table below holds ids as the frameworks make them, and near misses that must stay unknown.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from exporter.config.groups import BUILTIN_RULES, AttributionRule, parse_attribution, spring_rule
from exporter.pipeline.families.attribution import application_column

pytestmark = pytest.mark.spark

STREAMS_V2 = "order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-1"
FLINK = "fraud-sink-3-1742"

#: (transactional id, application under the built-ins and a spring rule for "tx-" and
#: "payments.tx-"; None: unknown). Ids as the frameworks build them:
#: Kafka Streams v2 ``<application.id>-<processId UUID>-<stream thread index from 1>``
#: (2.6-2.7 eos-beta: no index), v1 ``<application.id>-<subtopology>_<partition>``;
#: Flink's KafkaSink ``<prefix>-<subtaskId>-<checkpointOffset>``; Spring's producer factory
#: ``<transactionIdPrefix><n>`` (2.x EOS alpha: ``<prefix><group>.<topic>.<partition>``).
CASES: list[tuple[str | None, str | None]] = [
    # Kafka Streams exactly-once v2
    (STREAMS_V2, "order-enricher"),
    ("wordcount-5e0b4d7c-1f2a-4b3c-8d9e-0a1b2c3d4e5f-12", "wordcount"),
    ("kte-streams-app_v2-0aa7c9e2-5b61-4d0c-9f63-3e2d1c0b9a87-2", "kte-streams-app_v2"),
    ("order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c", "order-enricher"),  # 2.6-2.7 eos-beta
    ("order-enricher-3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-0", None),  # threads count from 1
    ("order-enricher-3F2B8C1E-9A4D-4E7F-B1C2-0D9E8F7A6B5C-1", None),  # Java prints UUIDs lower case
    ("order-enricher-3f2b8c1e9a4d4e7fb1c20d9e8f7a6b5c-1", None),  # not a UUID's groups
    ("3f2b8c1e-9a4d-4e7f-b1c2-0d9e8f7a6b5c-1", None),  # no application.id
    # Kafka Streams exactly-once v1 (eos-alpha)
    ("order-enricher-0_12", "order-enricher"),
    ("streams-pipe_2-1_0", "streams-pipe_2"),
    ("order-enricher-01_2", None),  # Java prints no leading zero
    ("order-enricher-0_1_2", None),
    ("order-enricher-0-12_", None),
    ("0_12", None),
    # Flink KafkaSink
    (FLINK, "fraud-sink"),
    ("kafka-sink-0-1", "kafka-sink"),
    ("fraud-sink-3-07", None),
    ("fraud-sink-3", None),
    ("-3-17", None),
    # Spring for Apache Kafka, only with the prefixes it is given
    ("tx-0", "tx"),
    ("tx-17", "tx"),
    ("payments.tx-4", "payments.tx"),
    ("tx-orders-group.orders.3", "tx"),  # Spring Kafka 2.x EOS alpha, per group/topic/partition
    ("tx-07", None),
    ("tx-", None),
    ("txn-5", None),  # another prefix
    ("anything-7", None),  # ends in digits, no known prefix: not made up into "anything"
    ("payments-tx-7", None),
    ("billingtx12", None),
    # no framework's shape
    ("standalone", None),
    ("12345", None),
    (None, None),
]
RULES = (*BUILTIN_RULES, spring_rule(["tx-", "payments.tx-"]))


def attribute(
    spark: SparkSession, ids: list[str | None], rules: tuple[AttributionRule, ...] = BUILTIN_RULES
) -> list[str | None]:
    frame = spark.createDataFrame([(i, tid) for i, tid in enumerate(ids)], "i int, transactional_id string")
    rows = (
        frame.select("i", application_column("transactional_id", rules).alias("app")).orderBy("i").collect()
    )
    return [r["app"] for r in rows]


def test_each_builtin_rule_matches_its_frameworks_ids_and_nothing_near_them(spark: SparkSession) -> None:
    got = attribute(spark, [tid for tid, _ in CASES], RULES)
    wrong = [(tid, want, app) for (tid, want), app in zip(CASES, got, strict=True) if app != want]
    assert wrong == [], "(id, expected, got)"


def test_without_a_spring_rule_no_id_is_taken_for_springs(spark: SparkSession) -> None:
    assert attribute(spark, ["tx-0", "payments.tx-4", "anything-7"]) == [None, None, None]


def test_spring_rule_with_a_fixed_application_and_overlapping_prefixes(spark: SparkSession) -> None:
    rules = (spring_rule(["orders-", "orders-tx-"]), spring_rule(["legacy."], application="ledger"))
    assert attribute(spark, ["orders-tx-3", "orders-3", "legacy.0"], rules) == [
        "orders-tx",
        "orders",
        "ledger",
    ]


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
    rule = {"pattern": "^orders-\\d+-\\d+$", "application": "order-service"}
    after, _ = parse_attribution([rule], "attribution")
    before, _ = parse_attribution([rule, "builtins"], "attribution")
    assert attribute(spark, ["orders-4-2"], after) == ["orders"]  # Flink's rule first
    assert attribute(spark, ["orders-4-2"], before) == ["order-service"]


def test_no_rules_attribute_nothing(spark: SparkSession) -> None:
    rules, _ = parse_attribution([], "attribution")
    assert rules == ()
    assert attribute(spark, [FLINK], rules) == [None]
