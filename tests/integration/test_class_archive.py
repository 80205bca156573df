"""The embedded driver's class archive on a real JVM: written by the command, mapped by the
next driver, and a damaged one costs a warning, never the start.

Each driver runs in a child process: a JVM maps its archive when it starts, and this test
process may already have one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.pipeline.class_archive import CLASS_ARCHIVE_ENV

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
#: Starts a short-lived driver with the archive, runs the warm-up snapshot through the
#: pipeline, and reports the findings and whether the running JVM was started with it.
DRIVER = """
import json, sys
from exporter.config import SparkConfig
from exporter.model import PipelineSettings
from exporter.pipeline.compute import compute
from exporter.pipeline.session import local_jvm_pid, spark_session
from exporter.pipeline.warmup import warmup_snapshot

config = SparkConfig(class_archive=sys.argv[1], conf={"spark.driver.extraJavaOptions": sys.argv[2]})
spark = spark_session(config, short_lived=True)
snapshot = warmup_snapshot()
result = compute(spark, snapshot, PipelineSettings(), None, snapshot.taken_at_ms)
argv = open(f"/proc/{local_jvm_pid(spark)}/cmdline").read().split("\\0")
print(json.dumps({
    "findings": sorted(f.producer_id for f in result.findings),
    "mapped": f"-XX:SharedArchiveFile={sys.argv[1]}" in argv,
}))
"""


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CLASS_ARCHIVE_ENV}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def drive(archive: Path, java_options: str, cwd: Path) -> tuple[dict[str, object], str]:
    done = run(["-c", DRIVER, str(archive), java_options], cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("class-archive")
    archive = work / "spark-classes.jsa"
    done = run(["-m", "exporter.cli", "class-archive", "--out", str(archive)], work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"{archive}: class archive of ")
    assert [p.name for p in work.iterdir()] == [archive.name]  # no partial file left behind
    return archive


def test_the_command_writes_an_archive_the_next_driver_maps(written: Path, tmp_path: Path) -> None:
    # -Xshare:on: the JVM refuses to start rather than run without the archive.
    report, _ = drive(written, "-Xshare:on", tmp_path)
    assert report["mapped"] is True
    assert report["findings"] == [2]  # the warm-up snapshot's hanging transaction


def test_a_damaged_archive_costs_a_warning_and_the_driver_starts_without_it(
    written: Path, tmp_path: Path
) -> None:
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(written.read_bytes()[: 1 << 20])  # a copy cut short
    report, stderr = drive(damaged, "", tmp_path)
    assert report == {"findings": [2], "mapped": False}
    assert f"did not start with class archive {damaged}" in stderr
