"""The daemon's rounds (exporter.daemon.rounds) on stand-in collectors and a stand-in engine:
due clusters collect in parallel and are computed in one pipeline call; a straggler is left
out (counted, said once in the line of the cycle that ends the streak) and joins a later
round while the others go on;
each cluster's failure is its own; clusters with different intervals join the rounds at
which they are due; idle clusters' Kafka clients are closed beyond the budget.

Real time with 1 s intervals: every wait is for a condition, bounded generously, and nothing
asserts how long anything took."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.config import SparkConfig, parse_config
from exporter.daemon.capacity import Costs, shortfall
from exporter.daemon.cycle import ClusterJob
from exporter.daemon.pipeline import PipelineRunner
from exporter.daemon.rounds import ClientBudget, RoundScheduler
from exporter.metrics.collector import ExporterMetrics
from exporter.metrics.state import StateStore
from exporter.model import ClusterSnapshot, CycleResult, PipelineSettings
from exporter.pipeline.compute import ComputeStats
from exporter.pipeline.rounds import ClusterRun, RoundResult
from tests.unit.test_pipeline_runner import StandInSession

BOUND_S = 60.0


class StandInAdmin:
    def __init__(self) -> None:
        self.releases = 0

    def release(self) -> None:
        self.releases += 1


class StandInCollector:
    """Answers at once, or when ``gate`` is set (a straggler)."""

    def __init__(self, name: str, gate: threading.Event | None = None) -> None:
        self.name = name
        self.gate = gate
        self.admin = StandInAdmin()
        self.collections = 0
        self.collecting = threading.Event()

    def collect(self, **_: Any) -> ClusterSnapshot:
        self.collecting.set()
        try:
            if self.gate is not None:
                assert self.gate.wait(BOUND_S), "the test never released the straggler"
            self.collections += 1
            return ClusterSnapshot(cluster=self.name, taken_at_ms=int(time.time() * 1000))
        finally:
            self.collecting.clear()

    def close(self) -> None:
        pass


class Engine:
    """The round function: records each round's clusters; fails the clusters named in
    ``failing`` (their own failure)."""

    def __init__(self, failing: Sequence[str] = ()) -> None:
        self.rounds: list[list[str]] = []
        self.failing = set(failing)
        self._changed = threading.Condition()

    def __call__(self, _spark: Any, runs: Sequence[ClusterRun]) -> RoundResult:
        results = {
            r.cluster: CycleResult(cluster=r.cluster, computed_at_ms=r.now_ms)
            for r in runs
            if r.cluster not in self.failing
        }
        failures = {r.cluster: "ValueError: bad input" for r in runs if r.cluster in self.failing}
        with self._changed:
            self.rounds.append(sorted(r.cluster for r in runs))
            self._changed.notify_all()
        return RoundResult(results=results, failures=failures, stats=ComputeStats())

    def wait_for(self, condition: Callable[[list[list[str]]], bool]) -> list[list[str]]:
        with self._changed:
            assert self._changed.wait_for(lambda: condition(self.rounds), timeout=BOUND_S), self.rounds
            return [list(r) for r in self.rounds]


class Fleet:
    """Jobs on stand-in collectors, a real PipelineRunner on a stand-in session, a scheduler."""

    def __init__(
        self, engine: Engine, clusters: dict[str, str], stragglers: Sequence[str] = (), workers: int = 4
    ) -> None:
        config = parse_config(
            {
                "clusters": [
                    {"name": n, "bootstrap_servers": "127.0.0.1:1", "interval": i, "request_timeout": "100ms"}
                    for n, i in clusters.items()
                ]
            },
            env={},
        )
        self.registry = CollectorRegistry()
        self.store = StateStore(list(clusters))
        self.metrics = ExporterMetrics(self.registry, list(clusters))
        self.pipeline = PipelineRunner(
            SparkConfig(), PipelineSettings(), session=StandInSession(), interval_s=1.0, round_fn=engine
        )
        self.gates = {name: threading.Event() for name in stragglers}
        self.collectors = {c.name: StandInCollector(c.name, self.gates.get(c.name)) for c in config.clusters}
        self.jobs = [
            ClusterJob(c, self.collectors[c.name], self.pipeline, self.store, self.metrics)  # type: ignore[arg-type]
            for c in config.clusters
        ]
        self.scheduler = RoundScheduler(self.pipeline, workers=workers, clients_kept_open=16)

    def computed(self, engine: Engine, condition: Callable[[list[list[str]]], bool]) -> list[list[str]]:
        """The engine's rounds once ``condition`` holds and those rounds are published."""
        rounds = engine.wait_for(condition)
        assert self.scheduler.wait_rounds(len(rounds), BOUND_S)
        return rounds

    def skipped(self, name: str) -> float:
        return (
            self.registry.get_sample_value("kafka_txn_exporter_cycles_skipped_total", {"kafka_cluster": name})
            or 0.0
        )

    def cycles(self, name: str, result: str) -> float:
        return (
            self.registry.get_sample_value(
                "kafka_txn_exporter_cycles_total", {"kafka_cluster": name, "result": result}
            )
            or 0.0
        )


