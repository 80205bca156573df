"""The round contract (exporter.pipeline.rounds): several clusters in, each cluster's own
result out, exactly as its own cycle would compute it; one cluster's failure is its own."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from exporter.config.groups import BUILTIN_RULES, AttributionRule, GroupsConfig
from exporter.model import (
    ClusterSnapshot,
    CycleResult,
    GroupsCarry,
    PipelineMemory,
    PipelineSettings,
    TxnClass,
)
from exporter.pipeline.compute import ComputeStats, compute
from exporter.pipeline.rounds import ClusterRun, compute_round
from exporter.pipeline.session import LARGE_ROUND_CONF, _codegen_session, large_round
from tests.integration.spark_connect_cycles import RICH_GROUPS, RICH_SETTINGS, rich_snapshot
from tests.unit.test_pipeline import MIN, NOW, SEC, described, listed, offsets, producer, snapshot

pytestmark = pytest.mark.spark


def _hanging_cluster(name: str) -> ClusterRun:
    snap = replace(snapshot(producers=[producer()]), cluster=name)
    return ClusterRun(snap, None, NOW, settings=PipelineSettings(hanging_confirm_cycles=1))


def _ongoing_cluster(name: str) -> ClusterRun:
    snap = replace(
        snapshot(producers=[producer()], listed_txns=[listed()], txns=[described()]),
        cluster=name,
    )
    return ClusterRun(snap, None, NOW)


def test_a_round_gives_each_cluster_what_its_own_cycle_gives(spark: SparkSession) -> None:
    runs = [_hanging_cluster("a"), _ongoing_cluster("b")]
    round_ = compute_round(spark, runs)
    assert not round_.failures
    for run in runs:
        alone = compute(spark, run.snapshot, run.settings, run.memory, run.now_ms)
        assert round_.results[run.cluster] == alone
    assert [f.txn_class for f in round_.results["a"].findings] == [TxnClass.HANGING]
    assert round_.results["b"].findings == ()


def test_a_cluster_whose_input_fails_fails_only_its_own_cycle(spark: SparkSession) -> None:
    broken = _hanging_cluster("broken")
    unrepresentable = replace(broken.snapshot, partitions=(replace(offsets(), high_watermark=2**70),))
    runs = [replace(broken, snapshot=unrepresentable), _ongoing_cluster("fine")]
    round_ = compute_round(spark, runs)
    assert set(round_.failures) == {"broken"}
    assert set(round_.results) == {"fine"}


def test_a_round_holds_each_cluster_once(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="each cluster once"):
        compute_round(spark, [_ongoing_cluster("x"), _ongoing_cluster("x")])


def test_a_rounds_inputs_are_freed_when_it_ends_not_at_the_next_full_collection(spark: SparkSession) -> None:
    """Nothing of ours is in a reference cycle after a round (its context held itself once):
    the snapshots and remembered rows of a round go when it returns, not at the cycle
    collector's next full collection."""
    runs = [_hanging_cluster("a"), _ongoing_cluster("b")]
    compute_round(spark, runs)  # a first round: whatever Spark caches once is cached
    gc.collect()
    gc.disable()
    try:
        compute_round(spark, runs)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("exporter.")}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == set()


