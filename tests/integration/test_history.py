"""The history end to end on a real broker: a daemon with the history writer as its cycle
listener runs through a scenario, then ``report`` tells what happened.

Scenario on one topic: a hanging transaction (back-dated, so also late) is suspected, then
confirmed, then aborted with ``kafka-txn-exporter abort --yes``; a legitimate transaction
stays open until it is late, then commits; both hold the topic's LSO back. The report must
list exactly those two incidents with first/last seen within one interval of what the
cycles saw, how each ended, and the abort's audit entry. The HTML report is opened in
Debian's headless Chromium, whose screenshot must show the plots.

A legitimate transaction is late after transaction.max.timeout.ms (15 min on the test bed)
plus padding; the padding here is negative so that "late" comes after 4 s, not 20 min: the
rule is the pipeline's, only its threshold is moved.
"""

from __future__ import annotations

import html.parser
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.cli import main
from exporter.config import parse_config
from exporter.config.history import HistoryConfig
from exporter.daemon import Daemon, PipelineRunner
from exporter.history.writer import HistoryWriter
from exporter.model import ClusterSnapshot, CycleResult, TxnClass
from testbed.broker import KafkaCluster
from testbed.scenarios import OpenTransaction, produce_plain
from tests.fixtures_kafka import TEST_TRANSACTION_MAX_TIMEOUT_MS, HangingFactory

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

LATE_BACKDATE_MS = 30 * 60 * 1000
LATE_AFTER_MS = 4_000
INTERVAL_S = 2.0
MAX_CYCLES = 15