@pytest.fixture
def fleets() -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def factory(
        engine: Engine, clusters: dict[str, str], stragglers: Sequence[str] = (), workers: int = 4
    ) -> Fleet:
        fleet = Fleet(engine, clusters, stragglers, workers)
        made.append(fleet)
        return fleet

    yield factory
    for fleet in made:
        for gate in fleet.gates.values():
            gate.set()
        fleet.scheduler.stop()
        for job in fleet.jobs:
            job.close()
        fleet.pipeline.stop()
        assert fleet.scheduler.join(BOUND_S)
        fleet.scheduler.close()


def test_clusters_due_together_are_computed_in_one_pipeline_call(fleets: Callable[..., Fleet]) -> None:
    engine = Engine()
    fleet = fleets(engine, {"a": "1h", "b": "1h", "c": "1h"})
    fleet.scheduler.start(fleet.jobs)
    rounds = fleet.computed(engine, lambda r: len(r) >= 1)
    assert rounds[0] == ["a", "b", "c"]
    assert [fleet.cycles(n, "complete") for n in "abc"] == [1, 1, 1]
    assert all(fleet.store.get(n).up for n in "abc")


def test_a_straggler_is_left_out_counted_and_joins_a_later_round_while_the_others_go_on(
    fleets: Callable[..., Fleet], caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine()
    fleet = fleets(engine, {"fast": "1s", "slow": "1s"}, stragglers=["slow"])
    with caplog.at_level(logging.INFO, logger="exporter.daemon"):
        fleet.scheduler.start(fleet.jobs)
        # While slow's collection hangs, fast is computed round after round without it.
        rounds = fleet.computed(engine, lambda r: len(r) >= 3)
        assert all(r == ["fast"] for r in rounds)
        assert fleet.store.get("fast").up
        assert not fleet.store.get("slow").up
        assert fleet.skipped("slow") >= 2  # due while in flight, and left out of its round
        fleet.collectors["slow"].gate = None  # its next collections answer at once
        fleet.gates["slow"].set()
        fleet.computed(engine, lambda r: sum("slow" in x for x in r) >= 2)
        assert fleet.cycles("slow", "complete") >= 2
        assert fleet.store.get("slow").up
    # Every skip is in the metric; the log says them once, in the line of the cycle that
    # ended the streak (its snapshot's late round), never a line per skip.
    lines = [r.getMessage() for r in caplog.records if "cycle for cluster slow" in r.getMessage()]
    said = [int(m.group(1)) for line in lines if (m := re.search(r"(\d+) scheduled run\(s\) skipped", line))]
    assert said and sum(said) <= fleet.skipped("slow")
    assert said[0] >= 2
    assert not [line for line in lines if "skipped" in line and "scheduled run(s) skipped" not in line]


def test_a_clusters_own_failure_fails_only_its_cycle(fleets: Callable[..., Fleet]) -> None:
    engine = Engine(failing=["broken"])
    fleet = fleets(engine, {"broken": "1h", "fine": "1h"})
    fleet.scheduler.start(fleet.jobs)
    fleet.computed(engine, lambda r: len(r) >= 1)
    assert fleet.cycles("broken", "failed") == 1
    assert fleet.cycles("fine", "complete") == 1
    assert not fleet.store.get("broken").up
    assert fleet.store.get("fine").up
    assert fleet.pipeline.health() == (True, "ok")


def test_clusters_with_different_intervals_join_the_rounds_at_which_they_are_due(
    fleets: Callable[..., Fleet],
) -> None:
    engine = Engine()
    fleet = fleets(engine, {"often": "1s", "seldom": "1h"})
    fleet.scheduler.start(fleet.jobs)
    rounds = fleet.computed(engine, lambda r: len(r) >= 4)
    assert rounds[0] == ["often", "seldom"]
    assert all(r == ["often"] for r in rounds[1:])
    assert fleet.collectors["seldom"].collections == 1


def test_a_cluster_alone_is_a_round_of_one_through_run_cycle(fleets: Callable[..., Fleet]) -> None:
    engine = Engine()
    fleet = fleets(engine, {"solo": "1h"})
    fleet.jobs[0].run_cycle()
    assert engine.rounds == [["solo"]]
    assert fleet.cycles("solo", "complete") == 1


def test_kafka_clients_beyond_the_budget_are_closed_least_recent_first_never_in_use() -> None:
    class Job:
        def __init__(self, name: str, in_use: bool = False) -> None:
            self.cluster = type("C", (), {"name": name})()
            self.released = 0
            self.in_use = in_use

        def release_clients(self) -> bool:
            if self.in_use:
                return False
            self.released += 1
            return True

    budget = ClientBudget(keep=2)
    a, b, c, d = Job("a"), Job("b", in_use=True), Job("c"), Job("d")
    for job in (a, b, c):
        budget.collected(job)  # type: ignore[arg-type]
    assert (a.released, b.released, c.released) == (1, 0, 0)
    budget.collected(d)  # type: ignore[arg-type]
    assert b.released == 0  # in use: its collection makes it the most recent again
    budget.collected(b)  # type: ignore[arg-type]
    assert c.released == 1
    none_kept = ClientBudget(keep=0)
    none_kept.collected(a)  # type: ignore[arg-type]
    assert a.released == 2


def test_the_capacity_check_names_what_does_not_fit() -> None:
    costs = Costs(collect_s=0.5, round_fixed_s=0.0, round_per_cluster_s=0.1)
    assert shortfall([30.0] * 100, 8, costs) is None
    problem = shortfall([30.0] * 1000, 8, costs)
    assert problem is not None
    assert "their collections need 16.7 workers (collection.workers: 8)" in problem
    assert "their rounds need the pipeline 3.3 times over" in problem
    fixed = Costs(collect_s=0.1, round_fixed_s=2.0, round_per_cluster_s=0.0)
    assert shortfall([1.0, 3600.0], 8, fixed) == "their rounds need the pipeline 2.0 times over"


def test_a_fleet_that_cannot_fit_is_warned_about_at_start(
    fleets: Callable[..., Fleet], caplog: pytest.LogCaptureFixture
) -> None:
    fleet = fleets(Engine(), {f"c{i}": "1s" for i in range(20)})
    fleet.scheduler.replace(fleet.jobs)
    with caplog.at_level(logging.WARNING):
        problem = fleet.scheduler.estimate()
    assert problem is not None
    assert "20 cluster(s) cannot all be cycled within their interval on this process, as estimated" in (
        caplog.text
    )
    small = fleets(Engine(), {"one": "30s"})
    small.scheduler.replace(small.jobs)
    assert small.scheduler.estimate() is None


def test_collections_still_queued_at_stop_end_their_cycles_at_once(fleets: Callable[..., Fleet]) -> None:
    names = [f"c{i}" for i in range(6)]
    fleet = fleets(Engine(), dict.fromkeys(names, "1h"), stragglers=names, workers=1)
    fleet.scheduler.start(fleet.jobs)
    busy = [c for c in fleet.collectors.values() if c.collecting.wait(0.05)]
    deadline = time.monotonic() + BOUND_S
    while not busy:
        assert time.monotonic() < deadline
        busy = [c for c in fleet.collectors.values() if c.collecting.wait(0.05)]
    fleet.scheduler.stop()
    # One collection runs (its worker is the only one); the five queued behind it are dropped.
    queued = [job for job in fleet.jobs if job.cluster.name not in {c.name for c in busy}]
    assert len(queued) == 5
    assert all(job.wait_idle(BOUND_S) for job in queued)
    assert sum(c.collections for c in fleet.collectors.values()) == 0
