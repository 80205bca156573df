"""Argument validation of the operator commands: no broker needed, every bad flag exits 2
with a message naming the flag, before any connection is attempted."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main
from exporter.operator.connection import UsageError, read_properties
from exporter.operator.render import human_duration, iso_ms, table

BS = ("--bootstrap-server", "127.0.0.1:1")


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, expect exit 2, return stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("list",), "--bootstrap-server"),
        (("list", *BS, "--config.file", "x.yml"), "--config.file"),
        (("list", *BS, "--cluster", "prod"), "--cluster"),
        (("list", *BS, "--request-timeout", "soon"), "--request-timeout"),
        (("list", *BS, "--request-timeout", "5ms"), "--request-timeout"),
        (("list", *BS, "--output", "xml"), "--output"),
        (("list", *BS, "--state", "Running"), "--state"),
        (("list", *BS, "--producer-id", "-4"), "--producer-id"),
        (("list", *BS, "--duration-filter", "1h"), "--duration-filter"),
        (("list", "--bootstrap-server", "no-port"), "--bootstrap-server"),
        (("describe", *BS), "--transactional-id"),
        (("describe-producers", *BS, "--topic", "t"), "--partition"),
        (("describe-producers", *BS, "--topic", "t", "--partition", "x"), "--partition"),
        (("find-hanging", *BS, "--partition", "0"), "--topic"),
        (("find-hanging", *BS, "--topic", "t", "--broker-id", "1"), "--broker-id"),
        (("find-hanging", *BS, "--max-transaction-timeout", "-1"), "--max-transaction-timeout"),
        (("abort", *BS, "--topic", "t", "--partition", "0"), "--start-offset"),
        (("abort", *BS, "--topic", "t", "--partition", "0", "--producer-id", "5"), "--producer-epoch"),
        (
            ("abort", *BS, "--topic", "t", "--partition", "0", "--producer-id", "5", "--producer-epoch", "1"),
            "--coordinator-epoch",
        ),
        (
            ("abort", *BS, "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "5"),
            "--start-offset",
        ),
        (
            (
                "abort",
                *BS,
                "--topic",
                "t",
                "--partition",
                "0",
                "--start-offset",
                "3",
                "--producer-epoch",
                "1",
            ),
            "--producer-epoch",
        ),
        (
            ("abort", *BS, "--topic", "t", "--partition", "0", "--start-offset", "3", "--yes", "--dry-run"),
            "--dry-run",
        ),
        (("abort", *BS, "--partition", "0", "--start-offset", "3"), "--topic"),
        (("force-terminate", *BS), "--transactional-id"),
        (("force-terminate", *BS, "--transactional-id", "x", "--yes", "--dry-run"), "--dry-run"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], flag: str
) -> None:
    err = usage_error(capsys, *argv)
    assert flag in err
    assert "usage: kafka-txn-exporter" in err


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_bootstrap_server_is_named_as_empty(capsys: pytest.CaptureFixture[str], value: str) -> None:
    err = usage_error(capsys, "list", "--bootstrap-server", value)
    assert "--bootstrap-server: empty; give HOST:PORT[,HOST:PORT...]" in err
    assert "one of --bootstrap-server or --config.file is required" not in err


def test_command_config_is_validated_like_the_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nbatch.size=5\n")
    err = usage_error(capsys, "list", *BS, "--command-config", str(props))
    assert f"--command-config {props}: batch.size: unsupported property" in err
    assert "sasl.username and sasl.password are required" in err

    err = usage_error(capsys, "list", *BS, "--command-config", str(tmp_path / "missing"))
    assert "--command-config" in err and "cannot read" in err

    props.write_text("just-a-word\n")
    assert "is not key=value" in usage_error(capsys, "list", *BS, "--command-config", str(props))

    err = usage_error(capsys, "list", "--config.file", "c.yml", "--command-config", str(props))
    assert "--command-config goes with --bootstrap-server" in err


def test_config_file_cluster_selection(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        "clusters:\n"
        "  - {name: prod, bootstrap_servers: 'h1:9092'}\n"
        "  - {name: stage, bootstrap_servers: 'h2:9092'}\n"
    )
    err = usage_error(capsys, "list", "--config.file", str(config))
    assert "--cluster is required" in err and "prod, stage" in err
    err = usage_error(capsys, "list", "--config.file", str(config), "--cluster", "dev")
    assert "--cluster 'dev' is not in" in err

    config.write_text("clusters:\n  - {name: prod, bootstrap_servers: 'h1:9092', colour: red}\n")
    capsys.readouterr()
    assert main(["list", "--config.file", str(config)]) == 2  # ConfigError: cli.main's exit 2
    assert "clusters[0].colour: unknown key" in capsys.readouterr().err


def test_properties_file_syntax(tmp_path: Path) -> None:
    props = tmp_path / "p.properties"
    props.write_text(
        "# comment\n! also a comment\n\nsecurity.protocol = SSL\n"
        "ssl.ca.location: /etc/ca.pem\nsasl.username=a\\\n  lice\n"
    )
    assert read_properties(str(props)) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/ca.pem",
        "sasl.username": "alice",
    }
    with pytest.raises(UsageError, match="cannot read"):
        read_properties(str(tmp_path / "nope"))


def test_table_and_formatters() -> None:
    assert table(("A", "Bee"), [(1, None), ("long", 22)]).splitlines() == [
        "A     Bee",
        "1     None",
        "long  22",
    ]
    assert table(("A",), []) == "A"
    assert iso_ms(-1) is None
    assert iso_ms(0) == "1970-01-01T00:00:00Z"
    assert [human_duration(ms) for ms in (0, 59_000, 61_000, 3_660_000, 90_000_000)] == [
        "0s",
        "59s",
        "1m01s",
        "1h01m",
        "1d01h00m",
    ]
