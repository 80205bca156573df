"""A classic session reaches ``org.apache.spark.sql.functions`` and PySpark's helper classes
without a reflection round trip per call (exporter.pipeline.session ``cache_function_lookups``):
the py4j commands that column expressions and DataFrame steps send are counted at py4j's one
send method."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from py4j.clientserver import ClientServerConnection
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exporter.pipeline.session import LOOKED_UP_ONCE, cache_function_lookups

pytestmark = pytest.mark.spark

#: py4j's command for a reflection lookup (py4j.protocol.REFLECTION_COMMAND_NAME).
REFLECTION = "r\n"


@contextmanager
def sent_commands(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    sent: list[str] = []
    send = ClientServerConnection.send_command

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return send(self, command, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(ClientServerConnection, "send_command", counting)
        yield sent


def test_column_functions_named_columns_and_dataframe_steps_send_no_reflection_lookup(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    (F.col("a") == F.lit(1)).alias("b")  # the first use of each member looks it up
    spark.range(1).select("id", F.when(F.col("id") > 0, F.lit("x")).alias("y"))
    with sent_commands(monkeypatch) as sent:
        for _ in range(3):
            (F.col("a") == F.lit(1)).alias("b")
            (F.col("a") == 1).alias("c")  # a literal converted on the way
            spark.range(1).select("id", F.when(F.col("id") > 0, F.lit("x")).alias("y"))
    assert sent
    assert [c for c in sent if c.startswith(REFLECTION)] == []


def test_without_the_cache_every_function_call_looks_its_class_and_member_up_again(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm = spark.sparkContext._jvm
    for name, fqn in LOOKED_UP_ONCE.items():
        monkeypatch.delitem(vars(jvm), name)
        monkeypatch.delitem(vars(jvm), fqn)
    with sent_commands(monkeypatch) as sent:
        F.col("a")
    assert sum(c.startswith(REFLECTION) for c in sent) == 2  # the class, then the member


def test_the_cache_is_installed_once_and_answers_with_the_same_members(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    installed = {name: vars(jvm)[name] for name in LOOKED_UP_ONCE}
    for name, fqn in LOOKED_UP_ONCE.items():
        assert vars(jvm)[fqn] is installed[name]
    cache_function_lookups(spark)  # again: kept as it is
    assert {name: vars(jvm)[name] for name in LOOKED_UP_ONCE} == installed
    assert installed["functions"].col is installed["functions"].col
    row = spark.range(3).select(F.max(F.col("id") + F.lit(1)).alias("m")).collect()[0]
    assert row["m"] == 3