class Seen:
    """A second listener: what each cycle classified, to check the report against."""

    def __init__(self) -> None:
        self.cycles: list[tuple[int, dict[tuple[str, int], TxnClass]]] = []

    def __call__(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        self.cycles.append(
            (result.computed_at_ms, {(f.topic, f.partition): f.txn_class for f in result.findings})
        )

    def times(self, key: tuple[str, int], classes: set[TxnClass]) -> list[int]:
        return [at for at, seen in self.cycles if seen.get(key) in classes]


@pytest.fixture
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(
            "Debian's chromium is not installed (apt-get install -y chromium; .ci/setup.sh installs it)"
        )
    return path


@pytest.fixture
def history_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "history"


def test_daemon_history_then_report_tells_what_happened(
    kafka: KafkaCluster,
    spark: SparkSession,
    topic: str,
    hanging: HangingFactory,
    history_dir: Path,
    tmp_path: Path,
    chromium: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bootstrap = kafka.bootstrap_servers
    config = parse_config(
        {
            "web": {"listen_address": "127.0.0.1:0"},
            "pipeline": {"hanging_confirm_cycles": 2},
            "clusters": [
                {
                    "name": "test",
                    "bootstrap_servers": bootstrap,
                    "interval": "2s",
                    "request_timeout": "1500ms",
                }
            ],
        },
        env={},
    )
    settings = replace(config.pipeline, late_padding_ms=LATE_AFTER_MS - TEST_TRANSACTION_MAX_TIMEOUT_MS)
    writer = HistoryWriter(HistoryConfig(path=str(history_dir)), lambda: spark)
    seen = Seen()
    daemon = Daemon(
        config,
        registry=CollectorRegistry(),
        pipeline=PipelineRunner(config.spark, settings, session=spark),
        listeners=[writer, seen],
    )
    job = daemon.jobs[0]

    def cycle() -> None:
        job.run_cycle()
        time.sleep(INTERVAL_S)

    try:
        stuck = hanging(topic, partition=1, backdate_ms=LATE_BACKDATE_MS)
        produce_plain(bootstrap, topic, partition=1, records=5)  # held back by the hanging one
        # A long timeout: on a loaded machine the cycles are slow, and the coordinator must
        # not abort it before it is late and then committed.
        with OpenTransaction(bootstrap, topic, partition=2, transaction_timeout_ms=600_000) as legit:
            legit.begin(records=2)
            for _ in range(MAX_CYCLES):
                cycle()
                now = seen.cycles[-1][1]
                if now.get((topic, 1)) is TxnClass.HANGING and now.get((topic, 2)) is TxnClass.LATE:
                    break
            else:
                pytest.fail(f"the scenario did not reach hanging + late: {seen.cycles}")
            cycle()

            monkeypatch.setenv("KAFKA_TXN_EXPORTER_HISTORY", str(history_dir))
            assert (
                main(
                    [
                        "abort",
                        "--bootstrap-server",
                        bootstrap,
                        "--topic",
                        topic,
                        "--partition",
                        "1",
                        "--start-offset",
                        str(stuck.start_offset),
                        "--yes",
                        "--output",
                        "json",
                    ]
                )
                == 0
            )
            err = capsys.readouterr().err
            audit_lines = [line for line in err.splitlines() if line.startswith('{"audit"')]
            assert len(audit_lines) == 1, err
            assert json.loads(audit_lines[0])["history"] == "written"
            cycle()
            cycle()
            legit.commit()
        cycle()
        cycle()
    finally:
        writer.close()
        daemon.stop()
    assert writer.writes_failed == 0 and writer.cycles_written == len(seen.cycles)

    report = run_report(capsys, history_dir, "json")
    hanging_times = seen.times((topic, 1), {TxnClass.HANGING, TxnClass.SUSPECTED_HANGING})
    late_times = seen.times((topic, 2), {TxnClass.LATE})
    interval_ms = INTERVAL_S * 1000 + max(
        b - a for (a, _), (b, _) in zip(seen.cycles, seen.cycles[1:], strict=False)
    )

    # The broker is shared by the session: other tests' transactions may linger on other topics.
    incidents = {(i["topic"], i["partition"]): i for i in report["incidents"] if i["topic"] == topic}
    assert set(incidents) == {(topic, 1), (topic, 2)}, report["incidents"]
    h, late = incidents[(topic, 1)], incidents[(topic, 2)]
    assert (h["producer_id"], h["start_offset"]) == (stuck.producer_id, stuck.start_offset)
    assert abs(h["first_seen_ms"] - hanging_times[0]) <= interval_ms
    assert abs(h["last_seen_ms"] - hanging_times[-1]) <= interval_ms
    assert [c["class"] for c in h["class_changes"]] == ["suspected_hanging", "hanging"]
    assert h["end"] == "aborted_by_abort"
    assert [(a["action"], a["dry_run"], a["result"]) for a in h["actions"]] == [("abort", False, "aborted")]
    assert late["transactional_id"] == legit.transactional_id
    assert abs(late["first_seen_ms"] - late_times[0]) <= interval_ms
    assert abs(late["last_seen_ms"] - late_times[-1]) <= interval_ms
    assert late["classes"] == ["late"] and late["end"] == "committed"
    assert late["actions"] == []

    (action,) = report["actions"]
    assert (action["action"], action["topic"], action["partition"], action["start_offset"]) == (
        "abort",
        topic,
        1,
        stuck.start_offset,
    )
    assert action["os_user"] and action["principal"] is None
    assert action["lso_before"] == stuck.start_offset
    assert action["lso_after"] > stuck.start_offset
    assert action["evidence"]["reason"]

    (ours,) = [t for t in report["topics"] if t["topic"] == topic]
    assert ours["peak_lso_lag"] >= 6
    (health,) = report["health"]["clusters"]
    assert health["cycles_complete"] + health["cycles_partial"] == len(seen.cycles)

    text = run_report(capsys, history_dir, "text")
    assert "aborted_by_abort" in text and "committed" in text

    page = tmp_path / "report.html"
    assert (
        main(
            [
                "report",
                "--history",
                str(history_dir),
                "--since",
                "1h",
                "--format",
                "html",
                "--output",
                str(page),
            ]
        )
        == 0
    )
    assert_plots_render(chromium, page, tmp_path)


def run_report(capsys: pytest.CaptureFixture[str], history_dir: Path, fmt: str) -> Any:
    capsys.readouterr()
    assert (
        main(["report", "--history", str(history_dir), "--since", "1h", "--cluster", "test", "--format", fmt])
        == 0
    )
    out = capsys.readouterr().out
    return json.loads(out) if fmt == "json" else out


class _Figures(html.parser.HTMLParser):
    """Counts the drawn SVG shapes inside each <figure id=...> of a DOM dump."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: dict[str, int] = {}
        self._figure: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure":
            self._figure = a.get("id") or "?"
            self.shapes[self._figure] = 0
        elif self._figure and tag in ("path", "use", "rect") and (a.get("d") or tag != "path"):
            self.shapes[self._figure] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None


def assert_plots_render(chromium: str, page: Path, tmp_path: Path) -> None:
    """Headless Chromium loads the page: the DOM it built holds both plots with shapes, and
    its screenshot shows the hanging class's colour (the Gantt bar) in pixels."""
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--user-data-dir=" + str(tmp_path / "chromium-profile"),
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    figures = _Figures()
    figures.feed(dom)
    assert figures.shapes.get("incident-gantt", 0) > 10, figures.shapes
    assert figures.shapes.get("lso-lag", 0) > 10, figures.shapes
    shot = tmp_path / "report.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    hanging_orange = (0xD5 / 255, 0x5E / 255, 0x00 / 255)
    close = (abs(pixels - hanging_orange) < 0.03).all(axis=-1)
    assert close.sum() > 200, "no Gantt bar of the hanging class in the screenshot"
