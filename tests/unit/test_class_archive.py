"""The embedded driver's class archive: mapped when present, never a reason not to start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exporter import cli
from exporter.config import SparkConfig, parse_config
from exporter.pipeline import class_archive
from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV, archive_options, refuse_archive
from exporter.pipeline.session import java_options


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLASS_ARCHIVE_ENV, raising=False)
    monkeypatch.setattr(class_archive, "_warned", set())
    monkeypatch.setattr(class_archive, "_refused", set())


def archive(tmp_path: Path) -> str:
    path = tmp_path / "spark-classes.jsa"
    path.write_bytes(b"archive")
    return str(path)


def test_an_existing_archive_is_mapped_before_the_operators_own_flags(tmp_path: Path) -> None:
    path = archive(tmp_path)
    config = SparkConfig(class_archive=path, conf={"spark.driver.extraJavaOptions": "-Xshare:on"})
    options = java_options(config).split()
    assert options.index(f"-XX:SharedArchiveFile={path}") < options.index("-Xshare:on")


def test_the_environment_names_the_archive_when_the_config_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = archive(tmp_path)
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, path)
    assert archive_options(SparkConfig()) == [f"-XX:SharedArchiveFile={path}"]
    (tmp_path / "own").mkdir()
    own = archive(tmp_path / "own")
    assert archive_options(SparkConfig(class_archive=own)) == [f"-XX:SharedArchiveFile={own}"]


def test_a_missing_archive_is_skipped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = SparkConfig(class_archive=str(tmp_path / "gone.jsa"))
    with caplog.at_level(logging.WARNING, logger="exporter.pipeline.class_archive"):
        assert archive_options(config) == []
        assert archive_options(config) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"Spark class archive {tmp_path / 'gone.jsa'} does not exist: the driver starts without it"
    ]


def test_an_archive_a_driver_failed_to_start_with_is_never_mapped_again(tmp_path: Path) -> None:
    path = archive(tmp_path)
    refuse_archive(path, RuntimeError("Java gateway process exited before sending its port number."))
    assert archive_options(SparkConfig(class_archive=path)) == []


def test_the_config_key_takes_a_path_and_empty_means_none() -> None:
    cluster = {"name": "a", "bootstrap_servers": "127.0.0.1:9092"}
    assert (
        parse_config({"clusters": [cluster], "spark": {"class_archive": "/x.jsa"}}).spark.class_archive
        == "/x.jsa"
    )
    assert parse_config({"clusters": [cluster], "spark": {"class_archive": ""}}).spark.class_archive is None


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("{tmp}/missing/spark.jsa", "--out: directory {tmp}/missing does not exist"),
        ("{tmp}", "--out: {tmp} is a directory"),
    ],
)
def test_class_archive_refuses_a_destination_it_cannot_write_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, message: str
) -> None:
    assert cli.main(["class-archive", "--out", out.format(tmp=tmp_path)]) == 2
    assert capsys.readouterr().err == f"kafka-txn-exporter: {message.format(tmp=tmp_path)}\n"


def test_class_archive_refuses_a_configuration_whose_spark_is_not_embedded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yml"
    config.write_text(
        "clusters: [{name: a, bootstrap_servers: '127.0.0.1:9092'}]\nspark: {connect_url: 'sc://127.0.0.1:15002'}\n"
    )
    assert cli.main(["class-archive", "--out", str(tmp_path / "a.jsa"), "--config.file", str(config)]) == 2
    assert "not the embedded driver" in capsys.readouterr().err
    assert not (tmp_path / "a.jsa").exists()
