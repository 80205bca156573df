"""Client-side failures map to the documented exit codes, never to 1 ("findings")."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import EXIT_KAFKA, main
from exporter.kafka.admin import ClusterAdmin
from exporter.kafka.errors import KafkaUnavailable


def test_unreadable_ca_file_is_a_kafka_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n")
    for command in (["list"], ["find-hanging"]):
        code = main(
            [
                *command,
                "--bootstrap-server",
                "127.0.0.1:1",
                "--command-config",
                str(props),
                "--request-timeout",
                "1s",
            ]
        )
        assert code == EXIT_KAFKA
        assert "ssl.ca.location" in capsys.readouterr().err


def test_metadata_wraps_client_creation_failures() -> None:
    admin = ClusterAdmin(
        bootstrap_servers="127.0.0.1:1",
        properties={"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
        request_timeout_ms=1000,
    )
    with pytest.raises(KafkaUnavailable) as failure:
        admin.metadata()
    assert "ssl.ca.location" in str(failure.value)
    admin.close()
