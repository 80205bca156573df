"""The secret Spark settings' way to the JVM (exporter.pipeline.session.secrets_file): a
properties file only this process reads, named on spark-submit's command line by
PYSPARK_SUBMIT_ARGS while the JVM is launched, gone afterwards. The JVM end of it is
tests/integration/test_spark_secrets.py."""

from __future__ import annotations

import os
import stat

import pytest

from exporter.pipeline.session import SUBMIT_ARGS_ENV, secrets_file


def test_the_file_is_private_named_in_the_submit_arguments_and_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SUBMIT_ARGS_ENV, "--driver-java-options -Dx=1 pyspark-shell")
    with secrets_file({"spark.hadoop.fs.s3a.secret.key": "a=b:c#d!e\\f\ng"}) as path:
        assert path is not None
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_text() == "spark.hadoop.fs.s3a.secret.key=a\\=b\\:c\\#d\\!e\\\\f\\ng\n"
        assert os.environ[SUBMIT_ARGS_ENV] == (
            f"--properties-file {path} --driver-java-options -Dx=1 pyspark-shell"
        )
    assert not path.exists() and not path.parent.exists()
    assert os.environ[SUBMIT_ARGS_ENV] == "--driver-java-options -Dx=1 pyspark-shell"


def test_without_secrets_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SUBMIT_ARGS_ENV, raising=False)
    with secrets_file({}) as path:
        assert path is None and SUBMIT_ARGS_ENV not in os.environ
    with pytest.raises(RuntimeError), secrets_file({"spark.authenticate.secret": "x"}):
        raise RuntimeError("the JVM did not start")
    assert SUBMIT_ARGS_ENV not in os.environ