def test_a_rounds_checkpoints_leave_the_drivers_block_manager_once_its_rows_are_back(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classification that several outputs read, a large round's partition frame and the
    groups' compiled aggregation are checkpoints, whose blocks the driver would keep until a
    full collection of its heap found them unreachable (at 1M partitions ~160 MiB of the heap
    between rounds). None is left once the round has its rows."""
    from exporter.pipeline import compute as compute_module
    from exporter.pipeline.tables import Handover

    kept: list[object] = []
    keep = Handover.keep

    def counted(self: Handover, checkpoint: Any) -> Any:
        kept.append(checkpoint)
        return keep(self, checkpoint)

    monkeypatch.setattr(Handover, "keep", counted)
    monkeypatch.setattr(compute_module, "LARGE_ROUND_PARTITIONS", 1)
    driver = spark.sparkContext._jsc
    assert driver is not None
    before = set(driver.getPersistentRDDs().keys())
    outcome = compute_round(spark, [_run(name, 1, None) for name in FLEET])
    assert not outcome.failures
    assert len(kept) >= 3  # the classification, the partition frame, the groups' aggregation
    assert set(driver.getPersistentRDDs().keys()) <= before


# --- a fleet in one plan ---------------------------------------------------------------------

CUSTOM_RULES = (AttributionRule("late", r"^late-", application="late-app"), *BUILTIN_RULES)
#: Each cluster's own settings, consumer-group config and attribution rules: clusters that
#: differ in everything the plan reads per cluster still share the round's one plan.
FLEET: dict[str, tuple[PipelineSettings, GroupsConfig | None, tuple[AttributionRule, ...]]] = {
    "rich": (RICH_SETTINGS, RICH_GROUPS, BUILTIN_RULES),
    "strict": (
        PipelineSettings(hanging_confirm_cycles=4, max_findings=2, lso_lag_series="all"),
        GroupsConfig(enabled=True, blocked_after_cycles=1, max_group_series=1, max_blocked=0),
        CUSTOM_RULES,
    ),
    "plain": (PipelineSettings(late_padding_ms=10 * MIN, lso_lag_series="open"), None, BUILTIN_RULES),
    "blind": (PipelineSettings(hanging_confirm_cycles=1), RICH_GROUPS, BUILTIN_RULES),
}


def _fleet_snapshot(name: str, round_: int) -> ClusterSnapshot:
    """The rich snapshot (every class, KIP-588, consumer groups) as cluster ``name`` sees it
    in round ``round_``; ``blind`` cannot see every transactional id and one of its brokers
    did not answer ListTransactions."""
    snap = replace(rich_snapshot(min(round_, 2)), cluster=name, taken_at_ms=_now(name, round_))
    if name == "blind":
        snap = replace(snap, transactional_ids_visible=False, coordinators_listed=frozenset({1}))
    return snap


def _now(name: str, round_: int) -> int:
    """Each cluster's own clock: the rounds are 30 s apart, the clusters a few ms."""
    return NOW + (round_ - 1) * 30 * SEC + list(FLEET).index(name) * 7


def _run(name: str, round_: int, memory: PipelineMemory | None) -> ClusterRun:
    settings, groups, rules = FLEET[name]
    return ClusterRun(_fleet_snapshot(name, round_), memory, _now(name, round_), settings, groups, rules)


def _alone(spark: SparkSession, run: ClusterRun) -> CycleResult:
    return compute(
        spark, run.snapshot, run.settings, run.memory, run.now_ms, groups=run.groups, rules=run.rules
    )


def test_a_fleet_round_equals_each_clusters_own_cycles_over_rounds_with_one_cluster_skipped(
    spark: SparkSession,
) -> None:
    """Four clusters that differ in every per-cluster setting, over three rounds, memory
    carried from round to round; ``blind`` is not ready in round 2 (left out) and joins
    round 3 with the memory of its round 1. Each round is one Spark action, and every
    cluster's result is exactly what its own cycle gives on the same snapshot and memory."""
    memory: dict[str, PipelineMemory | None] = dict.fromkeys(FLEET)
    for round_ in (1, 2, 3):
        ready = [name for name in FLEET if not (round_ == 2 and name == "blind")]
        runs = [_run(name, round_, memory[name]) for name in ready]
        outcome = compute_round(spark, runs)
        assert not outcome.failures
        assert outcome.stats.actions == 1
        for run in runs:
            assert outcome.results[run.cluster] == _alone(spark, run), (round_, run.cluster)
            memory[run.cluster] = outcome.results[run.cluster].memory
    rich, strict, plain, blind = (outcome.results[name] for name in FLEET)
    # What the comparison rests on: the clusters' own settings showed.
    assert rich.groups is not None and rich.groups.blocked and plain.groups is None
    assert strict.groups is not None and len(strict.groups.lags) == 1 and strict.groups.blocked == ()
    assert len(strict.findings) == 2 < len(rich.findings)
    assert dict(strict.open_transactions_by_class)[TxnClass.SUSPECTED_HANGING] == 1
    assert dict(rich.open_transactions_by_class)[TxnClass.HANGING] == 1
    assert dict(blind.open_transactions_by_class)[TxnClass.HANGING] == 0
    assert len(strict.partitions) > len(rich.partitions)
    assert {f.application for f in strict.findings} != {f.application for f in rich.findings}


def test_a_cluster_whose_input_fails_the_round_fails_alone_and_a_failing_family_only_itself(
    spark: SparkSession,
) -> None:
    """``broken``'s offsets cannot be represented (the classification reads them): its cycle
    fails. ``bad-groups``' group offsets cannot be represented: only its consumer-group
    family fails, which keeps the memory it was given and leaves its outputs out; everything
    else of that cluster is its cycle without groups. ``rich`` is untouched."""
    first = {name: _run(name, 1, None) for name in ("rich", "strict")}
    before = compute_round(spark, list(first.values()))
    broken = replace(
        _run("rich", 2, None),
        snapshot=replace(
            _fleet_snapshot("rich", 2),
            cluster="broken",
            partitions=(replace(offsets(), high_watermark=2**70),),
        ),
    )
    strict = _run("strict", 2, before.results["strict"].memory)
    bad_offsets = tuple(replace(o, committed_offset=2**70) for o in strict.snapshot.group_offsets)
    bad_groups = replace(strict, snapshot=replace(strict.snapshot, group_offsets=bad_offsets))
    rich = _run("rich", 2, before.results["rich"].memory)

    outcome = compute_round(spark, [broken, bad_groups, rich])

    assert set(outcome.failures) == {"broken"}
    assert outcome.failures["broken"].startswith("OverflowError")
    assert outcome.results["rich"] == _alone(spark, rich)
    result = outcome.results["strict"]
    assert result.failed_families == ("groups",)
    assert result.groups is None
    assert result.memory.groups == before.results["strict"].memory.groups != GroupsCarry()
    without_groups = _alone(spark, replace(bad_groups, groups=None))
    assert replace(result, failed_families=()) == without_groups
    assert result.findings


def _calls_into_the_jvm(spark: SparkSession, runs: list[ClusterRun], monkeypatch: pytest.MonkeyPatch) -> int:
    """The py4j calls (commands that call a JVM method) of one round over ``runs``."""
    from py4j import clientserver

    calls = 0
    send = clientserver.ClientServerConnection.send_command

    def counted(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += command.startswith("c\n")
        return send(self, command, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(clientserver.ClientServerConnection, "send_command", counted)
        outcome = compute_round(spark, runs)
    assert not outcome.failures
    return calls


def test_a_rounds_plan_takes_as_many_calls_into_the_jvm_for_twelve_clusters_as_for_four(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet's four clusters (every per-cluster setting differs, so each is an array of
    the clusters' values, and the consumer-group family runs for some clusters only), and
    the same three times over: building the plan costs the same calls into the JVM. Each
    call is a round trip that waits on the JVM, so a cost per cluster would grow the fixed
    part of every round with the fleet (issue 37: a setting's array built of a literal per
    cluster took a few round trips per cluster)."""

    def fleet(copies: int) -> list[ClusterRun]:
        runs = []
        for k in range(copies):
            for name in FLEET:
                run = _run(name, 1, None)
                own = f"{name}-{k}"
                runs.append(replace(run, snapshot=replace(run.snapshot, cluster=own), now_ms=run.now_ms + k))
        return runs

    compute_round(spark, fleet(1))  # the first round of a shape loads what it needs once
    compute_round(spark, fleet(3))
    twelve = _calls_into_the_jvm(spark, fleet(3), monkeypatch)
    assert twelve == _calls_into_the_jvm(spark, fleet(1), monkeypatch)


def test_a_round_of_one_is_one_action_like_a_cycle(spark: SparkSession) -> None:
    run = _run("rich", 1, None)
    stats = ComputeStats()
    alone = compute(spark, run.snapshot, run.settings, None, run.now_ms, groups=run.groups, stats=stats)
    outcome = compute_round(spark, [run])
    assert outcome.results == {"rich": alone}
    assert outcome.stats.actions == stats.actions == 1


# --- a large round runs compiled -------------------------------------------------------------


def test_a_large_round_runs_compiled_and_equals_each_clusters_own_interpreted_cycles(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round of at least ``LARGE_ROUND_PARTITIONS`` partitions is planned and run with the
    large round's settings (code generation, a task per output table), its partition frame
    kept once and its clusters' values as arrays; every cluster's result, over rounds with
    memory carried, is still exactly its own interpreted cycle's, and the session's settings
    are as they were once the round is done."""
    from exporter.pipeline import compute as compute_module
    from exporter.pipeline import transport

    settings_at_collect: list[dict[str, str]] = []
    collect = transport.collect

    def watched(seconds: dict[str, float], out: Any) -> Any:
        settings_at_collect.append({key: str(spark.conf.get(key)) for key in LARGE_ROUND_CONF})
        return collect(seconds, out)

    monkeypatch.setattr(transport, "collect", watched)
    before = {key: str(spark.conf.get(key)) for key in LARGE_ROUND_CONF}
    assert before["spark.sql.codegen.wholeStage"] == "false"
    memory: dict[str, PipelineMemory | None] = dict.fromkeys(FLEET)
    for round_ in (1, 2):
        runs = [_run(name, round_, memory[name]) for name in FLEET]
        monkeypatch.setattr(compute_module, "LARGE_ROUND_PARTITIONS", 1)
        outcome = compute_round(spark, runs)
        monkeypatch.setattr(compute_module, "LARGE_ROUND_PARTITIONS", 10**12)
        assert settings_at_collect[-1] == LARGE_ROUND_CONF
        assert {key: str(spark.conf.get(key)) for key in LARGE_ROUND_CONF} == before
        assert not outcome.failures
        assert outcome.stats.actions == 1
        for run in runs:
            assert outcome.results[run.cluster] == _alone(spark, run), (round_, run.cluster)
            assert settings_at_collect[-1] == before
            memory[run.cluster] = outcome.results[run.cluster].memory
    assert any(r.findings for r in outcome.results.values())


def test_a_large_rounds_settings_hold_while_any_large_round_runs_and_then_are_as_they_were(
    spark: SparkSession,
) -> None:
    def whole_stage() -> str:
        return str(spark.conf.get("spark.sql.codegen.wholeStage"))

    before = whole_stage()
    union = str(spark.conf.get("spark.sql.unionOutputPartitioning"))  # Spark's default
    with large_round(spark, False):
        assert whole_stage() == before
    with large_round(spark, True):
        assert whole_stage() == "true"
        assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
        assert spark.conf.get("spark.sql.unionOutputPartitioning") == "false"
        with large_round(spark, True):
            assert whole_stage() == "true"
        assert whole_stage() == "true"  # the outer computation still runs
    assert whole_stage() == before
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    assert spark.conf.get("spark.sql.unionOutputPartitioning") == union


def test_a_large_round_compiles_no_class_again_when_only_the_clock_moved(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large round's clusters' values (the clock among them) are arrays handed to the
    compiled classes, not literals written into them: once rounds of the same shape have
    run, the next one finds every class in Spark's cache (with the clock as a number literal,
    every round compiled classes of its own). Without consumer groups: with them, a round
    still compiles a few classes (bench/results/fleet.md)."""
    from exporter.pipeline import compute as compute_module

    monkeypatch.setattr(compute_module, "LARGE_ROUND_PARTITIONS", 1)
    jvm: Any = spark._jvm
    metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiled() -> int:
        return int(metrics.METRIC_COMPILATION_TIME().getCount())

    memory: dict[str, PipelineMemory | None] = dict.fromkeys(FLEET)
    counts: list[int] = []
    for shift in range(4):  # the same snapshots; the clock moves by a round each time
        before = compiled()
        runs = [
            replace(run, now_ms=run.now_ms + shift * 30 * SEC, groups=None)
            for run in (_run(name, 3, memory[name]) for name in FLEET)
        ]
        outcome = compute_round(spark, runs)
        assert not outcome.failures
        memory.update({name: result.memory for name, result in outcome.results.items()})
        counts.append(compiled() - before)
    assert counts[0] > 0, counts  # the round ran compiled
    assert counts[-1] == 0, counts


def test_a_large_round_does_not_decide_where_the_compiled_steps_of_later_cycles_run(
    spark: SparkSession,
) -> None:
    """The consumer-group family's compiled step runs in a session with code generation of
    its own (``compiled_leaf``), chosen once per session. Asked first during a large round,
    whose session generates code only for the round, it is built there, and the choice is
    made (and kept) after it: later cycles, interpreted, still compile that step."""
    fresh = spark.newSession()
    with large_round(fresh, True):
        assert _codegen_session(fresh) is fresh
    child = _codegen_session(fresh)
    assert child is not fresh
    assert child.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert fresh.conf.get("spark.sql.codegen.wholeStage") == "false"
