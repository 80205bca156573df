"""``state_dir``: a restarted exporter goes on from the pipeline memory its predecessor saved
(confirmations, markers-pending and blocked-consumer clocks), so its pages do not resolve
and page again; a memory too old, torn or foreign is never used."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import ConfigError, parse_config
from exporter.daemon.cycle import ClusterJob
from exporter.daemon.memory_store import FORMAT_VERSION, MemoryStore, max_age_ms
from exporter.metrics.collector import ExporterMetrics
from exporter.metrics.state import StateStore
from exporter.model import (
    ClusterSnapshot,
    CoordinatorCount,
    CoordinatorOpenSince,
    CycleResult,
    Finding,
    GroupAtLso,
    GroupsCarry,
    HangingCandidate,
    HangingReason,
    LsoHistory,
    PipelineMemory,
    PipelineSettings,
    PreparingTransaction,
    StartTimeSource,
    TxnClass,
    WatchedTransaction,
)
from exporter.pipeline.compute import ComputeStats
from exporter.pipeline.rounds import ClusterRun, RoundResult

NOW = 1_700_000_000_000
MIN = 60_000

FINDING = Finding(
    topic="orders",
    partition=3,
    broker_id=1,
    producer_id=4001,
    producer_epoch=7,
    coordinator_epoch=2,
    start_offset=120,
    last_timestamp_ms=NOW - 30 * MIN,
    start_time_ms=NOW - 31 * MIN,
    start_time_source=StartTimeSource.BATCH_TIMESTAMP,
    duration_ms=31 * MIN,
    txn_class=TxnClass.HANGING,
    late=True,
    hanging_reason=HangingReason.COORDINATOR_NOT_OPEN,
    transactional_id="order-enricher-1",
    coordinator_id=2,
    coordinator_state="CompleteCommit",
    transaction_timeout_ms=60_000,
    application="order-enricher",
)
MEMORY = PipelineMemory(
    candidates=(HangingCandidate(FINDING, 4),),
    watched=(WatchedTransaction("t-1", 1, 9, 0, NOW + MIN, NOW),),
    timeout_aborts_total=(CoordinatorCount(1, 5),),
    preparing=(PreparingTransaction(2, "t-2", 10, "PrepareCommit", NOW - 3 * MIN),),
    coordinator_open=(CoordinatorOpenSince(1, NOW - 20 * MIN, None, NOW - MIN),),
    groups=GroupsCarry(
        lso_history=(LsoHistory("orders", 3, 120, 6),),
        at_lso=(GroupAtLso("billing", "orders", 3, 120, NOW - 8 * MIN),),
    ),
)


def test_a_saved_memory_comes_back_whole_but_the_counts_since_the_process_started(tmp_path: Path) -> None:
    store = MemoryStore(str(tmp_path / "state"))
    store.save("prod/eu", MEMORY, NOW)
    # One file per cluster, named safely; no temporary file left behind.
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["prod%2Feu.json"]
    restored = store.load("prod/eu", NOW + 2 * MIN, max_age_ms(30_000))
    assert restored == PipelineMemory(
        candidates=MEMORY.candidates,
        watched=MEMORY.watched,
        preparing=MEMORY.preparing,
        coordinator_open=MEMORY.coordinator_open,
        groups=MEMORY.groups,
    )
    assert store.load("other", NOW, max_age_ms(30_000)) is None


def test_a_memory_older_than_three_intervals_and_five_minutes_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(str(tmp_path))
    store.save("prod", MEMORY, NOW)
    assert max_age_ms(30_000) == 5 * MIN
    assert max_age_ms(10 * MIN) == 30 * MIN
    assert store.load("prod", NOW + 5 * MIN, max_age_ms(30_000)) is not None
    with caplog.at_level(logging.INFO):
        assert store.load("prod", NOW + 5 * MIN + 1, max_age_ms(30_000)) is None
    assert "older than 300 s" in caplog.text
    assert store.load("prod", NOW - 6 * MIN, max_age_ms(30_000)) is None  # the clock went back


def test_a_memory_dated_in_the_future_is_ignored_saying_so_a_clock_skew_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(str(tmp_path))
    store.save("prod", MEMORY, NOW + 3_000 * 365 * 86_400_000)  # a clock once set far ahead
    with caplog.at_level(logging.INFO):
        assert store.load("prod", NOW, max_age_ms(30_000)) is None
    assert "ignored: dated 94608000000 s in the future of this clock" in caplog.text
    assert " -" not in caplog.text, "no negative age"
    store.save("prod", MEMORY, NOW + 30_000)  # another node's clock, 30 s ahead
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert store.load("prod", NOW, max_age_ms(30_000)) is not None
    assert "saved 0 s ago" in caplog.text


def test_the_rename_is_made_durable_by_syncing_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    MemoryStore(str(tmp_path)).save("prod", MEMORY, NOW)
    assert synced == ["file", "directory"]


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"version": FORMAT_VERSION + 1, "cluster": "prod", "saved_at_ms": NOW, "memory": {}}),
        json.dumps({"version": FORMAT_VERSION, "cluster": "staging", "saved_at_ms": NOW, "memory": {}}),
        json.dumps(
            {"version": FORMAT_VERSION, "cluster": "prod", "saved_at_ms": NOW, "memory": {"candidates": [{}]}}
        ),
        json.dumps(
            {
                "version": FORMAT_VERSION,
                "cluster": "prod",
                "saved_at_ms": NOW,
                "memory": {
                    "preparing": [
                        {
                            "coordinator_id": "2",
                            "transactional_id": "t",
                            "producer_id": 1,
                            "state": "PrepareCommit",
                            "since_ms": NOW,
                        }
                    ]
                },
            }
        ),
        "\udcff not utf-8",
        '{"version": 1, "cluster": "prod", "saved_at_ms": 1e400, "memory": {}}',
        "[" * 100_000,
    ],
    ids=[
        "torn",
        "other-version",
        "other-cluster",
        "missing-field",
        "wrong-type",
        "not-utf-8",
        "huge-number",
        "deep-nesting",
    ],
)
def test_a_file_that_is_not_this_clusters_memory_is_ignored_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    store = MemoryStore(str(tmp_path))
    store.path("prod").write_bytes(content.encode("utf-8", "surrogateescape"))
    with caplog.at_level(logging.WARNING):
        assert store.load("prod", NOW, max_age_ms(30_000)) is None
    assert "ignored" in caplog.text


def test_a_state_dir_that_cannot_be_written_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as e:
        MemoryStore(str(tmp_path / "file" / "state"))
    assert e.value.problems[0].startswith(f"state_dir: cannot write to {tmp_path / 'file' / 'state'}")


class _Collector:
    def collect(self, **_: Any) -> ClusterSnapshot:
        return ClusterSnapshot(cluster="prod", taken_at_ms=NOW)

    def close(self) -> None:
        pass


class _Pipeline:
    """Hands each cycle the memory it was given with one more confirmation."""

    settings = PipelineSettings()

    def __init__(self) -> None:
        self.given: list[PipelineMemory | None] = []

    def compute_round(self, runs: list[ClusterRun]) -> RoundResult:
        results = {r.cluster: self.compute(r.snapshot, r.memory, r.now_ms) for r in runs}
        return RoundResult(results=results, failures={}, stats=ComputeStats())

    def compute(self, snapshot: ClusterSnapshot, memory: PipelineMemory | None, now_ms: int, **_: Any) -> Any:
        self.given.append(memory)
        cycles = memory.candidates[0].cycles if memory is not None else 0
        return CycleResult(
            cluster="prod",
            computed_at_ms=now_ms,
            memory=PipelineMemory(candidates=(HangingCandidate(FINDING, cycles + 1),)),
        )


def _job(state_dir: Path, pipeline: _Pipeline) -> ClusterJob:
    config = parse_config(
        {"clusters": [{"name": "prod", "bootstrap_servers": "127.0.0.1:1"}], "state_dir": str(state_dir)},
        env={},
    )
    job = ClusterJob(
        config.clusters[0],
        _Collector(),  # type: ignore[arg-type]
        pipeline,  # type: ignore[arg-type]
        StateStore(["prod"]),
        ExporterMetrics(CollectorRegistry(), ["prod"]),
        clock=lambda: NOW / 1000,
    )
    assert config.state_dir is not None
    job.restore_memory(MemoryStore(config.state_dir))
    return job


def test_a_restarted_daemon_goes_on_from_the_memory_its_predecessor_saved(tmp_path: Path) -> None:
    before = _Pipeline()
    job = _job(tmp_path, before)
    job.run_cycle()
    job.run_cycle()
    assert [m.candidates[0].cycles if m else None for m in before.given] == [None, 1]

    after = _Pipeline()  # a new process: nothing in memory but what the file holds
    restarted = _job(tmp_path, after)
    restarted.run_cycle()
    assert [m.candidates[0].cycles if m else None for m in after.given] == [2]
