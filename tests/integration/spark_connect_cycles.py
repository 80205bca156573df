"""The cycles :mod:`tests.integration.test_spark_connect` runs on both kinds of session.

Imported by the test (classic local session) and run as a program in a separate Python
process, where it is a Spark Connect client (a Connect client and a classic session do not
mix in one process)::

    python -m tests.integration.spark_connect_cycles sc://127.0.0.1:PORT

prints one JSON document on stdout: ``{"session": ..., "jvm_in_client": ..., "results": [...]}``
with :func:`comparable` of every :class:`CycleResult`, in the order of :data:`CYCLES`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

from exporter.config.groups import GroupsConfig
from exporter.model import (
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    BatchTimestamp,
    BrokerConfig,
    ClusterSnapshot,
    CollectionError,
    CycleResult,
    GroupOffset,
    PipelineMemory,
    PipelineSettings,
)
from exporter.pipeline.rounds import ClusterRun, RoundResult
from tests.unit.test_pipeline import (
    DAY,
    MIN,
    NOW,
    SEC,
    described,
    listed,
    offsets,
    producer,
    snapshot,
)

#: Confirmation over two cycles, and "late" as soon as the broker's max timeout is passed.
RICH_SETTINGS = PipelineSettings(hanging_confirm_cycles=2, late_padding_ms=0)
#: The consumer-group family on, per partition too; blocked after two cycles at the LSO.
RICH_GROUPS = GroupsConfig(enabled=True, per_partition=True, blocked_after_cycles=2)


def rich_snapshot(cycle: int) -> ClusterSnapshot:
    """Every class at once, on two brokers. Cycle 1 and cycle 2 are 30 s apart:

    * ``t-0`` pid 100: no coordinator lists it: suspected hanging, then hanging (start time
      from the batch timestamp);
    * ``t-1`` pid 200: owned, open 30 min against a 10 min broker max timeout: late;
    * ``u-0`` pid 300: owned KIP-939 two-phase-commit transaction open for a day;
    * ``u-1`` pid 400: owned, 10 s old: ongoing;
    * ``t-2`` pid 500: listed, DescribeTransactions failed: unknown (cycle 1 only);
    * ``slow`` (coordinator only): Ongoing past its deadline in cycle 1, aborted by the
      coordinator with a bumped epoch in cycle 2 (a KIP-588 timeout abort);
    * LSO lag on several partitions, one partition whose offsets were not read, and a
      collection error in cycle 2;
    * consumer groups (:data:`RICH_GROUPS`): ``reader-rc`` committed at t-0's LSO (blocked by
      pid 100 in cycle 2) and behind it on t-1 with a pending transactional offset commit,
      ``reader-ru`` past t-0's LSO (read_uncommitted: never blocked), ``idle`` with nothing
      committed.
    """
    producers = [
        producer("t", 0, pid=100, start=100, last_ts=NOW - 3 * MIN),
        producer("t", 1, pid=200, start=40, last_ts=NOW - 2 * MIN),
        producer("u", 0, pid=300, start=7, last_ts=NOW - 5 * MIN, broker=2),
        producer("u", 1, pid=400, start=12, last_ts=NOW - 5 * SEC, broker=2),
    ]
    listed_txns = [
        listed("late-tx", 200),
        listed("twopc-tx", 300, coord=2),
        listed("ok-tx", 400, coord=2),
    ]
    txns = [
        described("late-tx", pid=200, parts=[("t", 1)], start=NOW - 30 * MIN, timeout=MIN),
        described(
            "twopc-tx",
            pid=300,
            parts=[("u", 0)],
            start=NOW - DAY,
            timeout=TWO_PHASE_COMMIT_TIMEOUT_MS,
            coord=2,
        ),
        described("ok-tx", pid=400, parts=[("u", 1)], start=NOW - 10 * SEC, coord=2),
    ]
    errors: list[CollectionError] = []
    if cycle == 1:
        producers.append(producer("t", 2, pid=500, start=3))
        listed_txns += [listed("broken-tx", 500), listed("slow", 600)]
        txns += [
            described("broken-tx", pid=500, error="COORDINATOR_NOT_AVAILABLE", state="", parts=()),
            described("slow", pid=600, epoch=5, parts=(), start=NOW - 2 * MIN, timeout=MIN),
        ]
    else:
        listed_txns.append(listed("slow", 600, state="CompleteAbort"))
        txns.append(described("slow", pid=600, epoch=6, state="CompleteAbort", parts=()))
        errors.append(
            CollectionError(
                "DescribeProducers", "TIMEOUT", broker_id=2, topic="w", partition=0, message="timed out"
            )
        )
    groups = (
        GroupOffset("reader-rc", "t", 0, 100, 1, "Stable"),
        GroupOffset("reader-rc", "t", 1, 10, 1, "Stable", pending_transactional_commit=True),
        GroupOffset("reader-ru", "t", 0, 450, 2, "Stable"),
        GroupOffset("idle", "u", 0, -1, 2, "Empty"),
    )
    base = snapshot(
        producers=producers,
        partitions=[
            offsets("t", 0, hw=500, lso=100),
            offsets("t", 1, hw=60, lso=40),
            offsets("t", 2, hw=3, lso=3),
            offsets("u", 0, leader=2, hw=9, lso=7),
            offsets("u", 1, leader=2, hw=20, lso=12),
            offsets("v", 0, leader=2, hw=-1, lso=-1),  # offsets not read
        ],
        listed_txns=listed_txns,
        txns=txns,
        batches=[BatchTimestamp("t", 0, 100, NOW - 20 * MIN)],
        brokers=(1, 2),
        configs=[
            BrokerConfig(1, transaction_max_timeout_ms=10 * MIN, two_phase_commit_enabled=True),
            BrokerConfig(2, verification_enabled=False),
        ],
        errors=errors,
    )
    return dataclasses.replace(base, group_offsets=groups)


def _warmup() -> ClusterSnapshot:
    from exporter.pipeline.warmup import warmup_snapshot

    return warmup_snapshot()


#: (name, snapshot, settings, now in ms, whether the previous cycle's result is passed on).
CYCLES: tuple[tuple[str, Callable[[], ClusterSnapshot], PipelineSettings, int, bool], ...] = (
    ("warmup", _warmup, PipelineSettings(hanging_confirm_cycles=1), 1_800_000_000_000, False),
    ("rich-1", lambda: rich_snapshot(1), RICH_SETTINGS, NOW, False),
    ("rich-2", lambda: rich_snapshot(2), RICH_SETTINGS, NOW + 30 * SEC, True),
)


#: A fleet for one round (cluster, settings, consumer-group config): clusters that differ in
#: what the round's one plan reads per cluster.
ROUND_FLEET: tuple[tuple[str, PipelineSettings, GroupsConfig | None], ...] = (
    ("east", RICH_SETTINGS, RICH_GROUPS),
    (
        "west",
        PipelineSettings(hanging_confirm_cycles=1, max_findings=2, lso_lag_series="all"),
        GroupsConfig(enabled=True, blocked_after_cycles=1, max_group_series=1),
    ),
    ("plain", PipelineSettings(late_padding_ms=0), None),
)


def run_rounds(compute_round: Callable[[list[ClusterRun]], RoundResult]) -> list[dict[str, CycleResult]]:
    """Two rounds of :data:`ROUND_FLEET` on the rich snapshots (``plain`` is not ready for
    the second), each cluster's memory carried; each round's results by cluster."""
    rounds: list[dict[str, CycleResult]] = []
    memory: dict[str, PipelineMemory | None] = {name: None for name, _, _ in ROUND_FLEET}
    for cycle in (1, 2):
        runs = [
            ClusterRun(
                dataclasses.replace(rich_snapshot(cycle), cluster=name),
                memory[name],
                NOW + (cycle - 1) * 30 * SEC,
                settings,
                groups,
            )
            for name, settings, groups in ROUND_FLEET
            if not (cycle == 2 and name == "plain")
        ]
        outcome = compute_round(runs)
        assert not outcome.failures, outcome.failures
        memory.update({name: result.memory for name, result in outcome.results.items()})
        rounds.append(dict(outcome.results))
    return rounds


def run_cycles(
    compute_cycle: Callable[[ClusterSnapshot, PipelineSettings, CycleResult | None, int], CycleResult],
) -> list[CycleResult]:
    """Every cycle of :data:`CYCLES` in order, chaining ``previous`` where asked."""
    results: list[CycleResult] = []
    for _name, make, settings, now_ms, chained in CYCLES:
        previous = results[-1] if chained else None
        results.append(compute_cycle(make(), settings, previous, now_ms))
    return results


def comparable(result: CycleResult) -> dict[str, Any]:
    """A JSON round trip of the result: enums become their values, tuples lists."""
    loaded: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(result)))
    return loaded


def _strict_warnings() -> None:
    """The warning policy of pytest (pyproject ``filterwarnings``) in this process too."""
    warnings.simplefilter("error")
    for module in ("pyspark", "py4j"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=rf"{module}\..*")
    warnings.filterwarnings("ignore", category=ResourceWarning)
    # PySpark's Connect client warns at import time when pandas >= 3 is installed (what
    # ``pip install 'pyspark[connect]'`` resolves to today); the pipeline uses no pandas.
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )


def main(argv: list[str]) -> int:
    _strict_warnings()
    from pyspark import SparkContext

    from exporter.config import SparkConfig
    from exporter.pipeline.compute import compute
    from exporter.pipeline.rounds import compute_round
    from exporter.pipeline.session import FILE_MIN_ROWS_CONF, spark_session, stop

    (url,) = argv
    spark = spark_session(SparkConfig(connect_url=url))
    # Tables of 5 rows or more leave the plan as checkpoints (tables.Handover), as the
    # large tables of a real cluster do: the rich cycles read some of each kind.
    spark.conf.set(FILE_MIN_ROWS_CONF, "5")
    try:
        results = run_cycles(
            lambda snap, settings, previous, now_ms: compute(
                spark, snap, settings, previous.memory if previous else None, now_ms, groups=RICH_GROUPS
            )
        )
        rounds = run_rounds(lambda runs: compute_round(spark, runs))
        document = {
            "session": f"{type(spark).__module__}.{type(spark).__name__}",
            "jvm_in_client": SparkContext._active_spark_context is not None,
            "results": [comparable(r) for r in results],
            "rounds": [{name: comparable(r) for name, r in round_.items()} for round_ in rounds],
        }
    finally:
        stop(spark)
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
