"""A round of several clusters gives the same results on every engine: the embedded local
session, a Spark Connect server and a Spark standalone cluster (a master and two workers on
loopback, from the pyspark wheel). The rounds (:mod:`tests.integration.fleet_rounds`) carry
each cluster's memory from round to round, leave a cluster out of a round, and hold a
cluster whose input fails the engine.

The remote engines' clients run in a Python process of their own (one engine per process);
the embedded rounds run in the test process meanwhile."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from exporter.pipeline.rounds import compute_round
from exporter.pipeline.session import LARGE_ROUND_CONF
from testbed.spark import SparkStandalone
from tests.integration.fleet_rounds import run_rounds
from tests.integration.test_spark_connect import connect_url  # noqa: F401 (a fixture)
from tests.spark_connect_server import client_document, start_client_process

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

CLIENT_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with SparkStandalone(
        workers=2, worker_cores=1, worker_memory="768m", work_dir=tmp_path_factory.mktemp("standalone")
    ) as cluster:
        yield cluster


def start_client(*args: str) -> subprocess.Popen[str]:
    return start_client_process("tests.integration.fleet_rounds", *args, env={"SPARK_LOCAL_IP": "127.0.0.1"})


def client_rounds(client: subprocess.Popen[str]) -> dict[str, Any]:
    return client_document(client, CLIENT_TIMEOUT_S, "the client")


def embedded_rounds(spark: SparkSession) -> list[dict[str, Any]]:
    rounds = run_rounds(lambda runs: compute_round(spark, runs))
    # What the rounds claim to exercise, on the reference engine.
    assert [sorted(r["results"]) for r in rounds] == [["rich", "warm"], ["broken", "rich"], ["rich", "warm"]]
    assert [r["failed"] for r in rounds] == [["broken"], [], []]
    rich = [r["results"]["rich"]["memory"]["candidates"] for r in rounds]
    assert [[c["cycles"] for c in candidates] for candidates in rich] == [[1], [2], [3]]
    return rounds


def assert_same_rounds(remote: list[dict[str, Any]], local: list[dict[str, Any]]) -> None:
    assert len(remote) == len(local)
    for i, (got, want) in enumerate(zip(remote, local, strict=True), start=1):
        assert got["failed"] == want["failed"], f"round {i}"
        assert sorted(got["results"]) == sorted(want["results"]), f"round {i}"
        for cluster, result in want["results"].items():
            for field, value in result.items():
                assert got["results"][cluster][field] == value, f"round {i}, cluster {cluster}, field {field}"


def compare_with(spark: SparkSession, *client_args: str) -> dict[str, Any]:
    client = start_client(*client_args)  # works meanwhile in its own process
    try:
        local = embedded_rounds(spark)
        remote = client_rounds(client)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=30)
    assert_same_rounds(remote["rounds"], local)
    return remote


def test_a_fleet_round_on_spark_connect_equals_the_embedded_engine(
    spark: SparkSession,
    connect_url: str,  # noqa: F811 (the fixture)
) -> None:
    remote = compare_with(spark, "--connect", connect_url)
    assert remote["session"] == "pyspark.sql.connect.session.SparkSession"


def test_a_large_fleet_round_on_spark_connect_runs_compiled_and_equals_the_embedded_engine(
    spark: SparkSession,
    connect_url: str,  # noqa: F811 (the fixture)
) -> None:
    """Every round of the client a large round (its bound lowered to one partition): the
    Connect server's session takes the large round's settings for each round and has its own
    back after it, the partition frame is a checkpoint on the server, the clusters' values
    arrays; the results are the embedded engine's ordinary rounds', field by field."""
    remote = compare_with(spark, "--connect", connect_url, "--large")
    assert remote["session"] == "pyspark.sql.connect.session.SparkSession"
    assert remote["conf_at_collect"]  # one per action: each round's, and a failed one's again alone
    assert all(seen == LARGE_ROUND_CONF for seen in remote["conf_at_collect"])
    assert remote["conf_after"] == remote["conf_before"]


def test_a_fleet_round_on_a_spark_standalone_cluster_equals_the_embedded_engine(
    spark: SparkSession, standalone: SparkStandalone
) -> None:
    remote = compare_with(spark, "--master", standalone.url)
    assert remote["session"] == "pyspark.sql.session.SparkSession"
    assert standalone.alive_workers() == 2
