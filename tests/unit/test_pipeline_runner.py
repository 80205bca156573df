"""PipelineRunner's supervision on a stand-in session (no JVM): deadlines, clusters in
parallel, health. The real JVM killed and paused under a running daemon is
tests/integration/test_spark_supervision.py."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.config import SparkConfig, parse_config
from exporter.daemon.pipeline import PipelineRunner, PipelineTimeoutError
from exporter.model import ClusterSnapshot, CycleResult, PipelineSettings
from exporter.pipeline.warmup import warmup_snapshot


class StandInSession:
    """Answers the runner's calls: tags, interruption, the liveness probe."""

    def __init__(self, *, alive: bool = True) -> None:
        self.alive = alive
        self.tags: list[str] = []
        self.interrupted: list[str] = []
        self.sparkContext = self
        self._jsc = self

    def sc(self) -> StandInSession:
        return self

    def isStopped(self) -> bool:  # noqa: N802 (the JVM's name)
        if not self.alive:
            threading.Event().wait()  # a hung JVM never answers
        return False

    def addTag(self, tag: str) -> None:  # noqa: N802
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        pass

    def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
        self.interrupted.append(tag)
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def snapshot(cluster: str) -> ClusterSnapshot:
    from dataclasses import replace

    return replace(warmup_snapshot(), cluster=cluster)


def result(snap: ClusterSnapshot) -> CycleResult:
    return CycleResult(cluster=snap.cluster, computed_at_ms=0)


def runner(compute: Any, *, session: Any = None, clock: Any = None, **spark: Any) -> PipelineRunner:
    kwargs: dict[str, Any] = {"compute_fn": compute}
    if clock is not None:
        kwargs["clock"] = clock
    return PipelineRunner(
        SparkConfig(**spark),
        PipelineSettings(),
        session=session or StandInSession(),
        interval_s=2.0,
        **kwargs,
    )


def test_a_slow_cluster_does_not_hold_back_another() -> None:
    release = threading.Event()
    entered = threading.Event()

    def compute(spark: Any, snap: ClusterSnapshot, *_: Any) -> CycleResult:
        if snap.cluster == "slow":
            entered.set()
            release.wait(30)
        return result(snap)

    r = runner(compute, pipeline_timeout_ms=60_000)
    slow = threading.Thread(target=r.compute, args=(snapshot("slow"), None, 0))
    slow.start()
    try:
        assert entered.wait(30)
        # While the slow cluster's run is still in Spark, the other one runs and returns.
        assert r.compute(snapshot("fast"), None, 0).cluster == "fast"
        assert slow.is_alive()
    finally:
        release.set()
        slow.join(30)


def test_a_run_past_its_deadline_raises_and_its_tagged_jobs_are_interrupted() -> None:
    session = StandInSession()
    hold = threading.Event()

    def compute(*_: Any) -> CycleResult:
        hold.wait(30)
        raise RuntimeError("cancelled")

    r = runner(compute, session=session, pipeline_timeout_ms=1000)
    try:
        with pytest.raises(PipelineTimeoutError, match="deadline of 1 s"):
            r.compute(snapshot("c"), None, 0)
    finally:
        hold.set()
    assert session.interrupted == session.tags[:1]
    assert session.interrupted[0].startswith("kte-c-")


def test_a_pipeline_error_reaches_the_caller_unchanged() -> None:
    def compute(*_: Any) -> CycleResult:
        raise ValueError("bad plan")

    with pytest.raises(ValueError, match="bad plan"):
        runner(compute).compute(snapshot("c"), None, 0)


def test_health_turns_503_after_failing_intervals_and_back_after_a_success() -> None:
    clock = Clock()
    failing = True

    def compute(_spark: Any, snap: ClusterSnapshot, *_: Any) -> CycleResult:
        if failing:
            raise RuntimeError("py4j: connection refused")
        return result(snap)

    r = runner(compute, clock=clock, unhealthy_after_intervals=2)
    failing = False
    r.compute(snapshot("c"), None, 0)
    assert r.health() == (True, "ok")
    failing = True
    with pytest.raises(RuntimeError):
        r.compute(snapshot("c"), None, 0)
    clock.now += 3.9  # within 2 intervals of 2 s since the last success
    assert r.health()[0]
    clock.now += 0.2
    healthy, why = r.health()
    assert not healthy
    assert "no pipeline run succeeded for 4 s (2 interval(s) allowed)" in why
    failing = False
    r.compute(snapshot("c"), None, 0)
    assert r.health() == (True, "ok")


