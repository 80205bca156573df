"""Whose transaction: a transactional id mapped to an ``application`` by ordered rules.

The rules (:mod:`exporter.groups_config`: built-ins for Kafka Streams and Flink's KafkaSink,
Spring's for the prefixes it is given, the user's regexes) become ONE Spark Column expression, a chain of
``CASE WHEN id RLIKE p THEN ...``: pure DataFrame API, evaluated in the JVM (no Python UDF),
the same on a classic session and on Spark Connect. The first rule that matches and yields
a non-empty name wins; no match (or a null id) gives null.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from exporter.groups_config import BUILTIN_RULES, AttributionRule, java_pattern

#: The application label of a transaction no rule attributes (or whose id is unknown).
UNKNOWN_APPLICATION = "unknown"

#: Separators a prefix usually ends with (``tx-``, ``orders.``), dropped from the name.
_TRAILING_SEPARATORS = r"[-_.]+$"


def _rule_value(rule: AttributionRule, tid: Column) -> Column:
    pattern = java_pattern(rule.pattern)
    if rule.application is not None:
        return F.lit(rule.application)
    extracted = F.regexp_extract(tid, pattern, rule.group_index)
    return F.regexp_replace(extracted, _TRAILING_SEPARATORS, "")


def application_column(
    transactional_id: Column | str,
    rules: Sequence[AttributionRule] = BUILTIN_RULES,
) -> Column:
    """The application of ``transactional_id`` (a column or column name), null when no rule
    matches."""
    tid = F.col(transactional_id) if isinstance(transactional_id, str) else transactional_id
    result: Column | None = None
    for rule in rules:
        value = _rule_value(rule, tid)
        condition = tid.rlike(java_pattern(rule.pattern)) & (F.length(value) > 0)
        result = F.when(condition, value) if result is None else result.when(condition, value)
    if result is None:
        return F.lit(None).cast("string")
    return result.otherwise(F.lit(None).cast("string"))


def by_application(classified: DataFrame) -> DataFrame:
    """Open transactions per application and class (the columns of
    :class:`~exporter.model.ApplicationTransactions`) from the classified transactions, whose
    ``application`` column the classification computes: attribution belongs to the
    transactions, whether or not consumer groups are read."""
    application = F.coalesce(F.col("application"), F.lit(UNKNOWN_APPLICATION))
    return classified.groupBy(application.alias("application"), "txn_class").count()
