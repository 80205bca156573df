"""The rounds :mod:`tests.integration.test_fleet_engines` runs on every engine.

Three rounds of a fleet, as the daemon hands them to ``compute_round``: clusters with
different settings in one round, a cluster's memory carried from round to round, a cluster
left out of a round that joins a later one, and a cluster whose input fails the engine (its
failure is its own). Imported by the test (the embedded local session) and run as a program
in a separate Python process on another engine (a Spark Connect server, a standalone
master: one engine per process)::

    python -m tests.integration.fleet_rounds --connect sc://127.0.0.1:PORT
    python -m tests.integration.fleet_rounds --master spark://127.0.0.1:PORT

prints one JSON document on stdout: ``{"session": ..., "rounds": [...]}``, each round
``{"results": {cluster: comparable result}, "failed": [cluster, ...]}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from exporter.model import ClusterSnapshot, PipelineMemory, PipelineSettings
from exporter.pipeline.rounds import ClusterRun, RoundResult
from tests.integration.spark_connect_cycles import (
    RICH_GROUPS,
    RICH_SETTINGS,
    _strict_warnings,
    _warmup,
    comparable,
    rich_snapshot,
)
from tests.unit.test_pipeline import NOW, SEC, offsets

WARMUP_NOW = 1_800_000_000_000
ONE = PipelineSettings(hanging_confirm_cycles=1)


def _named(snapshot: ClusterSnapshot, cluster: str) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, cluster=cluster)


def _broken() -> ClusterSnapshot:
    """An offset Spark's long cannot hold: the engine fails on this cluster's input."""
    snap = _warmup()
    return dataclasses.replace(snap, partitions=(dataclasses.replace(offsets(), high_watermark=2**70),))


#: (cluster, snapshot, settings, now, groups) per round. ``rich`` carries its memory over the
#: three rounds; ``warm`` is left out of round 2 and joins round 3 with its round-1 memory;
#: ``broken`` fails in round 1 only.
Entry = tuple[str, Callable[[], ClusterSnapshot], PipelineSettings, int, bool]
FLEET_ROUNDS: tuple[tuple[Entry, ...], ...] = (
    (
        ("rich", lambda: rich_snapshot(1), RICH_SETTINGS, NOW, True),
        ("warm", _warmup, ONE, WARMUP_NOW, False),
        ("broken", _broken, ONE, WARMUP_NOW, False),
    ),
    (
        ("rich", lambda: rich_snapshot(2), RICH_SETTINGS, NOW + 30 * SEC, True),
        ("broken", _warmup, ONE, WARMUP_NOW + 30 * SEC, False),
    ),
    (
        ("warm", _warmup, ONE, WARMUP_NOW + 60 * SEC, False),
        ("rich", lambda: rich_snapshot(2), RICH_SETTINGS, NOW + 60 * SEC, True),
    ),
)


def run_rounds(compute_round: Callable[[Sequence[ClusterRun]], RoundResult]) -> list[dict[str, Any]]:
    """Every round of :data:`FLEET_ROUNDS`, each cluster's memory carried to its next round."""
    memory: dict[str, PipelineMemory] = {}
    rounds: list[dict[str, Any]] = []
    for entries in FLEET_ROUNDS:
        runs = [
            ClusterRun(
                _named(make(), cluster),
                memory.get(cluster),
                now_ms,
                settings=settings,
                groups=RICH_GROUPS if groups else None,
            )
            for cluster, make, settings, now_ms, groups in entries
        ]
        outcome = compute_round(runs)
        for cluster, result in outcome.results.items():
            memory[cluster] = result.memory
        rounds.append(
            {
                "results": {c: comparable(r) for c, r in sorted(outcome.results.items())},
                "failed": sorted(outcome.failures),
            }
        )
    return rounds


def main(argv: list[str]) -> int:
    _strict_warnings()
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--connect")
    where.add_argument("--master")
    parser.add_argument(
        "--large", action="store_true", help="every round a large round (session.LARGE_ROUND_PARTITIONS)"
    )
    args = parser.parse_args(argv)
    from exporter.config import SparkConfig
    from exporter.pipeline.rounds import compute_round
    from exporter.pipeline.session import FILE_MIN_ROWS_CONF, LARGE_ROUND_CONF, spark_session, stop

    config = (
        SparkConfig(connect_url=args.connect)
        if args.connect
        else SparkConfig(
            master=args.master,
            app_name="kafka-txn-exporter-fleet-rounds",
            conf={
                "spark.executor.memory": "512m",
                "spark.executor.cores": "1",
                "spark.cores.max": "2",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            },
        )
    )
    spark = spark_session(config)
    # Tables of 5 rows or more leave the plan (checkpoints on a remote engine), as the large
    # tables of a real cluster do: the rounds read some of each kind.
    spark.conf.set(FILE_MIN_ROWS_CONF, "5")
    seen_at_collect: list[dict[str, str | None]] = []
    if args.large:
        from exporter.pipeline import compute, transport

        compute.LARGE_ROUND_PARTITIONS = 1  # type: ignore[attr-defined]
        collect = transport.collect

        def watched(seconds: dict[str, float], out: Any) -> Any:
            seen_at_collect.append({key: spark.conf.get(key, None) for key in LARGE_ROUND_CONF})
            return collect(seconds, out)

        transport.collect = watched
    conf_before = {key: spark.conf.get(key, None) for key in LARGE_ROUND_CONF}
    try:
        rounds = run_rounds(lambda runs: compute_round(spark, runs))
        document = {
            "session": f"{type(spark).__module__}.{type(spark).__name__}",
            "rounds": rounds,
            "conf_before": conf_before,
            "conf_at_collect": seen_at_collect,
            "conf_after": {key: spark.conf.get(key, None) for key in LARGE_ROUND_CONF},
        }
    finally:
        stop(spark)
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