def test_no_pipeline_call_at_all_is_healthy() -> None:
    """A Kafka outage means no snapshot, hence no pipeline call: a restart would not help."""
    clock = Clock()
    r = runner(lambda *_: None, clock=clock)
    clock.now += 3600
    assert r.health() == (True, "ok")


def test_the_default_deadline_follows_the_shortest_interval_with_a_floor() -> None:
    r = runner(lambda *_: None)
    r.use_interval(30)
    assert r.call_timeout_s == 90
    r.use_interval(2)
    assert r.call_timeout_s == 60
    assert runner(lambda *_: None, pipeline_timeout_ms=5000).call_timeout_s == 5


def test_spark_supervision_keys_are_validated() -> None:
    base = {"clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:9092"}]}
    config = parse_config(
        {
            **base,
            "spark": {
                "pipeline_timeout": "20s",
                "start_timeout": "2m",
                "unhealthy_after_intervals": 4,
                "connect_server_port": 15002,
            },
        },
        env={},
    )
    assert config.spark.pipeline_timeout_ms == 20_000
    assert config.spark.start_timeout_ms == 120_000
    assert config.spark.unhealthy_after_intervals == 4
    assert config.spark.connect_server_port == 15002
    from exporter.config import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config(
            {
                **base,
                "spark": {
                    "driver_memory": "256m",
                    "unhealthy_after_intervals": 0,
                    "connect_server_port": 80,
                    "pipeline_timeout": "10ms",
                },
            },
            env={},
        )
    text = str(e.value)
    assert "spark.driver_memory: '256m' is below the minimum 512m" in text
    assert "spark.unhealthy_after_intervals" in text
    assert "spark.connect_server_port: 80 is not a port" in text
    assert "spark.pipeline_timeout: must be at least 1000 ms" in text


@pytest.mark.parametrize("fails_at_stop", [False, True], ids=["run-goes-on", "run-fails-at-once"])
def test_stop_releases_a_caller_waiting_on_a_run_and_tells_it_the_pipeline_is_stopping(
    fails_at_stop: bool,
) -> None:
    """A cycle waiting for its run never holds the process's exit up to the deadline. When
    the stop tears the session down, the run may also fail at once, before its caller looked
    again: the caller hears that the pipeline is stopping either way (the daemon logs that in
    one line; a failure of the run would be logged with its traceback)."""
    from exporter.daemon.pipeline import PipelineUnavailableError

    hold = threading.Event()
    entered = threading.Event()

    def compute(*_: Any) -> CycleResult:
        entered.set()
        hold.wait(60)
        raise RuntimeError("SparkContext.dagScheduler() is null")

    r = runner(compute, pipeline_timeout_ms=600_000)
    call = lambda: r.compute(snapshot("c"), None, 0)  # noqa: E731
    outcome = stopped_while_running(r, call, entered, hold, fails_at_stop=fails_at_stop)
    assert isinstance(outcome, PipelineUnavailableError)


def stopped_while_running(
    r: PipelineRunner,
    call: Callable[[], Any],
    entered: threading.Event,
    hold: threading.Event,
    *,
    fails_at_stop: bool = False,
) -> BaseException | None:
    """``call`` on a caller thread, ``r`` stopped once its run has ``entered``; the run is let
    go (``hold``) once the caller is back, or at once (``fails_at_stop``, as a run fails
    when its session is torn down). What the caller got."""
    outcome: list[BaseException] = []

    def caller_run() -> None:
        try:
            call()
        except BaseException as e:
            outcome.append(e)

    caller = threading.Thread(target=caller_run)
    caller.start()
    try:
        assert entered.wait(30)
        r.stop()
        if fails_at_stop:
            hold.set()
        caller.join(30)
        assert not caller.is_alive()
    finally:
        hold.set()
    return outcome[0] if outcome else None


