"""Attribution: whose transaction. A transactional id is mapped to an ``application`` by
ordered rules, and the open transactions are counted per application and class (the family:
groups or not, attribution belongs to the transactions).

The rules (:mod:`exporter.config.groups`: built-ins for Kafka Streams and Flink's KafkaSink,
Spring's for the prefixes it is given, the user's regexes) become ONE Spark Column
expression, a chain of ``CASE WHEN id RLIKE p THEN ...``: pure DataFrame API, evaluated in the
JVM (no Python UDF), the same on a classic session and on Spark Connect. The first rule that
matches and yields a non-empty name wins; no match (or a null id) gives null. The
classification computes each transaction's application with it. In a round, each distinct
set of rules is one such chain, chosen by the cluster (:func:`round_application_column`): one
chain when every cluster has the same rules, as a fleet configured in one file has.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from exporter.config.groups import BUILTIN_RULES, AttributionRule, java_pattern
from exporter.model import ApplicationTransactions
from exporter.pipeline.families.base import Assembly, Context, Family, Output, Parts, cluster_in
from exporter.pipeline.tables import CLUSTER, records_of

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


def round_application_column(ctx: Context, transactional_id: Column) -> Column:
    """:func:`application_column` of each cluster's own rules, over the round's rows."""
    by_rules: dict[tuple[AttributionRule, ...], list[int]] = {}
    for index, run in enumerate(ctx.runs):
        by_rules.setdefault(tuple(run.rules), []).append(index)
    if len(by_rules) == 1:
        return application_column(transactional_id, next(iter(by_rules)))
    chosen: Column | None = None
    for rules, clusters in by_rules.items():
        applied = application_column(transactional_id, rules)
        picks = cluster_in(clusters)
        chosen = F.when(picks, applied) if chosen is None else chosen.when(picks, applied)
    assert chosen is not None
    return chosen


def _frames(ctx: Context, selected: frozenset[str]) -> dict[str, DataFrame]:
    """Open transactions per application and class, from the classified transactions."""
    classified = ctx.classified_frame
    if classified is None:
        return {}
    application = F.coalesce(F.col("application"), F.lit(UNKNOWN_APPLICATION))
    return {
        "by_application": classified.groupBy(CLUSTER, application.alias("application"), "txn_class").count()
    }


def _assemble(a: Assembly) -> Parts:
    counts = sorted(
        records_of(ApplicationTransactions, a.of("by_application")),
        key=lambda x: (x.application, x.txn_class),
    )
    return Parts(result={"open_transactions_by_application": tuple(counts)})


FAMILY = Family(
    name="attribution",
    reads=(),
    classified=True,
    outputs=(Output("by_application", ApplicationTransactions),),
    frames=_frames,
    assemble=_assemble,
)
