"""The embedded driver's settings (exporter/pipeline/session.py), without starting Spark."""

from __future__ import annotations

import os

from exporter.config import SparkConfig
from exporter.pipeline.session import (
    CONNECT_PLUGIN,
    FILE_MIN_ROWS_CONF,
    LEAN_JVM_OPTIONS,
    PLAN_DEFAULTS,
    SHORT_LIVED_JVM_OPTIONS,
    background_optimiser,
    session_conf,
)


def test_the_embedded_driver_is_lean_and_quiet() -> None:
    conf = session_conf(SparkConfig(driver_memory="768m"))
    assert conf["spark.driver.memory"] == "768m"
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=")
    assert options[1:] == list(LEAN_JVM_OPTIONS)
    assert "-XX:+UseSerialGC" in options
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.eventLog.enabled"] == "false"
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    # Without the UI Spark still keeps finished jobs in memory: only a handful.
    assert int(conf["spark.ui.retainedJobs"]) <= 50
    assert int(conf["spark.sql.ui.retainedExecutions"]) <= 50
    assert "spark.plugins" not in conf


def test_operator_jvm_flags_come_last_and_win() -> None:
    conf = session_conf(SparkConfig(conf={"spark.driver.extraJavaOptions": "-XX:+UseG1GC"}))
    options = conf["spark.driver.extraJavaOptions"].split()
    assert options[-1] == "-XX:+UseG1GC"
    assert options[1:-1] == list(LEAN_JVM_OPTIONS)


def test_a_short_lived_session_trades_peak_speed_for_start_up() -> None:
    options = session_conf(SparkConfig(), short_lived=True)["spark.driver.extraJavaOptions"]
    assert options.endswith(" ".join(SHORT_LIVED_JVM_OPTIONS))


def test_a_short_lived_session_keeps_tables_in_the_plan_below_30k_rows() -> None:
    # One cold computation: a Parquet file costs the reader's start on a fresh JVM.
    assert session_conf(SparkConfig(), short_lived=True)[FILE_MIN_ROWS_CONF] == "30000"
    assert FILE_MIN_ROWS_CONF not in session_conf(SparkConfig())
    operators = session_conf(SparkConfig(conf={FILE_MIN_ROWS_CONF: "5000"}), short_lived=True)
    assert operators[FILE_MIN_ROWS_CONF] == "5000"


def test_the_cli_endpoint_is_spark_connect_on_loopback() -> None:
    conf = session_conf(SparkConfig(connect_server_port=15002, conf={"spark.plugins": "com.example.Other"}))
    assert conf["spark.plugins"] == f"com.example.Other,{CONNECT_PLUGIN}"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15002"


def test_a_connect_client_sends_the_plan_shape_and_the_operators_settings() -> None:
    conf = session_conf(
        SparkConfig(connect_url="sc://spark:15002", conf={"spark.sql.shuffle.partitions": "1"})
    )
    assert conf == {**PLAN_DEFAULTS, "spark.sql.shuffle.partitions": "1"}


def test_the_embedded_driver_does_not_verify_sparks_bytecode_unless_the_operator_asks() -> None:
    options = session_conf(SparkConfig())["spark.driver.extraJavaOptions"].split()
    off = options.index("-XX:-BytecodeVerificationRemote")
    assert options.index("-XX:+UnlockDiagnosticVMOptions") < off  # the JVM refuses it before
    on = "-XX:+BytecodeVerificationRemote"
    asked = SparkConfig(conf={"spark.driver.extraJavaOptions": on})
    assert session_conf(asked)["spark.driver.extraJavaOptions"].split()[-1] == on


def test_a_process_without_an_optimising_compiler_keeps_its_priority() -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert background_optimiser(os.getpid()) == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    assert background_optimiser(2**22 + 1) == 0  # above Linux's largest pid: no such process