def test_a_round_failing_as_the_pipeline_stops_ends_quietly_and_is_not_computed_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C during a round tears the session down under its action, which then fails. That
    failure says nothing about the clusters: no cluster is computed again alone or family by
    family, and nothing is logged after the stop (the pipeline's own round, not a stand-in)."""
    from exporter.daemon.pipeline import PipelineUnavailableError
    from exporter.pipeline import rounds

    hold = threading.Event()
    entered = threading.Event()
    attempts: list[str | None] = []

    def torn_down(*_: Any, only: str | None = None, **__: Any) -> Any:
        attempts.append(only)
        entered.set()
        hold.wait(60)
        raise RuntimeError("An error occurred while calling o3914.getResult.")

    monkeypatch.setattr(rounds, "collect_round", torn_down)
    r = PipelineRunner(SparkConfig(), PipelineSettings(), session=StandInSession(), interval_s=2.0)
    outcome = stopped_while_running(r, lambda: r.compute_round(round_of("a", "b")), entered, hold)
    assert isinstance(outcome, PipelineUnavailableError)
    for thread in threading.enumerate():
        if thread.name == "pipeline-round":
            thread.join(30)
    assert attempts == [None]
    assert [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.WARNING] == []


# --- rounds: the same supervision for a round of several clusters ---------------------------


def round_of(*names: str) -> list[Any]:
    from exporter.pipeline.rounds import ClusterRun

    return [ClusterRun(snapshot(n), None, 0) for n in names]


def round_runner(round_fn: Any, *, session: Any = None, clock: Any = None, **spark: Any) -> PipelineRunner:
    kwargs: dict[str, Any] = {"round_fn": round_fn}
    if clock is not None:
        kwargs["clock"] = clock
    return PipelineRunner(
        SparkConfig(**spark),
        PipelineSettings(),
        session=session or StandInSession(),
        interval_s=2.0,
        **kwargs,
    )


def test_a_round_past_its_deadline_raises_and_its_tagged_jobs_are_interrupted() -> None:
    session = StandInSession()
    hold = threading.Event()

    def slow_round(*_: Any) -> Any:
        hold.wait(30)
        raise RuntimeError("cancelled")

    r = round_runner(slow_round, session=session, pipeline_timeout_ms=1000)
    try:
        with pytest.raises(
            PipelineTimeoutError, match=r"round of 4 cluster\(s\) \(a, b, c, \.\.\.\) passed its deadline"
        ):
            r.compute_round(round_of("a", "b", "c", "d"))
    finally:
        hold.set()
    assert session.interrupted == session.tags[:1]
    assert session.interrupted[0].startswith("kte-round-")


def test_a_round_that_computed_no_cluster_is_a_failed_run_one_that_computed_any_a_success() -> None:
    from exporter.pipeline.compute import ComputeStats
    from exporter.pipeline.rounds import RoundResult

    clock = Clock()
    failing: set[str] = set()

    def round_fn(_spark: Any, runs: Any) -> RoundResult:
        return RoundResult(
            results={r.cluster: result(r.snapshot) for r in runs if r.cluster not in failing},
            failures={r.cluster: "ValueError: bad" for r in runs if r.cluster in failing},
            stats=ComputeStats(),
        )

    r = round_runner(round_fn, clock=clock, unhealthy_after_intervals=2)
    failing = {"a"}
    outcome = r.compute_round(round_of("a", "b"))
    assert set(outcome.results) == {"b"} and set(outcome.failures) == {"a"}
    clock.now += 100
    assert r.health() == (True, "ok")  # no failed run at all: b computed
    failing = {"a", "b"}
    r.compute_round(round_of("a", "b"))
    clock.now += 4.1
    healthy, why = r.health()
    assert not healthy
    assert "every cluster of the round failed" in why


def test_a_pipeline_given_alone_runs_a_round_cluster_by_cluster_each_failure_its_own() -> None:
    def compute(_spark: Any, snap: ClusterSnapshot, *_: Any, **__: Any) -> CycleResult:
        if snap.cluster == "bad":
            raise ValueError("bad plan\nsecond line")
        return result(snap)

    outcome = runner(compute).compute_round(round_of("good", "bad"))
    assert set(outcome.results) == {"good"}
    assert outcome.failures == {"bad": "ValueError: bad plan"}


#: What a py4j error says when the driver cannot create its scratch directory: the Java
#: exception and its stack trace, many lines.
JAVA_START_FAILURE = (
    "An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
    ": java.io.IOException: Failed to get a temp directory under [/var/lib/kte/spark].\n"
    "\tat org.apache.spark.util.Utils$.getLocalDir(Utils.scala:1019)\n"
    "\tat org.apache.spark.SparkEnv$.create(SparkEnv.scala:402)\n"
)


def test_a_failed_start_is_summed_up_in_one_line() -> None:
    from exporter.daemon.pipeline import one_line

    assert one_line(RuntimeError(JAVA_START_FAILURE)) == (
        "java.io.IOException: Failed to get a temp directory under [/var/lib/kte/spark]."
    )
    denied = "java.nio.file.AccessDeniedException: /var/lib/kte/spark"
    caused = f"{JAVA_START_FAILURE}Caused by: {denied}\n\tat x\n"
    assert one_line(RuntimeError(caused)).endswith(f"(caused by {denied})")
    assert one_line(ValueError("bad\nworse")) == "ValueError: bad"
    assert "\n" not in one_line(RuntimeError("x" * 5000)) and len(one_line(RuntimeError("x" * 5000))) == 400


def test_a_local_dir_the_driver_cannot_use_is_named_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exporter.daemon.pipeline import local_dir_problem

    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    problem = local_dir_problem(SparkConfig(local_dir=str(blocker / "spark")))
    assert problem is not None
    assert f"(spark.local_dir) for uid {os.getuid()}: {blocker / 'spark'}: Not a directory" in problem
    assert local_dir_problem(SparkConfig(local_dir=str(tmp_path / "spark"))) is None
    assert (tmp_path / "spark").is_dir() and not list((tmp_path / "spark").iterdir())
    # Spark takes SPARK_LOCAL_DIRS over spark.local.dir; one usable directory is enough.
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{blocker / 'x'},{tmp_path / 'other'}")
    assert local_dir_problem(SparkConfig(local_dir=str(blocker / "spark"))) is None
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(blocker / "x"))
    assert "(SPARK_LOCAL_DIRS)" in (local_dir_problem(SparkConfig(local_dir=str(tmp_path))) or "")


