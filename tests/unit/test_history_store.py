"""The Parquet history on a local Spark: append and read back, compaction, retention, the
report over a fixture history, its renderings, and the ``report`` command's flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from exporter.cli import main
from exporter.history.audit import append_action, audit_entry
from exporter.history.cli import window_ms
from exporter.history.config import HistoryConfig
from exporter.history.render import to_html, to_json, to_text
from exporter.history.report import build_report
from exporter.history.rows import CycleRows
from exporter.history.schema import DATASETS
from exporter.history.store import HistoryStore
from exporter.history.writer import HistoryWriter
from tests.unit.history_fixtures import INTERVAL, T0, make, scenario
from tests.unit.test_history_rows import ABORT_PLAN

pytestmark = pytest.mark.spark
DAY = 86_400_000


def files(root: Path, dataset: str) -> list[Path]:
    return sorted((root / dataset).rglob("*.parquet"))


def write_scenario(
    spark: SparkSession, root: Path, *, shift_ms: int = 0, cluster: str = "prod", per_cycle: bool = False
) -> HistoryStore:
    """The fixture scenario, in one append per dataset (``per_cycle``: one per cycle, as the
    daemon's writer with batch_cycles 1), plus the abort's audit row between the last
    sighting of the hanging transaction and its closing."""
    store = HistoryStore(spark, HistoryConfig(path=str(root)))
    rows = CycleRows()
    batch: dict[str, list[tuple[object, ...]]] = {}
    for c in scenario():
        c.at_ms += shift_ms
        c.cluster = cluster
        for name, dataset_rows in rows.rows(*make(c)).items():
            if per_cycle:
                store.append(name, dataset_rows)
            else:
                batch.setdefault(name, []).extend(dataset_rows)
    for name, dataset_rows in batch.items():
        store.append(name, dataset_rows)
    entry = audit_entry(
        "abort", ABORT_PLAN, cluster=cluster, properties={}, now_ms=T0 + shift_ms + 3 * INTERVAL + 1000
    )
    append_action(HistoryConfig(path=str(root)), entry)
    return store


@pytest.fixture(scope="module")
def history(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> HistoryStore:
    return write_scenario(spark, tmp_path_factory.mktemp("history"))


@pytest.fixture(scope="module")
def report(history: HistoryStore) -> dict[str, Any]:
    return build_report(history, from_ms=T0 - DAY, to_ms=T0 + DAY, cluster="prod", now_ms=T0 + DAY)


def test_appends_land_partitioned_by_cluster_and_date(history: HistoryStore) -> None:
    root = Path(history.base)
    assert [p.parent.relative_to(root / "transactions").as_posix() for p in files(root, "transactions")] == [
        "cluster=prod/date=2026-11-18"
    ]
    assert history.read("cycles").count() == 8
    assert history.read("transactions").count() == 7


def test_a_dataset_never_written_reads_as_empty(spark: SparkSession, tmp_path: Path) -> None:
    store = HistoryStore(spark, HistoryConfig(path=str(tmp_path / "none")))
    assert store.read("closed").count() == 0


def test_the_report_lists_each_incident_with_its_timeline_and_end(report: dict[str, Any]) -> None:
    incidents = {(i["topic"], i["partition"]): i for i in report["incidents"]}
    assert set(incidents) == {("orders", 1), ("payments", 0)}
    hanging, late = incidents[("orders", 1)], incidents[("payments", 0)]
    assert (hanging["first_seen_ms"], hanging["last_seen_ms"]) == (T0, T0 + 3 * INTERVAL)
    assert [c["class"] for c in hanging["class_changes"]] == ["suspected_hanging", "hanging"]
    assert hanging["end"] == "aborted_by_abort"
    assert hanging["end_ms"] == T0 + 4 * INTERVAL
    assert [a["action"] for a in hanging["actions"]] == ["abort"]
    assert hanging["peak_duration_ms"] == 3_600_000 + 3 * INTERVAL
    assert (late["first_seen_ms"], late["last_seen_ms"]) == (T0, T0 + 2 * INTERVAL)
    assert late["end"] == "committed" and late["end_coordinator_state"] == "CompleteCommit"
    assert late["transactional_id"] == "payments-app" and late["actions"] == []


def test_applications_are_ranked_by_late_and_hanging_time(report: dict[str, Any]) -> None:
    ranked = [(a["transactional_id"], a["producer_id"]) for a in report["applications"]]
    assert ranked == [(None, 4001), ("payments-app", 5001)]
    hanging, late = report["applications"]
    assert hanging["hanging_ms"] == 4 * INTERVAL and hanging["late_ms"] == 0
    assert late["late_ms"] == 3 * INTERVAL


def test_topics_are_ranked_by_time_blocked_with_lag_percentiles(report: dict[str, Any]) -> None:
    topics = {t["topic"]: t for t in report["topics"]}
    assert [t["topic"] for t in report["topics"]] == ["orders", "payments"]
    assert topics["orders"]["blocked_ms"] == 4 * INTERVAL
    assert topics["payments"]["peak_lso_lag"] == 50
    assert topics["payments"]["lso_lag_p50"] == 50
    assert len(topics["payments"]["lag_series"]) == 3


def test_exporter_health_counts_cycles_and_finds_the_blind_spot(report: dict[str, Any]) -> None:
    (health,) = report["health"]["clusters"]
    assert (health["cycles_complete"], health["cycles_partial"]) == (7, 1)
    assert health["interval_ms"] == INTERVAL
    assert [(b["from_ms"], b["to_ms"], b["cycles_missing"]) for b in health["blind_spots"]] == [
        (T0 + 6 * INTERVAL, T0 + 11 * INTERVAL, 4)
    ]
    assert health["errors"] == [{"api": "ListOffsets", "error": "TIMEOUT", "count": 1}]


def test_the_report_renders_as_json_text_and_self_contained_html(report: dict[str, Any]) -> None:
    assert json.loads(to_json(report))["incidents"][0]["topic"] == "orders"
    text = to_text(report)
    assert "suspected_hanging > hanging" in text and "aborted_by_abort" in text
    page = to_html(report)
    assert page.count("<svg") == 2
    assert "id='incident-gantt'" in page and "id='lso-lag'" in page
    assert "<script" not in page and "src=" not in page and 'href="http' not in page


def test_a_window_outside_the_history_is_empty(history: HistoryStore) -> None:
    empty = build_report(history, from_ms=T0 + 5 * DAY, to_ms=T0 + 6 * DAY, cluster="prod")
    assert empty["empty"] and empty["incidents"] == []
    other = build_report(history, from_ms=T0 - DAY, to_ms=T0 + DAY, cluster="staging")
    assert other["empty"]


def test_compaction_leaves_one_file_per_hour_and_every_row(spark: SparkSession, tmp_path: Path) -> None:
    store = write_scenario(spark, tmp_path, per_cycle=True)
    before = {n: sorted(map(tuple, store.read(n).collect())) for n in ("cycles", "closed")}
    assert len(files(tmp_path, "cycles")) == 8
    assert store.compact("cycles", "prod", "2026-11-18") == 8
    assert store.compact("closed", "prod", "2026-11-18") == 2
    assert len(files(tmp_path, "cycles")) == 1  # the fixture spans one hour
    assert len(files(tmp_path, "closed")) == 1
    assert store.compact("cycles", "prod", "2026-11-18") == 0  # nothing left to do
    for name, rows in before.items():
        assert sorted(map(tuple, store.read(name).collect())) == rows


def test_compaction_of_one_day_keeps_the_other_days(spark: SparkSession, tmp_path: Path) -> None:
    write_scenario(spark, tmp_path, per_cycle=True)
    store = write_scenario(spark, tmp_path, shift_ms=DAY, per_cycle=True)
    store.compact("transactions", "prod", "2026-11-19")
    dates = sorted(p.parent.name for p in files(tmp_path, "transactions"))
    assert dates.count("date=2026-11-18") == 4 and dates.count("date=2026-11-19") == 1
    assert store.read("transactions").count() == 14


def test_retention_drops_whole_days_before_the_cutoff(spark: SparkSession, tmp_path: Path) -> None:
    for day in range(3):
        store = write_scenario(spark, tmp_path, shift_ms=day * DAY)
    dropped = store.drop_before("2026-11-20", DATASETS)
    assert len(dropped) == 2 * 6
    assert sorted({r["date"] for r in store.read("cycles").select("date").collect()}) == ["2026-11-20"]
    assert store.read("actions").count() == 1


def test_the_writer_appends_through_spark_and_survives_an_unwritable_path(
    spark: SparkSession, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the history should be")
    w = HistoryWriter(HistoryConfig(path=str(blocker)), lambda: spark, start=False)
    for c in scenario()[:2]:
        w(*make(c))
    assert not w.flush_once()
    assert w.writes_failed == 1 and w.buffered_cycles == 2
    # the operator fixes the path (here: the writer is pointed at a good one)
    good = HistoryWriter(HistoryConfig(path=str(tmp_path / "h")), lambda: spark, start=False)
    for c in scenario():
        good(*make(c))
    good.close()
    assert good.cycles_written == 8 and good.rows_written > 8
    assert HistoryStore(spark, HistoryConfig(path=str(tmp_path / "h"))).read("closed").count() == 2


# --- the command ------------------------------------------------------------------------------


def test_report_runs_end_to_end_from_the_command_line(
    history: HistoryStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "report",
                "--history",
                history.base,
                "--from",
                str(T0 - 1000),
                "--to",
                str(T0 + DAY),
                "--format",
                "json",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert {i["topic"] for i in json.loads(out.read_text())["incidents"]} == {"orders", "payments"}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    assert main(["report", "--history", history.base, "--since", "1h"]) == 0
    assert "no history in that window" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--since", "yesterday"], "--since: 'yesterday' is not a duration"),
        (["--from", "monday"], "--from: 'monday' is not a time"),
        (["--from", "2026-11-20T00:00:00Z", "--to", "2026-11-19T00:00:00Z"], "--from: must be before --to"),
        (["--since", "1h", "--from", "2026-11-19T00:00:00Z"], "--since and --from are mutually"),
        (["--format", "pdf"], "--format: invalid choice"),
        (["--output", "/nonexistent/dir/r.html"], "--output: directory '/nonexistent/dir'"),
    ],
)
def test_bad_report_flags_exit_2_naming_the_flag(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["report", "--history", "/tmp/h", *flags])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_report_without_a_history_source_or_section_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["report"])
    assert e.value.code == 2
    assert "one of --config.file or --history is required" in capsys.readouterr().err
    config = tmp_path / "c.yml"
    config.write_text("clusters:\n  - name: a\n    bootstrap_servers: h:9092\n")
    with pytest.raises(SystemExit):
        main(["report", "--config.file", str(config)])
    assert "no history: section" in capsys.readouterr().err
    config.write_text(
        "clusters:\n  - name: a\n    bootstrap_servers: h:9092\nhistory:\n  path: /h\n  retention: 1h\n"
    )
    assert main(["report", "--config.file", str(config)]) == 2
    assert "history.retention: must be at least 86400 s" in capsys.readouterr().err


def test_window_defaults_to_the_last_24_hours() -> None:
    import argparse

    args = argparse.Namespace(since=None, from_=None, to=None)
    assert window_ms(args, 10 * DAY) == (9 * DAY, 10 * DAY)


# --- the report tells the truth (issue 39) -------------------------------------------------------


def report_exit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(["report", *argv])
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_history_path_that_does_not_exist_or_is_no_history_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started for a path that is no history")

    monkeypatch.setattr("exporter.history.cli.run_report", no_run)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    (tmp_path / "empty").mkdir()
    for path, problem in (
        (tmp_path / "typo", "does not exist"),
        (a_file, "is not a directory"),
        (tmp_path / "empty", "is not a history (no cycles, "),
    ):
        code, _, err = report_exit(capsys, "--history", str(path), "--since", "1h")
        assert code == 2 and f"--history {path}: {problem}" in err, err
    config = tmp_path / "c.yml"
    config.write_text(
        f"clusters: [{{name: a, bootstrap_servers: 'h:1'}}]\nhistory: {{path: {tmp_path / 'typo'}}}\n"
    )
    code, _, err = report_exit(capsys, "--config.file", str(config))
    assert code == 2 and f"history.path {tmp_path / 'typo'} (--config.file {config}): does not exist" in err


def test_an_unwritable_output_exits_2_before_the_run(
    history: HistoryStore, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report ran before its output was checked")

    monkeypatch.setattr("exporter.history.cli.run_report", no_run)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for output, problem in (
        (tmp_path, f"{tmp_path} is a directory"),
        (a_file / "r.json", f"{a_file} is not a directory"),
    ):
        code, _, err = report_exit(capsys, "--history", history.base, "--output", str(output))
        assert code == 2 and f"--output: {problem}" in err, err


def test_an_output_on_a_read_only_file_system_exits_2_before_the_run(
    history: HistoryStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {made.stderr.decode().strip()}")
    try:
        code, _, err = report_exit(capsys, "--history", history.base, "--output", str(mount / "r.json"))
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert code == 2 and f"--output: cannot write to {mount}: Read-only file system" in err, err


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"not parquet at all " * 20}[how])


def test_corrupt_files_are_skipped_and_listed_and_the_rest_reported(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "history"
    write_scenario(spark, root, per_cycle=True)
    bad_cycle, bad_lag = files(root, "cycles")[0], files(root, "lso_lag")[0]
    corrupt(bad_cycle, "truncated")
    corrupt(bad_lag, "garbage")
    (root / "transactions" / "cluster=prod" / "notes.txt").write_text("a stray file")
    stray = next((root / "closed" / "cluster=prod").iterdir()) / "notes.txt"
    stray.write_text("another one, among the Parquet files")
    window = ("--from", str(T0 - DAY), "--to", str(T0 + DAY), "--cluster", "prod")
    code, out, err = report_exit(capsys, "--history", str(root), *window, "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    relative = sorted(str(p.relative_to(root)) for p in (bad_cycle, bad_lag))
    strays = [str(stray.relative_to(root)), "transactions/cluster=prod/notes.txt"]
    assert report["unreadable_files"] == sorted([*relative, *strays])
    assert "4 unreadable file(s) skipped" in err
    assert "Traceback" not in err and "Py4J" not in err
    (health,) = report["health"]["clusters"]
    assert health["cycles_complete"] + health["cycles_partial"] == 7, "the other cycles' files were read"
    assert {i["topic"] for i in report["incidents"]} == {"orders", "payments"}
    code, out, _ = report_exit(capsys, "--history", str(root), *window)
    assert code == 0 and "Unreadable files (4, skipped" in out and relative[0] in out


def test_a_remote_historys_files_are_checked_by_their_parquet_framing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The Hadoop file system's side of the check (the one an s3a:// history gets), here on
    local files read through Hadoop."""
    from exporter.history.store import _FileSystem

    root = tmp_path / "history"
    write_scenario(spark, root)
    good, bad, short = files(root, "closed")[0], files(root, "cycles")[0], files(root, "lso_lag")[0]
    corrupt(bad, "truncated")
    short.write_bytes(b"PAR1")
    fs = _FileSystem.of(spark, HistoryConfig(path=str(root)))
    assert fs.is_parquet(f"file://{good}")
    assert not fs.is_parquet(f"file://{bad}") and not fs.is_parquet(f"file://{short}")
    listed = fs.files(f"file://{root}/cycles")
    assert listed and all(p.startswith("file:") and "_SUCCESS" not in p for p in listed)
