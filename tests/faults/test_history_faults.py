"""History write faults (issue 39): a history path that is not a directory, on a read-only file
system, on a full disk. Each failed write is one line of the exporter's that says why, logged
again only when the cause changes or every ten minutes; Spark's trace is at debug level only
and the embedded JVM prints none of its own. The daemon refuses at start a local history path
it cannot write, as it does a state_dir.

Read-only and full file systems are small tmpfs mounts (root only; skipped elsewhere)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.config import ConfigError, parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.history.config import HistoryConfig
from exporter.history.writer import FAILURE_LOG_EVERY_S, HistoryWriter
from tests.unit.history_fixtures import make, scenario

pytestmark = [pytest.mark.spark]


def _mount(where: Path, options: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.fixture
def broken_paths(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """History paths that cannot be written, by what is wrong with them."""
    a_file = tmp_path / "a-file"
    a_file.write_text("where a directory should be")
    paths = {"not a directory": a_file / "history"}
    mounted = []
    if _mount(tmp_path / "ro", "ro,size=1m"):
        mounted.append(tmp_path / "ro")
        paths["read-only file system"] = tmp_path / "ro" / "history"
    if _mount(tmp_path / "full", "size=256k"):
        mounted.append(tmp_path / "full")
        (tmp_path / "full" / "filler").write_bytes(b"x" * (250 * 1024))
        paths["disk full"] = tmp_path / "full" / "history"
    try:
        yield paths
    finally:
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


#: A process of its own, so that its JVM's stderr is its stderr: every path fails twice.
WRITER = textwrap.dedent(
    """
    import sys
    from exporter.cli import setup_logging
    from exporter.config import SparkConfig
    from exporter.history.config import HistoryConfig
    from exporter.history.writer import HistoryWriter
    from exporter.pipeline.session import spark_session
    from tests.unit.history_fixtures import make, scenario
    setup_logging("info")
    spark = spark_session(SparkConfig(master="local[1]", local_dir=sys.argv[1]))
    print("--- writes", file=sys.stderr, flush=True)
    for path in sys.argv[2:]:
        writer = HistoryWriter(HistoryConfig(path=path), lambda: spark, start=False)
        for cycle in scenario()[:2]:
            writer(*make(cycle))
            writer.flush_once()
    print("--- done", file=sys.stderr, flush=True)
    spark.stop()
    """
)


@pytest.mark.timeout(600)
def test_each_failed_write_is_one_line_with_its_cause_and_spark_prints_no_trace(
    tmp_path: Path, broken_paths: dict[str, Path]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path / "spark"), *map(str, broken_paths.values())],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    writes = done.stderr.split("--- writes\n", 1)[1].split("--- done", 1)[0]
    lines = writes.splitlines()
    for cause, path in broken_paths.items():
        mine = [line for line in lines if f"history write to {path} failed: {cause} (" in line]
        assert len(mine) == 1, f"{cause}: {mine}\n{writes}"
    assert len(lines) == len(broken_paths), writes  # nothing else: no trace, no JVM error
    assert "\tat " not in writes and "Caused by" not in writes


def test_the_line_comes_again_when_the_cause_changes_or_ten_minutes_later(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    writer = HistoryWriter(
        HistoryConfig(path=str(a_file / "h")), lambda: spark, clock=lambda: now[0], start=False
    )

    def failures(cycles: int) -> list[logging.LogRecord]:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="exporter.history.writer"):
            for cycle in scenario()[:cycles]:
                writer(*make(cycle))
                assert not writer.flush_once()
        return caplog.records

    first = failures(2)
    warned = [r for r in first if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "failed: not a directory (" in warned[0].getMessage()
    traced = [r for r in first if r.exc_info]
    assert len(traced) == 2 and all(r.levelno == logging.DEBUG for r in traced)
    now[0] += FAILURE_LOG_EVERY_S - 1
    assert not [r for r in failures(1) if r.levelno == logging.WARNING]
    now[0] += 1
    assert len([r for r in failures(1) if r.levelno == logging.WARNING]) == 1
    a_file.unlink()  # now the path's parent is missing: another cause (created, then writes work)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="exporter.history.writer"):
        assert writer.flush_once()
    assert "history writes recovered after 4 failure(s)" in caplog.text


class NoSpark(PipelineRunner):
    def begin_start(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def test_a_history_path_that_cannot_be_written_is_refused_at_start(broken_paths: dict[str, Path]) -> None:
    for cause, path in broken_paths.items():
        config = parse_config(
            {"clusters": [{"name": "c", "bootstrap_servers": "h:1"}], "history": {"path": str(path)}}, env={}
        )
        with pytest.raises(ConfigError) as raised:
            Daemon(config, registry=CollectorRegistry(), pipeline=NoSpark(config.spark, config.pipeline))
        assert raised.value.problems[0].startswith(f"history.path: cannot write to {path}: {cause} ("), cause
