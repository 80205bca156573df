"""The history's pure parts: the config section, the rows of a cycle, closed transactions
and how they ended, and the audit record."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar, cast

import pytest

from exporter.config.history import DAY_MS, HistoryConfig, parse_history_section
from exporter.history.audit import action_row, audit_entry, history_of
from exporter.history.rows import CycleRows, Rows
from exporter.history.schema import (
    ACTIONS,
    BY_NAME,
    CLOSED,
    DATASETS,
    TRANSACTIONS,
    ClosedRow,
    CycleRow,
    ErrorRow,
    LsoLagRow,
    Partitioned,
    TransactionRow,
)
from exporter.history.store import arrow_rows
from exporter.model import REREAD_MESSAGE, CollectionError, ListedTransaction, TxnClass
from tests.unit.history_fixtures import HANGING, LATE, T0, Cycle, make, scenario

# --- config -----------------------------------------------------------------------------------


def test_history_is_off_when_the_section_is_absent() -> None:
    assert parse_history_section(None) == (None, [])


def test_a_path_alone_gives_the_defaults() -> None:
    config, problems = parse_history_section({"path": "/var/lib/kte/history/"})
    assert problems == []
    assert config == HistoryConfig(path="/var/lib/kte/history")
    assert config.retention_ms == 30 * DAY_MS


def test_every_problem_is_named_by_key_without_echoing_values() -> None:
    config, problems = parse_history_section(
        {
            "retention": "forever",
            "compact_every": "1s",
            "buffer_cycles": 0,
            "batch_cycles": "x",
            "secret_key": "hunter2",
        }
    )
    assert config is None
    assert problems == [
        "history.secret_key: unknown key (allowed: batch_cycles, buffer_cycles, compact_every, "
        "path, retention)",
        "history.path: required (a directory or a file system URL such as s3a://bucket/prefix)",
        "history.retention: not a duration (use e.g. 30d, 12h, 90m)",
        "history.compact_every: must be at least 60 s",
        "history.buffer_cycles: must be between 1 and 100000",
        "history.batch_cycles: must be an integer",
    ]
    assert not any("hunter2" in p or "forever" in p for p in problems)


def test_a_section_that_is_not_a_mapping_is_refused() -> None:
    assert parse_history_section("s3a://b/h")[1] == [
        "history: must be a mapping (path, retention, compact_every, ...)"
    ]


def test_url_paths_are_remote_and_redacted_in_logs() -> None:
    config, _ = parse_history_section({"path": "s3a://key:secret@bucket/history"})
    assert config is not None and not config.is_local
    assert config.redacted_path == "s3a://***@bucket/history"
    local, _ = parse_history_section({"path": "file:///data/h", "retention": "7d"})
    assert local is not None and local.is_local and local.local_path == "/data/h"
    assert local.retention_ms == 7 * DAY_MS


# --- rows -------------------------------------------------------------------------------------


def _all_rows() -> list[Rows]:
    rows = CycleRows()
    return [rows.rows(*make(c)) for c in scenario()]


R = TypeVar("R", bound=Partitioned)


def rows_of(rows: Rows, record: type[R]) -> list[R]:
    """The rows of the dataset whose record is ``record``, typed as such."""
    (dataset,) = [d for d in DATASETS if d.record is record]
    found = rows.get(dataset.name, [])
    assert all(type(r) is record for r in found)
    return cast("list[R]", found)


def closed(rows: Rows) -> list[ClosedRow]:
    return rows_of(rows, ClosedRow)


def test_rows_match_their_dataset_schema() -> None:
    for cycle_rows in _all_rows():
        for name, rows in cycle_rows.items():
            for row in rows:
                assert type(row) is BY_NAME[name].record, name


def test_rows_go_to_arrow_by_column_name_and_a_row_of_another_dataset_is_refused() -> None:
    first = _all_rows()[0]
    table = arrow_rows(TRANSACTIONS, first["transactions"])
    assert table.schema == TRANSACTIONS.arrow_schema()
    assert table.to_pylist() == [dataclasses.asdict(r) for r in first["transactions"]]
    with pytest.raises(TypeError, match=r"closed: rows must be ClosedRow, not \['CycleRow'\]"):
        arrow_rows(CLOSED, first["cycles"])


def test_ongoing_transactions_and_zero_lag_partitions_are_not_stored() -> None:
    first = _all_rows()[0]
    stored = {(r.topic, r.partition) for r in rows_of(first, TransactionRow)}
    assert stored == {("orders", 1), ("payments", 0)}
    assert {(r.topic, r.partition) for r in rows_of(first, LsoLagRow)} == {("orders", 1), ("payments", 0)}
    (cycle,) = rows_of(first, CycleRow)
    assert (cycle.cluster, cycle.date, cycle.cycle_ms, cycle.snapshot_ms, cycle.outcome) == (
        "prod",
        "2026-11-18",
        T0,
        T0 - 500,
        "complete",
    )
    assert cycle.open_ongoing == 1


def test_a_partial_cycle_keeps_its_errors() -> None:
    third = _all_rows()[2]
    assert [r.outcome for r in rows_of(third, CycleRow)] == ["partial"]
    assert [(r.api, r.error, r.broker_id) for r in rows_of(third, ErrorRow)] == [
        ("ListOffsets", "TIMEOUT", 2)
    ]


def test_closed_transactions_are_reported_once_with_how_they_ended() -> None:
    named = [dataclasses.asdict(r) for rows in _all_rows() for r in closed(rows)]
    assert [(n["topic"], n["end"], n["last_class"], n["coordinator_state"]) for n in named] == [
        ("payments", "committed", "late", "CompleteCommit"),
        ("orders", "no_coordinator", "hanging", None),
    ]
    assert named[0]["last_seen_ms"] == T0 + 2 * 30_000 and named[0]["cycle_ms"] == T0 + 3 * 30_000


def test_a_transaction_on_an_unread_partition_is_not_called_closed() -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [HANGING])))
    lost = Cycle(T0 + 30_000, [], errors=[CollectionError("DescribeProducers", "TIMEOUT", 1)])
    assert rows.rows(*make(lost))["closed"] == []
    assert rows.tracked == 1
    assert [r.end for r in closed(rows.rows(*make(Cycle(T0 + 60_000, []))))] == ["no_coordinator"]


def test_a_transaction_on_a_topic_left_out_of_the_metadata_is_not_called_closed() -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [HANGING, LATE])))
    refused = CollectionError("Metadata", "TOPIC_AUTHORIZATION_FAILED", topic=HANGING.topic)
    later = rows.rows(*make(Cycle(T0 + 30_000, [LATE], errors=[refused])))
    assert later["closed"] == []
    assert rows.tracked == 2


def test_a_failed_re_read_does_not_hide_a_close_the_first_read_saw() -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [HANGING, LATE])))
    reread = CollectionError("DescribeProducers", "REQUEST_TIMED_OUT", 1, message=REREAD_MESSAGE)
    later = rows.rows(*make(Cycle(T0 + 30_000, [LATE], errors=[reread])))
    assert [(r.topic, r.end) for r in closed(later)] == [(HANGING.topic, "no_coordinator")]


@pytest.mark.parametrize(
    ("state", "producer_id", "end"),
    [
        ("CompleteAbort", 5001, "aborted"),
        ("PrepareCommit", 5001, "committed"),
        ("Ongoing", 5001, "ended"),
        ("Ongoing", 7777, "fenced"),
    ],
)
def test_the_end_of_a_late_transaction_follows_its_coordinator(
    state: str, producer_id: int, end: str
) -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [LATE])))
    listed = [ListedTransaction(1, "payments-app", producer_id, state)]
    ended = closed(rows.rows(*make(Cycle(T0 + 30_000, [], listed=listed))))
    assert [r.end for r in ended] == [end]


def test_a_late_transaction_whose_coordinator_is_silent_ended_unknown() -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [LATE])))
    assert [(r.end, r.coordinator_state) for r in closed(rows.rows(*make(Cycle(T0 + 30_000, []))))] == [
        ("unknown", None)
    ]


def test_a_transaction_turning_ongoing_is_watched_not_closed() -> None:
    rows = CycleRows()
    rows.rows(*make(Cycle(T0, [LATE])))
    from dataclasses import replace

    assert rows.rows(*make(Cycle(T0 + 30_000, [replace(LATE, txn_class=TxnClass.ONGOING)])))["closed"] == []
    assert rows.tracked == 1


# --- audit ------------------------------------------------------------------------------------

ABORT_PLAN: dict[str, Any] = {
    "action": "abort",
    "topic": "orders",
    "partition": 1,
    "leader": 1,
    "producer_id": 4001,
    "producer_epoch": 0,
    "coordinator_epoch": 0,
    "start_offset": 17,
    "start_time_ms": T0,
    "start_time_source": "batch_timestamp",
    "age_ms": 3_600_000,
    "reason": "coordinator_not_open",
    "reason_text": "its coordinator is Empty",
    "transactional_id": "kte-hanging-1",
    "lso_before": 17,
    "high_watermark_before": 18,
    "result": "aborted",
    "lso_after": 19,
    "high_watermark_after": 19,
}


def test_an_abort_is_audited_with_who_what_and_the_lso_before_and_after() -> None:
    entry = audit_entry(
        "abort",
        ABORT_PLAN,
        cluster="prod",
        properties={"sasl.username": "ops-admin", "sasl.password": "pw"},
        now_ms=T0,
    )
    assert entry["principal"] == "ops-admin" and entry["os_user"]
    assert (entry["topic"], entry["partition"], entry["producer_id"], entry["start_offset"]) == (
        "orders",
        1,
        4001,
        17,
    )
    assert (entry["lso_before"], entry["lso_after"], entry["dry_run"]) == (17, 19, False)
    assert entry["written"].startswith("WriteTxnMarkers ABORT to broker 1")
    assert entry["evidence"]["reason"] == "coordinator_not_open"
    assert "pw" not in json.dumps(entry)
    row = action_row(entry)
    assert type(row) is ACTIONS.record
    assert (row.cluster, row.date, row.at_ms, row.action) == ("prod", "2026-11-18", T0, "abort")


def test_a_dry_run_is_audited_as_writing_nothing() -> None:
    entry = audit_entry(
        "abort", {**ABORT_PLAN, "result": "dry_run"}, cluster="prod", properties={}, now_ms=T0
    )
    assert entry["dry_run"] and entry["written"] == "nothing (dry run)"
    assert entry["lso_after"] is None and entry["principal"] is None


def test_a_force_terminate_names_the_transactional_id() -> None:
    plan = {
        "action": "force-terminate",
        "result": "terminated",
        "new_producer_id": 9,
        "new_producer_epoch": 3,
        "before": {
            "transactional_id": "payments-app",
            "coordinator_id": 2,
            "producer_id": 9,
            "producer_epoch": 2,
            "state": "Ongoing",
        },
        "after": {"state": "CompleteAbort"},
    }
    entry = audit_entry("force-terminate", plan, cluster="prod", properties={}, now_ms=T0)
    assert (entry["transactional_id"], entry["producer_id"], entry["topic"]) == ("payments-app", 9, None)
    assert "InitProducerId(keepPreparedTxn=false)" in entry["written"]
    assert entry["evidence"]["before"]["state"] == "Ongoing"


def test_the_audit_history_comes_from_the_config_file_or_the_environment(tmp_path: Any) -> None:
    config = tmp_path / "c.yml"
    config.write_text("clusters: []\nhistory:\n  path: /h/from-file\n")
    assert history_of(str(config), env={}) == HistoryConfig(path="/h/from-file")
    assert history_of(None, env={"KAFKA_TXN_EXPORTER_HISTORY": "/h/env"}) == HistoryConfig(path="/h/env")
    assert history_of(None, env={}) is None


def test_every_dataset_is_documented_column_by_column() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "history.md").read_text()
    for dataset in DATASETS:
        assert f"### `{dataset.name}`" in doc, dataset.name
        for column in dataset.columns:
            assert f"| `{column.name}` | {column.kind} | {column.unit} |" in doc, (dataset.name, column.name)


def test_the_audit_log_line_is_one_json_line_beginning_with_its_action(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.history.audit import _log_line

    _log_line(audit_entry("abort", ABORT_PLAN, cluster="prod", properties={}, now_ms=T0))
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith('{"audit": "abort"') and json.loads(line)["lso_after"] == 19