def test_health_turns_503_once_the_configured_number_of_starts_failed_and_back_after_one_succeeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Connect session (no JVM of the test process is touched): the session factory fails
    as the JVM does; each failed start is one attempt, made when a cycle asks after back-off."""
    from exporter.daemon.pipeline import PipelineUnavailableError
    from exporter.pipeline import session as session_module

    starting_fails = True

    def spark_session(_config: SparkConfig, **_: Any) -> Any:
        if starting_fails:
            raise RuntimeError(JAVA_START_FAILURE)
        return StandInSession()

    monkeypatch.setattr(session_module, "spark_session", spark_session)
    clock = Clock()
    r = PipelineRunner(
        SparkConfig(connect_url="sc://127.0.0.1:1", unhealthy_after_failed_starts=2),
        PipelineSettings(),
        interval_s=2.0,
        clock=clock,
        compute_fn=lambda _spark, snap, *_: result(snap),
    )
    with pytest.raises(PipelineUnavailableError):
        r.start()
    assert r.health() == (True, "ok")  # one failed start of the two allowed
    clock.now += 1.5  # past the back-off: the next cycle tries again
    with pytest.raises(PipelineUnavailableError):
        r.compute(snapshot("c"), None, 0)
    healthy, why = r.health()
    assert not healthy
    assert why == (
        "Spark did not start: 2 attempt(s) in a row failed; last: starting Spark failed: "
        "java.io.IOException: Failed to get a temp directory under [/var/lib/kte/spark]."
    )
    starting_fails = False
    clock.now += 2.5
    assert r.compute(snapshot("c"), None, 0).cluster == "c"
    assert r.health() == (True, "ok")
    r.stop()
