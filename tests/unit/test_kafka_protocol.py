"""The seam to kafka-python's internals (``exporter.kafka._protocol``), without a broker."""

from __future__ import annotations

import threading
import time

import pytest

from exporter.kafka._protocol import INTERNALS, ProtocolClient, missing_internals
from exporter.kafka.clients import kafka_python_config
from exporter.kafka.errors import KafkaUnavailable


def test_the_installed_kafka_python_has_every_internal_the_seam_uses() -> None:
    assert INTERNALS
    assert missing_internals() == []


def test_only_the_seam_touches_kafka_python_internals() -> None:
    """Every other module of the Kafka layer goes through ProtocolClient."""
    from pathlib import Path

    import exporter.kafka

    package = Path(exporter.kafka.__file__).parent
    private = ("._manager", "._net", "._auth_failures", "._client.", "._async_")
    offenders = [
        f"{path.name}: {marker}"
        for path in sorted(package.glob("*.py"))
        if path.name != "_protocol.py"
        for marker in private
        if marker in path.read_text()
    ]
    assert offenders == []


def _io_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None}


def test_a_failed_bootstrap_is_named_and_leaves_no_io_thread_behind() -> None:
    before = _io_threads()
    config = kafka_python_config("127.0.0.1:1", {}, request_timeout_ms=500)

    with pytest.raises(KafkaUnavailable) as failure:
        ProtocolClient.connect(config, login_failure=lambda: None)

    assert failure.value.error in ("BROKER_NOT_AVAILABLE", "REQUEST_TIMED_OUT")
    assert str(failure.value).startswith("cannot bootstrap from 127.0.0.1:1: ")
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    for thread in leftover:
        thread.join(timeout=5)
    assert [t.name for t in leftover if t.is_alive()] == []


def test_a_login_failure_another_client_saw_names_a_failed_bootstrap() -> None:
    config = kafka_python_config("127.0.0.1:1", {}, request_timeout_ms=300)

    with pytest.raises(KafkaUnavailable) as failure:
        ProtocolClient.connect(config, login_failure=lambda: "SASL_AUTHENTICATION_FAILED")

    assert failure.value.error == "SASL_AUTHENTICATION_FAILED"
    assert not failure.value.retriable


def test_closing_the_admin_during_a_bootstrap_leaves_no_client_behind() -> None:
    """close() does not wait out a bootstrap in flight; the bootstrap closes what it made."""
    from exporter.kafka.admin import ClusterAdmin

    before = _io_threads()
    admin = ClusterAdmin(bootstrap_servers="127.0.0.1:1", request_timeout_ms=3000)
    failures: list[BaseException] = []

    def read() -> None:
        try:
            admin.describe_producers({1: [("t", 0)]})
        except BaseException as e:
            failures.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)  # the reader is bootstrapping now
    admin.close()
    reader.join(timeout=30)

    assert not reader.is_alive()
    assert [type(e) for e in failures] == [KafkaUnavailable]
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    for thread in leftover:
        thread.join(timeout=5)
    assert [t.name for t in leftover if t.is_alive()] == []
    with pytest.raises(KafkaUnavailable, match="closed"):
        admin.describe_producers({1: [("t", 0)]})
