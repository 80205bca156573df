"""Which engine the CLI's find-hanging/abort pick (exporter/operator/engine.py), without Spark."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from exporter.config import SparkConfig
from exporter.operator.engine import WARM_ENGINE_PORT_ENV, _connect_target


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port that accepts connections, as a warm engine's endpoint does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


@pytest.fixture
def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.delenv(WARM_ENGINE_PORT_ENV, raising=False)


def test_a_configured_connect_server_wins(monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    config = SparkConfig(connect_url="sc://spark:15002/;token=x", connect_server_port=listening)
    assert _connect_target(config) == "sc://spark:15002/;token=x"


def test_spark_remote_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_REMOTE", "sc://shared:15002")
    assert _connect_target(SparkConfig()) == "sc://shared:15002"


def test_a_warm_engine_on_the_configured_loopback_port_is_used(listening: int) -> None:
    assert _connect_target(SparkConfig(connect_server_port=listening)) == f"sc://127.0.0.1:{listening}"


def test_the_port_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    monkeypatch.setenv(WARM_ENGINE_PORT_ENV, str(listening))
    assert _connect_target(SparkConfig()) == f"sc://127.0.0.1:{listening}"


def test_nothing_listening_means_a_local_session(monkeypatch: pytest.MonkeyPatch, closed_port: int) -> None:
    monkeypatch.setenv(WARM_ENGINE_PORT_ENV, str(closed_port))
    assert _connect_target(SparkConfig()) is None


def test_port_zero_disables_the_probe(monkeypatch: pytest.MonkeyPatch, listening: int) -> None:
    monkeypatch.setenv(WARM_ENGINE_PORT_ENV, "0")
    assert _connect_target(SparkConfig()) is None
